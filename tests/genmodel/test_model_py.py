"""The generated model.py run in-process against a fake triton_python_backend_utils.

Fast, exact checks of execute(): batch concatenation and split, per-request mode, per-request
errors, fallback when a merged batch fails, output casting, core pinning per instance index,
and the TensorFlow path (with a fake tensorflow module).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from tritonfleet.genmodel import GenModelSpec, TensorSpec, generate
from tritonfleet.genmodel.config import build_config

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.* is deprecated:DeprecationWarning")

_NP = {
    "TYPE_BOOL": np.bool_,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
}
_counter = itertools.count()


class FakeTensor:
    def __init__(self, name, array):
        self._name, self._array = name, np.asarray(array)

    def name(self):
        return self._name

    def as_numpy(self):
        view = self._array.view()
        view.flags.writeable = False  # like the real backend: read-only buffers
        return view


class FakeRequest:
    def __init__(self, **inputs):
        self.inputs = {k: FakeTensor(k, v) for k, v in inputs.items()}


class FakeResponse:
    def __init__(self, output_tensors, error=None):
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


class FakeError:
    def __init__(self, message):
        self._message = message

    def message(self):
        return self._message


def fake_pb_utils() -> types.ModuleType:
    mod = types.ModuleType("triton_python_backend_utils")
    mod.Tensor = FakeTensor
    mod.InferenceResponse = FakeResponse
    mod.TritonError = FakeError

    class TritonModelException(Exception):
        pass

    mod.TritonModelException = TritonModelException
    mod.get_input_tensor_by_name = lambda request, name: request.inputs.get(name)
    mod.triton_string_to_numpy = lambda s: _NP[s]
    log: list[tuple[str, str]] = []

    class Logger:
        log_info = staticmethod(lambda m: log.append(("info", m)))
        log_warn = staticmethod(lambda m: log.append(("warn", m)))
        log_error = staticmethod(lambda m: log.append(("error", m)))

    mod.Logger = Logger
    mod.log = log
    return mod


@pytest.fixture
def pb(monkeypatch):
    mod = fake_pb_utils()
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", mod)
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "restored-after-test")
    monkeypatch.setenv("NEURON_RT_NUM_CORES", "restored-after-test")
    return mod


def spec(model_dir: Path, **kw) -> GenModelSpec:
    dims = kw.pop("dims", (4,))
    dtype = kw.pop("dtype", "INT64")
    out_dtype = kw.pop("out_dtype", dtype)
    n_out = kw.pop("n_out", 2)
    names = kw.pop("names", ("INPUT__{}", "OUTPUT__{}"))
    base = {
        "model_type": "pytorch",
        "target": "cpu",
        "triton_model_dir": model_dir,
        "compiled_model": "model.pt",
        "inputs": tuple(TensorSpec(name=names[0].format(i), dtype=dtype, dims=dims) for i in range(2)),
        "outputs": tuple(
            TensorSpec(name=names[1].format(i), dtype=out_dtype, dims=dims) for i in range(n_out)
        ),
        "core_start": 0,
        "core_end": 0,
        "max_batch_size": 8,
        "dynamic_batching": True,
    }
    base.update(kw)
    return GenModelSpec(**base)


def load(s: GenModelSpec, tmp_path: Path, index: int = 0):
    """Render s's model.py, import it, and initialize instance ``index``."""
    gen = generate(s, check_files=False)
    path = tmp_path / f"model_{next(_counter)}.py"
    path.write_text(gen.model_py)
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    cfg = json_format.MessageToDict(
        build_config(s, gen.report.compiled_model_value), preserving_proto_field_name=True
    )
    instance = module.TritonPythonModel()
    instance.initialize(
        {
            "model_config": json.dumps(cfg),
            "model_instance_name": f"{s.model_name}_0_{index}",
            "model_repository": str(s.model_dir),
            "model_version": str(s.model_version),
            "model_name": s.model_name,
        }
    )
    return instance


class Spy:
    """Wraps the loaded model; records the first-dim size of every call; may fail on big batches."""

    def __init__(self, model, fail_above: int | None = None):
        self.model, self.fail_above, self.calls = model, fail_above, []

    def __call__(self, *tensors):
        self.calls.append(tensors[0].shape[0])
        if self.fail_above is not None and tensors[0].shape[0] > self.fail_above:
            raise RuntimeError("batch too large for the compiled model")
        return self.model(*tensors)


@pytest.fixture
def add_sub_dir(tmp_path, torchscript_models):
    d = tmp_path / "add_sub"
    d.mkdir()
    (d / "model.pt").write_bytes(torchscript_models["add_sub"].read_bytes())
    return d


def _req(a, b, names=("INPUT__0", "INPUT__1")):
    return FakeRequest(**{names[0]: a, names[1]: b})


def _ints(rows, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-100, 100, (rows, 4), dtype=np.int64), rng.integers(
        -100, 100, (rows, 4), dtype=np.int64
    )


def test_requests_are_concatenated_into_one_batch_and_split_back(pb, tmp_path, add_sub_dir):
    inst = load(spec(add_sub_dir), tmp_path)
    inst.model = spy = Spy(inst.model)
    data = [_ints(rows, seed) for seed, rows in enumerate((1, 3, 2))]
    responses = inst.execute([_req(a, b) for a, b in data])
    assert spy.calls == [6]
    for (a, b), resp in zip(data, responses, strict=True):
        assert resp.error is None
        assert np.array_equal(resp.outputs["OUTPUT__0"], a + b) and np.array_equal(
            resp.outputs["OUTPUT__1"], a - b
        )
        assert resp.outputs["OUTPUT__0"].dtype == np.int64


def test_per_request_mode_runs_each_request_alone(pb, tmp_path, add_sub_dir):
    inst = load(spec(add_sub_dir, batch_requests_to_neuron=False), tmp_path)
    inst.model = spy = Spy(inst.model)
    data = [_ints(rows, seed) for seed, rows in enumerate((2, 1, 3))]
    responses = inst.execute([_req(a, b) for a, b in data])
    assert spy.calls == [2, 1, 3]
    assert all(
        np.array_equal(r.outputs["OUTPUT__0"], a + b) for (a, b), r in zip(data, responses, strict=True)
    )


def test_a_bad_request_in_a_batch_fails_alone(pb, tmp_path, add_sub_dir):
    inst = load(spec(add_sub_dir), tmp_path)
    inst.model = spy = Spy(inst.model)
    (a0, b0), (a1, _), (a2, b2) = _ints(2, 0), _ints(1, 1), _ints(3, 2)
    bad_rows = _ints(2, 3)[0]
    responses = inst.execute([_req(a0, b0), FakeRequest(INPUT__0=a1), _req(a2, b2), _req(a1, bad_rows)])
    assert spy.calls == [5]
    assert responses[0].error is None and responses[2].error is None
    assert "lacks input INPUT__1" in responses[1].error.message()
    assert "do not share a first (batch) dimension" in responses[3].error.message()
    assert np.array_equal(responses[2].outputs["OUTPUT__1"], a2 - b2)
    assert [level for level, _ in pb.log].count("error") == 2


def test_a_failing_merged_batch_is_retried_request_by_request(pb, tmp_path, add_sub_dir):
    inst = load(spec(add_sub_dir), tmp_path)
    inst.model = spy = Spy(inst.model, fail_above=2)
    data = [_ints(rows, seed) for seed, rows in enumerate((1, 1, 3))]
    responses = inst.execute([_req(a, b) for a, b in data])
    assert spy.calls == [5, 1, 1, 3]
    assert [r.error is None for r in responses] == [True, True, False]
    assert "batch too large" in responses[2].error.message()
    assert any(level == "warn" and "one by one" in msg for level, msg in pb.log)


def test_single_output_is_cast_to_the_configured_dtype(pb, tmp_path, torchscript_models):
    d = tmp_path / "add"
    d.mkdir()
    (d / "model.pt").write_bytes(torchscript_models["add"].read_bytes())
    inst = load(spec(d, dtype="FP32", out_dtype="FP64", n_out=1), tmp_path)
    a = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    (resp,) = inst.execute([_req(a, a)])
    assert resp.outputs["OUTPUT__0"].dtype == np.float64
    assert np.array_equal(resp.outputs["OUTPUT__0"], (a + a).astype(np.float64))


def test_tuple_outputs_are_cast_too(pb, tmp_path, add_sub_dir):
    inst = load(spec(add_sub_dir, out_dtype="INT32"), tmp_path)
    a, b = _ints(2, 9)
    (resp,) = inst.execute([_req(a, b)])
    assert resp.outputs["OUTPUT__0"].dtype == np.int32 and resp.outputs["OUTPUT__1"].dtype == np.int32
    assert np.array_equal(resp.outputs["OUTPUT__1"], (a - b).astype(np.int32))


def test_too_few_model_outputs_is_an_error_response_not_a_crash(pb, tmp_path, add_sub_dir):
    inst = load(spec(add_sub_dir, n_out=3), tmp_path)
    responses = inst.execute([_req(*_ints(1, 0)), _req(*_ints(2, 1))])
    assert all("returned 2 output(s), config.pbtxt has 3" in r.error.message() for r in responses)


@pytest.mark.parametrize(("index", "cores"), [(0, "0-1"), (1, "2-3"), (2, "4-5")])
def test_instance_index_picks_its_cores(pb, tmp_path, add_sub_dir, index, cores):
    import os

    inst = load(spec(add_sub_dir, core_start=0, core_end=7, instance_count=3), tmp_path, index=index)
    assert inst.core_range == cores
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == cores
    (first,) = [m for level, m in pb.log if "index=" in m]
    assert f"index={index} count=3 cores={cores} NEURON_RT_VISIBLE_CORES={cores}" in first
    assert f"compiled_model={add_sub_dir / 'model.pt'}" in first


def test_missing_neuron_framework_fails_load_with_a_clear_message(pb, tmp_path, add_sub_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_neuronx", None)  # import raises ImportError
    with pytest.raises(
        pb.TritonModelException, match=r"--target inf2 needs the Neuron framework \(torch_neuronx\)"
    ):
        load(spec(add_sub_dir, target="inf2"), tmp_path)


# ----------------------------------------------------------------------------- TensorFlow path


class FakeSavedModel:
    calls: list[int] = []

    def __init__(self, path):
        self.path = path

    def __call__(self, feed):
        FakeSavedModel.calls.append(len(feed["a"]))
        return {"sum": feed["a"] + feed["b"], "diff": feed["a"] - feed["b"]}


@pytest.fixture
def fake_tf(monkeypatch):
    tf = types.ModuleType("tensorflow")
    tf.__version__ = "2.99.0"
    tf.keras = types.SimpleNamespace(models=types.SimpleNamespace(load_model=FakeSavedModel))
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    monkeypatch.setitem(sys.modules, "tensorflow_neuronx", types.ModuleType("tensorflow_neuronx"))
    FakeSavedModel.calls = []
    return tf


@pytest.mark.parametrize("target", ["cpu", "inf2"])
def test_tensorflow_splits_a_batch_over_copies_and_threads(pb, fake_tf, tmp_path, target):
    import os

    s = spec(
        tmp_path / "tfm",
        model_type="tensorflow",
        target=target,
        names=("{}", "{}"),
        core_start=0,
        core_end=3,
        instance_count=2,
        threads_per_core=2,
        compiled_model="saved_model",
    )
    s = s.model_copy(
        update={
            "inputs": tuple(TensorSpec(name=n, dtype="INT64", dims=(4,)) for n in ("a", "b")),
            "outputs": tuple(TensorSpec(name=n, dtype="FP64", dims=(4,)) for n in ("sum", "diff")),
        }
    )
    inst = load(s, tmp_path, index=1)
    assert os.environ["NEURON_RT_NUM_CORES"] == "2"
    assert len(inst.pred_list) == 4 and inst.pred_list[0].path == str(s.model_dir / "saved_model")
    data = [_ints(rows, seed) for seed, rows in enumerate((3, 4))]
    responses = inst.execute([FakeRequest(a=a, b=b) for a, b in data])
    assert sorted(FakeSavedModel.calls) == [1, 2, 2, 2]  # 7 rows over 4 threads
    for (a, b), r in zip(data, responses, strict=True):
        assert r.outputs["sum"].dtype == np.float64
        assert np.array_equal(r.outputs["sum"], a + b) and np.array_equal(r.outputs["diff"], a - b)
    FakeSavedModel.calls = []
    (r,) = inst.execute([FakeRequest(a=data[0][0][:1], b=data[0][1][:1])])
    assert FakeSavedModel.calls == [1] and r.error is None
    inst.finalize()
