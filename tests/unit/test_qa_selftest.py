"""The built-in Neuron self-test: upstream's 2 x 2 x 2 matrix, its three data cases (fixed: well-formed
wrong data), and the controller-side repository that serves it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.test_qa_suites import add_sub
from tritonfleet.agent.qa.bind import bind_suite
from tritonfleet.agent.qa.selftest import CONFIGS, data_file, write_suites
from tritonfleet.agent.qa.suites import load_suite
from tritonfleet.genmodel.config import parse_text
from tritonfleet.genmodel.selftest import write_repository

NAMES = ("INPUT__0", "INPUT__1")
OUTS = ("OUTPUT__0", "OUTPUT__1")


def test_the_matrix_is_upstreams_eight_configurations():
    assert len(CONFIGS) == 8
    assert {(c.instances, c.batching, c.to_model) for c in CONFIGS} == {
        (n, b, m) for n in (1, 3) for b in (False, True) for m in (True, False)}
    for c in CONFIGS:
        assert (c.core_range, c.neuron_cores) == (("0:7", 8) if c.instances == 3 else ("0:0", 1))
    assert "add_sub_multiple_batched_no_batch" in {c.name for c in CONFIGS}


@pytest.mark.parametrize("batched", [True, False])
def test_the_data_cases(batched):
    correct, wrong, misaligned = (data_file(k, batched) for k in ("correct", "wrong", "misaligned"))
    assert (len(misaligned["data"]), len(misaligned["validation_data"])) == (4, 3)
    assert len(wrong["data"]) == len(wrong["validation_data"]) == len(correct["validation_data"]) == 4
    values = []
    for doc in (correct, wrong, misaligned):
        for step in doc["data"] + doc["validation_data"]:
            for tensor in step.values():  # well-formed: content fills its shape (upstream's had 23 of 24)
                assert len(tensor["content"]) == int(np.prod(tensor["shape"]))
                assert tensor["shape"] == ([4] if batched else [6, 4])
                values += tensor["content"]
    assert min(values) < 0
    for step, want in zip(correct["data"], correct["validation_data"], strict=True):
        a, b = (np.array(step[n]["content"]) for n in NAMES)
        assert want["OUTPUT__0"]["content"] == (a + b).tolist() and want["OUTPUT__1"]["content"] == (a - b).tolist()
    differ = [(i, name) for i, (w, c) in enumerate(zip(wrong["validation_data"], correct["validation_data"], strict=True))
              for name in OUTS if w[name] != c[name]]
    assert differ == [(1, "OUTPUT__1"), (3, "OUTPUT__1")]
    assert wrong["data"] == correct["data"] and misaligned["validation_data"] == correct["validation_data"][:3]


def test_the_suites_bind_to_add_sub(tmp_path):
    paths = write_suites(tmp_path / "qa")
    assert sorted(p.stem for p in paths) == sorted(c.name for c in CONFIGS)
    for cfg, path in zip(CONFIGS, paths, strict=True):
        ls = load_suite(path, f"selftest/{path.name}")
        assert ls.suite.neuron_cores == cfg.neuron_cores and ls.suite.concurrency == [1, 5, 9]
        info = add_sub(max_batch=1000 if cfg.batching else 0, names=NAMES, outs=OUTS, name=cfg.name)
        misaligned, wrong, correct = bind_suite(ls, info)
        assert (misaligned.expect, wrong.expect, correct.expect) == ("error", "fail", "pass")
        assert misaligned.data_error and "doesn't align" in misaligned.data_error
        assert wrong.reason == "OUTPUT__1" and correct.data_error is None
        if cfg.batching:  # batches of 6 from 4 entries: requests start at entries 0 and 2
            assert [s.batch for s in correct.samples] == [6, 6]
            assert correct.samples[1].inputs["INPUT__0"][:, 0].tolist() == [-1, -4, 1, 0, -1, -4]
        else:
            assert [s.inputs["INPUT__0"].shape for s in correct.samples] == [(6, 4)] * 4
        for s in correct.samples:
            a, b = (s.inputs[n] for n in NAMES)
            assert (s.expected["OUTPUT__0"] == a + b).all() and (s.expected["OUTPUT__1"] == a - b).all()


def _config(repo, cfg):
    return parse_text((repo.models / cfg.name / "config.pbtxt").read_text())


def test_the_repository_has_upstreams_options(tmp_path):
    compiled = tmp_path / "add_sub.pt"
    compiled.write_bytes(b"stand-in: not loaded here")
    repo = write_repository(tmp_path / "st", "inf1", compiled_model=compiled)
    assert [c.name for c in repo.configs] == [c.name for c in CONFIGS] and not repo.skipped
    for cfg in CONFIGS:
        c = _config(repo, cfg)
        params = {k: v.string_value for k, v in c.parameters.items()}
        assert (params["NEURON_CORE_START_INDEX"], params["NEURON_CORE_END_INDEX"]) == \
            (("0", "7") if cfg.instances == 3 else ("0", "0"))
        assert params["DISABLE_BATCH_REQUESTS_TO_NEURON"] == ("false" if cfg.to_model else "true")
        assert params["COMPILED_MODEL"] == "model.pt" and params["TARGET"] == "inf1"
        assert c.instance_group[0].count == cfg.instances
        assert [i.name for i in c.input] == list(NAMES) and [o.name for o in c.output] == list(OUTS)
        if cfg.batching:
            assert c.max_batch_size == 1000 and list(c.input[0].dims) == [4]
            assert list(c.dynamic_batching.preferred_batch_size) == [8]
            assert c.dynamic_batching.max_queue_delay_microseconds == 100
        else:
            assert c.max_batch_size == 0 and list(c.input[0].dims) == [-1, 4] and not c.HasField("dynamic_batching")
        assert (repo.models / cfg.name / "model.pt").read_bytes() == compiled.read_bytes()
        assert (repo.models / cfg.name / "1" / "model.py").is_file()
    assert sorted(p.name for p in repo.suites.glob("*.yaml")) == sorted(f"{c.name}.yaml" for c in CONFIGS)
    assert json.loads((repo.suites / "data" / "misaligned_batched.json").read_text()) == data_file("misaligned", True)


def test_configurations_too_big_for_the_host_are_left_out(tmp_path):
    compiled = tmp_path / "add_sub.pt"
    compiled.write_bytes(b"x")
    repo = write_repository(tmp_path / "st", "inf2", neuron_cores=2, compiled_model=compiled)
    assert {c.instances for c in repo.configs} == {1} and {c.instances for c in repo.skipped} == {3}
    assert sorted(p.name for p in repo.models.iterdir()) == sorted(c.name for c in repo.configs)
    assert len(list(repo.suites.glob("*.yaml"))) == 8  # the runner skips the others given --neuron-cores 2
