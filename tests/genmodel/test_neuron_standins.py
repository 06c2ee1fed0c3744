"""inf1/inf2 models served on CPU with stand-in Neuron framework modules.

The stand-ins (tests/genmodel/standins) only record that they were imported, and by whom, and
run the same TorchScript/numpy add_sub on CPU. This shows the generated model.py imports the
Neuron module first, after pinning the instance's cores, and serves exactly like the CPU target.
It does not show that a compiled NEFF loads on a real NeuronCore.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from genmodel_harness import parse_tagged
from served_models import INF1, INF2, TF, TNX, TNX_BATCH_SIZE, TNX_N_POSITIONS, ServedModel
from serving import hammer
from tritonclient.utils import InferenceServerException

from tritonfleet.genmodel.config import parse_text

pytestmark = pytest.mark.slow


def _records(server, model: ServedModel) -> tuple[list[dict], list[dict]]:
    """(model.py records of ``model``, stand-in records of that model's stub processes)."""
    ours = [r for r in server.tagged() if r.get("model") == model.name]
    pids = {r["pid"] for r in ours if "pid" in r}
    theirs = [r for r in parse_tagged(server.log_text(), "tritonfleet-standin") if r.get("pid") in pids]
    return ours, theirs


@pytest.mark.parametrize("concurrency", [1, 5, 9])
@pytest.mark.parametrize("model", [INF1, INF2, TF], ids=lambda m: m.name)
def test_same_serving_behaviour_as_cpu(served, model: ServedModel, concurrency: int):
    server, _ = served
    assert hammer(server.grpc_url, model, concurrency, seed=concurrency) == concurrency * 4


NEURON_MODULE = {
    INF1.name: "torch_neuron",
    INF2.name: "torch_neuronx",
    TF.name: "tensorflow_neuronx",
    TNX.name: "transformers_neuronx",
}


@pytest.mark.parametrize("model", [INF1, INF2, TF, TNX], ids=lambda m: m.name)
def test_neuron_module_is_imported_first_with_the_cores_pinned(served, model: ServedModel):
    server, _ = served
    module = NEURON_MODULE[model.name]
    ours, theirs = _records(server, model)
    inits = {r["pid"]: r for r in ours if "index" in r}
    assert len(inits) == model.instances
    imported = {r["pid"]: r["imported"] for r in ours if "imported" in r}
    assert imported == {pid: module for pid in inits}
    imports = {r["pid"]: r for r in theirs if r["event"] == "import" and r["module"] == module}
    assert set(imports) == set(inits)
    start, end = (int(x) for x in model.core_range.split(":"))
    per = (end - start + 1) // model.instances
    for pid, init in inits.items():
        record = imports[pid]
        preloaded = record.get("torch_preloaded", record.get("tensorflow_preloaded"))
        assert preloaded == "False", record  # the Neuron module came before torch / tensorflow
        if model.model_type == "tensorflow":
            assert record["NEURON_RT_NUM_CORES"] == str(per)
            assert record["NEURON_RT_VISIBLE_CORES"] == "unset"
        else:
            assert record["NEURON_RT_VISIBLE_CORES"] == init["cores"]
    # instance k got cores k*per .. k*per+per-1
    assert sorted(r["cores"] for r in inits.values()) == [
        f"{start + k * per}-{start + k * per + per - 1}" for k in range(model.instances)
    ]


def test_log_order_is_cores_then_import_then_load(served):
    server, _ = served
    lines = server.log_text().splitlines()
    for model in (INF1, INF2):
        ours, _ = _records(server, model)
        for pid in {r["pid"] for r in ours}:
            events = []
            for line in lines:
                if f"pid={pid}" not in line:
                    continue
                if "cores=" in line:
                    events.append("cores")
                elif "event=import" in line:
                    events.append("import")
                elif " loaded " in line:
                    events.append("loaded")
            assert events == ["cores", "import", "loaded"], events


@pytest.mark.parametrize("model", [INF1, INF2], ids=lambda m: m.name)
def test_data_parallel_spans_all_cores_of_an_instance(served, model: ServedModel):
    server, _ = served
    _, theirs = _records(server, model)
    dp = [r for r in theirs if r["event"] == "DataParallel"]
    assert len(dp) == model.instances
    assert {r["device_ids"] for r in dp} == {"0,1"}  # 2 cores per instance, numbered from the visible range


def test_tensorflow_loads_one_copy_per_core_and_splits_over_threads(served):
    server, _ = served
    ours, theirs = _records(server, TF)
    loads = [r for r in theirs if r["event"] == "load_model"]
    assert len(loads) == TF.instances * 2  # 2 cores each
    assert all(r["path"].endswith("/inf2_tf_b2/saved_model") for r in loads)
    assert {r["threads"] for r in ours if "threads" in r} == {"4"}  # 2 copies x --threads_per_core 2


def test_transformers_neuronx_parameters_come_from_config(served):
    server, _ = served
    cfg = parse_text((server.repository / TNX.name / "config.pbtxt").read_text())
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params["TP_DEGREE"] == "2" and params["N_POSITIONS"] == "16"
    assert params["AMP"] == "f16" and params["BATCH_SIZE"] == "2"
    assert params["TNX_MODEL_CLASS"] == "transformers_neuronx.opt.model.OPTForSampling"
    _, theirs = _records(server, TNX)
    (loaded,) = [r for r in theirs if r["event"] == "from_pretrained"]
    assert loaded["tp_degree"] == "2" and loaded["n_positions"] == "16"
    assert loaded["amp"] == "f16" and loaded["batch_size"] == "2"
    assert loaded["path"] == str(server.repository / TNX.name / "opt-split")
    assert loaded["NEURON_RT_VISIBLE_CORES"] == "0-1"
    assert [r["event"] for r in theirs if r["event"] == "to_neuron"] == ["to_neuron"]
    model_py = (server.repository / TNX.name / "1" / "model.py").read_text()
    assert "tp_degree=self.tp_degree" in model_py and "TP_DEGREE" in model_py


def _generate(client, ids: np.ndarray) -> np.ndarray:
    tensor = grpcclient.InferInput("input_ids", list(ids.shape), "INT64")
    tensor.set_data_from_numpy(ids)
    return client.infer(TNX.name, [tensor]).as_numpy("output_ids")


def test_transformers_neuronx_serves_and_rejects_oversized_batches(served):
    server, _ = served
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        rng = np.random.default_rng(7)
        for rows in (1, TNX_BATCH_SIZE):  # 1 row is padded to the compiled batch size and cut back
            ids = rng.integers(0, 50000, (rows, 5), dtype=np.int64)
            out = _generate(client, ids)
            assert out.dtype == np.int64
            assert np.array_equal(out, np.concatenate([ids, ids + TNX_N_POSITIONS], axis=1))
        with pytest.raises(InferenceServerException, match="exceeds the compiled batch size 2"):
            _generate(client, rng.integers(0, 10, (TNX_BATCH_SIZE + 1, 5), dtype=np.int64))
        ids = rng.integers(0, 10, (1, 3), dtype=np.int64)
        assert np.array_equal(_generate(client, ids), np.concatenate([ids, ids + TNX_N_POSITIONS], axis=1))
    finally:
        client.close()
