"""Generated CPU-target models on the real Triton 2.51 server (nvidia-pytriton wheel)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from genmodel_harness import parse_tagged
from served_models import CPU_MATRIX, SINGLE_OUTPUT, ServedModel
from serving import assert_exact, expected, hammer, infer, random_inputs
from tritonclient.utils import InferenceServerException

from tritonfleet.genmodel.config import parse_text
from tritonfleet.genmodel.spec import allocate_cores

pytestmark = pytest.mark.slow
SERVED = [*CPU_MATRIX, SINGLE_OUTPUT]


@pytest.mark.parametrize("concurrency", [1, 5, 9])
@pytest.mark.parametrize("model", SERVED, ids=lambda m: m.name)
def test_exact_results_under_concurrency(served, model: ServedModel, concurrency: int):
    server, _ = served
    assert hammer(server.grpc_url, model, concurrency, seed=concurrency) == concurrency * 4


def test_matrix_covers_instances_batching_modes_and_dtypes():
    combos = {(m.instances, m.batched, m.batch_to_model) for m in CPU_MATRIX}
    assert len(combos) == 8
    for dtype in ("INT64", "FP32"):
        assert {(m.instances, m.batched) for m in CPU_MATRIX if m.dtype == dtype} == {
            (1, True),
            (1, False),
            (3, True),
            (3, False),
        }
        assert {m.batch_to_model for m in CPU_MATRIX if m.dtype == dtype} == {True, False}


def _stats(server, name: str) -> dict:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        return client.get_inference_statistics(name, as_json=True)["model_stats"][0]
    finally:
        client.close()


def test_batch_to_model_concatenates_several_requests(served):
    """With dynamic batching, execute() got several requests at once and still answered each exactly."""
    server, models = served
    m = models["cpu_i64_b1_batch"]
    hammer(server.grpc_url, m, concurrency=9, per_worker=6, seed=99)
    stats = _stats(server, m.name)
    requests = int(stats["inference_stats"]["success"]["count"])
    executions = int(stats["execution_count"])
    assert executions < requests, stats


@pytest.mark.parametrize("model", [m for m in CPU_MATRIX if m.instances == 3], ids=lambda m: m.name)
def test_each_of_three_instances_saw_its_own_core_range(served, model: ServedModel):
    server, _ = served
    start, end = (int(x) for x in model.core_range.split(":"))
    want = {i: f"{a}-{b}" for i, (a, b) in enumerate(allocate_cores(start, end, 3))}
    assert want == {0: "0-1", 1: "2-3", 2: "4-5"}
    inits = [r for r in server.tagged() if r.get("model") == model.name and "index" in r]
    assert len(inits) == 3, inits
    assert {int(r["index"]): r["cores"] for r in inits} == want
    assert {int(r["index"]): r["NEURON_RT_VISIBLE_CORES"] for r in inits} == want
    assert len({r["instance"] for r in inits}) == 3
    assert len({r["pid"] for r in inits}) == 3  # one stub process per instance
    for r in inits:
        assert r["instance"].endswith(f"_{r['index']}")


def test_cpu_models_import_no_neuron_module(served):
    server, _ = served
    records = server.tagged()
    cpu_names = {m.name for m in SERVED}
    cpu_pids = {r["pid"] for r in records if r.get("model") in cpu_names and "pid" in r}
    assert cpu_pids
    assert not [r for r in records if r.get("model") in cpu_names and "imported" in r]
    standin_pids = {r.get("pid") for r in parse_tagged(server.log_text(), "tritonfleet-standin")}
    assert not cpu_pids & standin_pids
    for m in SERVED:
        model_py = (server.repository / m.name / str(m.version) / "model.py").read_text()
        assert "NEURON_MODULES = ()" in model_py
        for module in ("torch_neuron", "torch.neuron", "torch_neuronx", "tensorflow", "transformers_neuronx"):
            assert f'"{module}"' not in model_py and f"'{module}'" not in model_py


@pytest.mark.parametrize("name", ["cpu_i64_u1_req", "cpu_i64_u3_batch"])
def test_a_failing_request_gets_its_own_error(served, name):
    server, models = served
    m = models[name]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        rng = np.random.default_rng(5)
        a, _ = random_inputs(m, rng, rows=2)
        _, b = random_inputs(m, rng, rows=3)
        with pytest.raises(InferenceServerException) as err:
            infer(client, m, a, b)
        assert name in str(err.value) and "must match" in str(err.value)
        a, b = random_inputs(m, rng, rows=3)
        assert_exact(infer(client, m, a, b), expected(m, a, b))
    finally:
        client.close()

    # good and bad requests interleaved from 6 clients: only the bad ones fail
    def worker(k: int) -> str:
        c = grpcclient.InferenceServerClient(server.grpc_url)
        r = np.random.default_rng(100 + k)
        try:
            if k % 2:
                a, _ = random_inputs(m, r, rows=2)
                _, b = random_inputs(m, r, rows=3)  # 2 vs 3 rows: no broadcasting
                try:
                    infer(c, m, a, b)
                except InferenceServerException:
                    return "error"
                return "unexpected success"
            a, b = random_inputs(m, r)
            assert_exact(infer(c, m, a, b), expected(m, a, b))
            return "ok"
        finally:
            c.close()

    with ThreadPoolExecutor(6) as pool:
        assert sorted(pool.map(worker, range(6))) == ["error"] * 3 + ["ok"] * 3


def test_model_version_is_honoured(served):
    server, _ = served
    m = SINGLE_OUTPUT
    model_dir = server.repository / m.name
    assert (model_dir / "2" / "model.py").is_file()
    assert not (model_dir / "1").exists()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        meta = client.get_model_metadata(m.name, as_json=True)
        assert meta["versions"] == ["2"]
        assert meta["outputs"][0]["datatype"] == "FP64"
    finally:
        client.close()


def test_compiled_model_paths_resolve_against_the_model_directory(served):
    server, models = served
    records = [r for r in server.tagged() if "compiled_model" in r]
    by_model = {r["model"]: r["compiled_model"] for r in records}
    for name in ("cpu_i64_b1_batch", "inf1_i64_b3"):
        cfg = parse_text((server.repository / name / "config.pbtxt").read_text())
        assert cfg.parameters["COMPILED_MODEL"].string_value == "model.pt"
        assert by_model[name] == str(server.repository / name / "model.pt")
    cfg = parse_text((server.repository / "cpu_f32_b1_req" / "config.pbtxt").read_text())
    outside = cfg.parameters["COMPILED_MODEL"].string_value
    assert outside.startswith("/") and outside == by_model["cpu_f32_b1_req"]
    assert models["cpu_f32_b1_req"].batch_to_model is False
