"""tritonfleet.footprint: declared and estimated footprints from a model repository on disk, instance counts
from instance_group, the served version, a server's capacity less headroom, and the one-line fit error."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tritonfleet import catalog
from tritonfleet.footprint import (
    GPU_FACTOR,
    MIB,
    NEURON_FACTOR,
    Capacity,
    Footprint,
    FootprintError,
    MemoryPlanError,
    capacity_mib,
    check_fit,
    model_footprint,
    read_config,
    repository_footprints,
    repository_models,
    server_capacity,
    with_headroom,
)
from tritonfleet.placement import ServerSpec, place

DECLARE = 'parameters {{ key: "tritonfleet_memory_mib" value: {{ string_value: "{mib}" }} }}\n'


def write_model(repo: Path, name: str, config: str = "", files: dict[str, int] | None = None) -> Path:
    """A model directory: config.pbtxt (``name`` and ``config``) and ``files`` (relative path -> size in bytes)."""
    d = repo / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    for rel, size in (files or {}).items():
        f = d / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"\0" * size)
    return d


# -- declared -------------------------------------------------------------------------------------------------

def test_a_declared_footprint_is_taken_as_it_is_per_instance(tmp_path):
    d = write_model(tmp_path, "bert", 'backend: "python"\ninstance_group [ { kind: KIND_MODEL count: 2 } ]\n'
                    + DECLARE.format(mib=12288), {"1/model.pt": 5 * MIB})
    f = model_footprint(d, "neuron")
    assert (f.model, f.mib_each, f.instances, f.total_mib, f.source) == ("bert", 12288, 2, 24576, "declared")
    assert "tritonfleet_memory_mib" in f.why
    # declared wins over the artifacts on GPU servers too
    assert model_footprint(d, "gpu").mib_each == 12288


@pytest.mark.parametrize("value", ["12GB", "-5", "1.5", "", "0x10"])
def test_a_declared_value_that_is_no_whole_mib_is_one_line_naming_the_model(tmp_path, value):
    d = write_model(tmp_path, "bert", DECLARE.format(mib=value), {"1/model.pt": 10})
    with pytest.raises(FootprintError) as err:
        model_footprint(d)
    assert str(err.value).startswith("bert: parameters tritonfleet_memory_mib")
    assert "\n" not in str(err.value)


def test_a_config_that_does_not_parse_is_one_line(tmp_path):
    d = write_model(tmp_path, "bad", "instance_group [ { kind: KIND_NOPE } ]\n", {"1/model.pt": 10})
    with pytest.raises(FootprintError) as err:
        model_footprint(d)
    assert "not a valid config.pbtxt" in str(err.value) and "\n" not in str(err.value)


def test_the_config_is_triton_protobuf_message(tmp_path):
    d = write_model(tmp_path, "m", 'max_batch_size: 8\nbackend: "onnxruntime"\n')
    assert read_config(d / "config.pbtxt").max_batch_size == 8


# -- instances ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("groups", "neuron", "gpu2"), [
    ("", 1, 2),  # no group: one instance (on GPU servers: one per GPU)
    ("instance_group [ { kind: KIND_MODEL count: 3 } ]", 3, 3),
    ("instance_group [ { kind: KIND_MODEL } ]", 1, 1),  # count unset: Triton's 1
    ("instance_group [ { kind: KIND_MODEL count: 2 }, { kind: KIND_MODEL count: 3 } ]", 5, 5),
    ("instance_group [ { kind: KIND_CPU count: 4 } ]", 0, 0),  # CPU instances hold no accelerator memory
    ("instance_group [ { kind: KIND_CPU count: 4 }, { kind: KIND_MODEL count: 1 } ]", 1, 1),
    ("instance_group [ { kind: KIND_GPU count: 2 } ]", 2, 4),  # no gpus listed: count on every GPU
    ("instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]", 2, 2),
    ("instance_group [ { kind: KIND_AUTO count: 1 } ]", 1, 2),
])
def test_instances_come_from_instance_group(tmp_path, groups, neuron, gpu2):
    d = write_model(tmp_path, "m", groups + "\n" + DECLARE.format(mib=100))
    assert model_footprint(d, "neuron").instances == neuron
    f = model_footprint(d, "gpu", gpus=2)
    assert f.instances == gpu2 and f.total_mib == 100 * gpu2


# -- estimated ------------------------------------------------------------------------------------------------

def test_neuron_estimate_is_the_artifacts_times_the_factor_rounded_up(tmp_path):
    d = write_model(tmp_path, "resnet", 'platform: "pytorch_libtorch"\n',
                    {"1/model.neff": 3 * MIB, "1/weights/extra.bin": MIB + 1})
    f = model_footprint(d, "neuron")
    assert f.source == "estimated"
    assert f.mib_each == math.ceil((4 * MIB + 1) * NEURON_FACTOR / MIB) == 6
    assert f.instances == 1 and f.total_mib == 6
    assert "x 1.25" in f.why


def test_gpu_estimate_is_the_artifacts_size(tmp_path):
    d = write_model(tmp_path, "resnet", "", {"1/model.plan": 10 * MIB})
    assert GPU_FACTOR == 1.0
    assert model_footprint(d, "gpu").mib_each == 10


def test_the_highest_version_is_estimated_not_the_biggest_nor_all(tmp_path):
    d = write_model(tmp_path, "m", "", {"1/model.pt": 5 * MIB, "2/model.pt": 3 * MIB, "10/model.pt": 1 * MIB,
                                        "notaversion/model.pt": 9 * MIB})
    f = model_footprint(d, "gpu")
    assert f.mib_each == 1  # 10 > 2 numerically
    assert "version 10" in f.why


@pytest.mark.parametrize(("policy", "mib"), [
    ("version_policy: { latest: { num_versions: 2 } }", 4),
    ("version_policy: { all: { } }", 9),
    ("version_policy: { specific: { versions: [ 1, 3 ] } }", 5),
])
def test_the_version_policy_says_which_versions_are_loaded(tmp_path, policy, mib):
    d = write_model(tmp_path, "m", policy + "\n", {"1/model.pt": 5 * MIB, "2/model.pt": 3 * MIB,
                                                   "10/model.pt": 1 * MIB})
    assert model_footprint(d, "gpu").mib_each == mib


def test_a_python_backend_model_with_only_model_py_is_zero_unless_declared(tmp_path):
    d = write_model(tmp_path, "add_sub", 'backend: "python"\n', {"1/model.py": 4 * MIB,
                                                                "1/__pycache__/model.cpython-311.pyc": MIB,
                                                                "1/.hidden": MIB})
    f = model_footprint(d, "neuron")
    assert (f.mib_each, f.total_mib, f.source) == (0, 0, "estimated")
    assert "python" in f.why
    (d / "config.pbtxt").write_text('name: "add_sub"\nbackend: "python"\n' + DECLARE.format(mib=300))
    assert model_footprint(d, "neuron").total_mib == 300


def test_a_compiled_model_parameter_inside_the_model_dir_counts(tmp_path):
    outside = tmp_path / "elsewhere.pt"
    outside.write_bytes(b"\0" * 7 * MIB)
    config = ('backend: "python"\nparameters { key: "COMPILED_MODEL" value: { string_value: "compiled/model.pt" } }\n')
    d = write_model(tmp_path / "repo", "gm", config, {"1/model.py": 100, "compiled/model.pt": 4 * MIB})
    assert model_footprint(d, "neuron").mib_each == 5  # 4 MiB x 1.25
    (d / "config.pbtxt").write_text(config.replace("compiled/model.pt", str(outside)))
    assert model_footprint(d, "neuron").mib_each == 0  # outside the model directory: not part of the repository


def test_no_version_directory_cannot_be_estimated(tmp_path):
    d = write_model(tmp_path, "empty", "")
    with pytest.raises(FootprintError, match="empty: no numeric version directory"):
        model_footprint(d)
    (d / "config.pbtxt").write_text('name: "empty"\n' + DECLARE.format(mib=64))
    assert model_footprint(d).total_mib == 64


def test_repository_footprints_reads_every_model_with_a_config(tmp_path):
    write_model(tmp_path, "a", DECLARE.format(mib=10))
    write_model(tmp_path, "b", "", {"3/model.onnx": 2 * MIB})
    (tmp_path / "not_a_model").mkdir()
    (tmp_path / "README").write_text("x")
    assert repository_models(tmp_path) == ["a", "b"]
    prints = repository_footprints(tmp_path, "gpu")
    assert {m: f.total_mib for m, f in prints.items()} == {"a": 10, "b": 2}
    assert list(repository_footprints(tmp_path, models=["b"])) == ["b"]
    with pytest.raises(FootprintError, match="model.s. c not in the repository"):
        repository_footprints(tmp_path, models=["a", "c"])
    with pytest.raises(FootprintError, match="no such model repository"):
        repository_footprints(tmp_path / "missing")


# -- capacity -------------------------------------------------------------------------------------------------

def test_capacity_of_a_neuron_server_is_its_devices_less_headroom():
    inf2 = catalog.get("inf2.24xlarge")
    left, right = place(inf2, [ServerSpec(devices=[0]), ServerSpec(devices=[1, 2, 3])])
    assert capacity_mib(inf2, left, 10) == 29491  # floor(32768 * 0.9)
    cap = server_capacity(inf2, right, 10)
    assert cap == Capacity(3, "device", 3 * 32768, 10, 88473)
    assert capacity_mib(inf2, right, 0) == 98304
    assert capacity_mib(inf2, right, 25) == 73728


def test_capacity_of_a_gpu_server_is_its_gpus_memory():
    g5 = catalog.get("g5.12xlarge")
    a, b = place(g5, [ServerSpec(gpus=[0]), ServerSpec(gpus=[1, 2, 3])])
    assert server_capacity(g5, a, 0) == Capacity(1, "GPU", 24576, 0, 24576)
    assert capacity_mib(g5, b, 10) == math.floor(3 * 24576 * 0.9)


@pytest.mark.parametrize("bad", [-1, 100, 150])
def test_headroom_is_a_percentage_below_100(bad):
    with pytest.raises(ValueError, match="headroom"):
        with_headroom(1000, bad)


# -- fit ------------------------------------------------------------------------------------------------------

def fp(model: str, each: int, instances: int = 1) -> Footprint:
    return Footprint(model, each, instances, each * instances, "declared", "test")


def test_models_that_do_not_fit_are_one_line_naming_host_server_biggest_need_and_capacity():
    cap = server_capacity(catalog.get("inf2.xlarge"), place(catalog.get("inf2.xlarge"))[0], 10)
    with pytest.raises(MemoryPlanError) as err:
        check_fit("inf2-1", "bert", [fp("small", 1024), fp("bert", 12288, 2), fp("mid", 5120)], cap)
    assert str(err.value) == ("inf2-1: server bert: models need 30720 MiB (bert 2 x 12288 MiB, mid 1 x 5120 MiB, "
                              "small 1 x 1024 MiB) but its 1 device(s) hold 32768 MiB less 10% headroom = 29491 MiB")


def test_more_than_three_models_are_cut_short():
    with pytest.raises(MemoryPlanError) as err:
        check_fit("h", "s", [fp(m, 10) for m in "abcde"], 20)
    assert str(err.value) == ("h: server s: models need 50 MiB (a 1 x 10 MiB, b 1 x 10 MiB, c 1 x 10 MiB, ...) "
                              "but it holds 20 MiB")


def test_a_fit_returns_the_free_mib_and_an_exact_fit_fits():
    assert check_fit("h", "s", [fp("a", 100, 2), fp("b", 50)], 300) == 50
    assert check_fit("h", "s", [fp("a", 100, 2), fp("b", 50)], 250) == 0
    assert check_fit("h", "s", [], 0) == 0
    with pytest.raises(MemoryPlanError):
        check_fit("h", "s", [fp("a", 100, 2), fp("b", 50)], 249)


def test_fit_uses_instances_and_capacity_objects():
    cap = Capacity(1, "device", 1000, 10, 900)
    assert check_fit("h", "s", [fp("a", 300, 3)], cap) == 0
    with pytest.raises(MemoryPlanError, match="need 1200 MiB"):
        check_fit("h", "s", [fp("a", 300, 4)], cap)
