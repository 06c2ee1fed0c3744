"""The host agent's config.pbtxt reader (``tritonfleet.agent.memory.config_from_text``, no protobuf) against the
controller's (protobuf and Triton's ``ModelConfig``, ``tritonfleet.footprint.read_view``): the same
:class:`~tritonfleet.agent.memory.Config` (parameters, instance groups, version policy) on the same text, hand
written in every spelling the text format allows and generated from random ``ModelConfig`` messages; the same
footprints from the same repository; and a one-line error where protobuf refuses what the rules read."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2 as mc

from tritonfleet import footprint
from tritonfleet.agent import memory
from tritonfleet.agent.memory import Config, ConfigSyntaxError, Group, config_from_text

DECLARE = 'parameters {{ key: "tritonfleet_memory_mib" value: {{ string_value: "{mib}" }} }}\n'


def both(text: str) -> tuple[Config, Config]:
    """(protobuf's view, the agent's) of the same text."""
    return footprint.config_view(text_format.Parse(text, mc.ModelConfig())), config_from_text(text)


SPELLINGS = [
    "",
    'name: "m"\nbackend: "python"\nmax_batch_size: 8\n',
    DECLARE.format(mib=12288),
    # what gen-model and the sandbox write, with inputs, outputs and batching the rules skip over
    'name: "add_sub"\nbackend: "python"\nmax_batch_size: 0\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]\n'
    'instance_group [ { kind: KIND_MODEL count: 2 } ]\n'
    'dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }\n'
    'parameters { key: "COMPILED_MODEL" value: { string_value: "compiled/model.pt" } }\n'
    'parameters: { key: "tritonfleet_memory_mib", value: { string_value: "300" } }\n',
    # comments, <> messages, no colon before a message, ; and , separators, repeated entries one by one
    "# a comment\ninstance_group < kind: KIND_GPU count: 3 gpus: 0 gpus: 1 >; # another\n"
    "instance_group { kind: KIND_CPU, count: 4 }\ninstance_group: [ ]\n",
    # enums by number (KIND_GPU = 1, KIND_CPU = 2), hex and C-octal integers, open enum values
    "instance_group [ { kind: 1 count: 0x10 }, { kind: 2 count: 010 }, { kind: 7 } ]\n",
    # adjacent strings, single quotes, escapes; the last entry of a map key wins
    "parameters { key: 'tritonfleet_' \"memory_mib\" value { string_value: \"1\\x32\\063\" } }\n"
    'parameters { key: "COMPILED_MODEL" value { string_value: "a\\tb\\303\\251\\"q\\"" } }\n'
    'parameters { key: "COMPILED_MODEL" value { string_value: "second" } }\n'
    'parameters { key: "no_value" }\n',
    # version policies
    "version_policy: { latest: { num_versions: 2 } }\n",
    "version_policy { latest { } }\n",
    "version_policy: { all: { } }\n",
    "version_policy { specific { versions: [ 1, 3 ] versions: 10 } }\n",
    "version_policy { }\n",
    # the rules' fields nested elsewhere are not the model's: an accelerator's parameters, an ensemble's steps
    'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" parameters { '
    'key: "tritonfleet_memory_mib" value: "1" } } ] } }\n'
    'ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x" value: "y" } } ] }\n',
    # floats, bools and negative numbers elsewhere
    'model_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: [ -1 ] '
    "zero_data: true } } } ]\nresponse_cache { enable: true }\n"
    'sequence_batching { max_sequence_idle_microseconds: 5000000 control_input [ { name: "START" control [ { '
    'kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0.0, 1.5e0 ] } ] } ] }\n',
]


@pytest.mark.parametrize("text", SPELLINGS, ids=range(len(SPELLINGS)))
def test_both_readers_read_the_same_from_every_spelling(text):
    pb, agent = both(text)
    assert agent == pb


def test_what_the_agent_reads_of_a_config():
    config = config_from_text(SPELLINGS[3])
    assert config == Config({"COMPILED_MODEL": "compiled/model.pt", "tritonfleet_memory_mib": "300"},
                            (Group("KIND_MODEL", 2, ()),))
    assert config_from_text(SPELLINGS[5]).groups == (Group("KIND_GPU", 16), Group("KIND_CPU", 8), Group("7"))
    assert config_from_text(SPELLINGS[6]).parameters == {"tritonfleet_memory_mib": "123",
                                                         "COMPILED_MODEL": "second", "no_value": ""}
    assert config_from_text(SPELLINGS[10]) == Config(policy="specific", versions=(1, 3, 10))


@pytest.mark.parametrize("text", [
    "instance_group [ { kind: KIND_NOPE } ]",  # not a kind
    'instance_group [ { kind: "KIND_GPU" } ]',  # an enum is no string
    "instance_group [ { count: many } ]",
    'parameters { key: "k" value { string_value: 12 } }',
    'parameters { key: "k" value { string_value: "open } }',
    "instance_group [ { count: 1 }",  # not closed
    "name",  # no value
    'name "m"',  # a scalar needs its colon
    "instance_group { count: 1 } }",
    "version_policy { specific { versions: [ 1, x ] } }",
    "$",
])
def test_what_protobuf_refuses_the_agent_refuses_in_one_line(tmp_path, text):
    with pytest.raises(text_format.ParseError):
        text_format.Parse(text, mc.ModelConfig())
    with pytest.raises(ConfigSyntaxError):
        config_from_text(text)
    (tmp_path / "config.pbtxt").write_text(text)
    with pytest.raises(memory.FootprintError) as err:
        memory.read_config(tmp_path / "config.pbtxt")
    assert "not a valid config.pbtxt" in str(err.value) and "\n" not in str(err.value)


# -- random ModelConfig messages, printed every way protobuf prints them ---------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
kinds = st.sampled_from([mc.ModelInstanceGroup.KIND_AUTO, mc.ModelInstanceGroup.KIND_GPU,
                         mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_MODEL])
groups = st.lists(st.tuples(kinds, st.integers(0, 2**31 - 1), st.lists(st.integers(-5, 2**31 - 1), max_size=3),
                            names), max_size=4)
params = st.dictionaries(st.one_of(st.just("tritonfleet_memory_mib"), st.just("COMPILED_MODEL"), names), names,
                         max_size=4)
policies = st.one_of(st.none(), st.just("empty"), st.tuples(st.just("latest"), st.integers(0, 2**32 - 1)),
                     st.just("all"), st.tuples(st.just("specific"), st.lists(st.integers(-2**63, 2**63 - 1),
                                                                              max_size=4)))


def message(name, group_list, parameters, policy, batch) -> mc.ModelConfig:
    m = mc.ModelConfig(name=name, max_batch_size=batch)
    for kind, count, gpus, group_name in group_list:
        m.instance_group.add(kind=kind, count=count, gpus=gpus, name=group_name)
    for key, value in parameters.items():
        m.parameters[key].string_value = value
    m.input.add(name="x", data_type=mc.TYPE_FP32, dims=[-1, 3])
    if policy == "empty":
        m.version_policy.SetInParent()
    elif policy == "all":
        m.version_policy.all.SetInParent()
    elif policy is not None and policy[0] == "latest":
        m.version_policy.latest.num_versions = policy[1]
    elif policy is not None:
        m.version_policy.specific.versions.extend(policy[1])
    return m


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names, groups, params, policies, st.integers(0, 64), st.booleans(), st.booleans(), st.booleans(),
       st.booleans())
def test_both_readers_agree_on_random_model_configs(name, group_list, parameters, policy, batch, one_line,
                                                    short_repeated, pointy, utf8):
    m = message(name, group_list, parameters, policy, batch)
    text = text_format.MessageToString(m, as_one_line=one_line, use_short_repeated_primitives=short_repeated,
                                       pointy_brackets=pointy, as_utf8=utf8)
    assert config_from_text(text) == footprint.config_view(m) == footprint.config_view(
        text_format.Parse(text, mc.ModelConfig()))


# -- the same footprints from the same repository ------------------------------------------------------------

def test_both_readers_give_the_same_footprints(tmp_path: Path):
    def model(name: str, config: str, files: dict[str, int]) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(config)
        for rel, size in files.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_bytes(b"\0" * size)

    model("declared", "instance_group [ { kind: KIND_GPU count: 2 } ]\n" + DECLARE.format(mib=700), {"1/m.pt": 9})
    model("estimated", "version_policy: { latest: { num_versions: 2 } }\n"
          'parameters { key: "COMPILED_MODEL" value: { string_value: "c.neff" } }\n',
          {"1/a.bin": 3 * footprint.MIB, "2/a.bin": 5 * footprint.MIB, "3/a.bin": footprint.MIB, "c.neff": 100})
    model("cpu", "instance_group [ { kind: KIND_CPU count: 4 } ]\n", {"1/model.onnx": footprint.MIB})
    (tmp_path / "noconfig" / "1").mkdir(parents=True)  # named by a server: Triton's defaults
    (tmp_path / "noconfig" / "1" / "w.bin").write_bytes(b"\0" * 10)
    for accelerator, gpus in (("neuron", 1), ("gpu", 1), ("gpu", 4)):
        for models in (None, ["declared", "cpu", "noconfig", "absent"]):
            ours = memory.server_footprints(tmp_path, models, accelerator, gpus)
            assert ours == footprint.server_footprints(tmp_path, models, accelerator, gpus)
            assert [f.model for f in ours] == (["declared", "estimated", "cpu"] if models is None
                                               else ["declared", "noconfig", "cpu"])
    neuron = {f.model: f.total_mib for f in memory.server_footprints(tmp_path, None, "neuron")}
    assert neuron == {"declared": 1400, "estimated": 8, "cpu": 0}  # versions 2 and 3 and c.neff: 6 MiB 100 B x 1.25
    assert {f.model: f.total_mib for f in memory.server_footprints(tmp_path, None, "gpu", 4)}["declared"] == 5600
