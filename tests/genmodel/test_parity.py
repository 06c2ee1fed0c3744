"""Parity with gen_triton_model.py on the upstream QA matrix (server qa/L0_inferentia_perf_analyzer).

8 configurations: {single: --neuron_core_range 0:0; multiple: --triton_model_instance_count 3
--neuron_core_range 0:7} x {unbatched -1x4; batched 4 + --enable_dynamic_batching --max_batch_size
1000 --preferred_batch_size 8 --max_queue_delay_microseconds 100} x {default;
--disable_batch_requests_to_neuron}. The expected config is upstream's output format as documented
(one `input [ {...} ]` block per tensor, `parameters: {key: ..., value: {string_value: ...}}`),
parsed with the same protobuf parser as ours and compared field by field.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tritonfleet.genmodel.config import UPSTREAM_PARAMETERS, parse_text

MODEL = "add-sub-1x4"
QA_MATRIX = list(itertools.product(("single", "multiple"), (False, True), (False, True)))
OUR_EXTRA_PARAMETERS = {"DISABLE_BATCH_REQUESTS_TO_NEURON", "TARGET", "MODEL_TYPE"}


def qa_args(model_dir: Path, compiled: str, layout: str, batched: bool, no_batch: bool) -> list[str]:
    shape = "4" if batched else "-1x4"
    args = ["--model_type", "pytorch", "--compiled_model", compiled, "--triton_model_dir", str(model_dir)]
    args += ["--triton_input", f"INPUT__0,INT64,{shape}", f"INPUT__1,INT64,{shape}"]
    args += ["--triton_output", f"OUTPUT__0,INT64,{shape}", f"OUTPUT__1,INT64,{shape}"]
    if batched:
        args += ["--enable_dynamic_batching", "--max_batch_size", "1000", "--preferred_batch_size", "8"]
        args += ["--max_queue_delay_microseconds", "100"]
    args += (
        ["--neuron_core_range", "0:0"]
        if layout == "single"
        else ["--triton_model_instance_count", "3", "--neuron_core_range", "0:7"]
    )
    if no_batch:
        args.append("--disable_batch_requests_to_neuron")
    return args


def upstream_config_text(layout: str, batched: bool, compiled: str) -> str:
    """What gen_triton_model.py writes for this QA cell (format of its real output)."""
    dims = "[4]" if batched else "[-1, 4]"
    count, (start, end) = (1, ("0", "0")) if layout == "single" else (3, ("0", "7"))
    text = f'name: "{MODEL}"\nbackend: "python"\nmax_batch_size: {1000 if batched else 0}\n'
    if batched:
        text += "dynamic_batching {\n    preferred_batch_size: 8\n    max_queue_delay_microseconds: 100\n}\n"
    for kind, names in (("input", ("INPUT__0", "INPUT__1")), ("output", ("OUTPUT__0", "OUTPUT__1"))):
        for name in names:
            text += (
                f'{kind} [\n  {{\n    name: "{name}"\n    data_type: TYPE_INT64\n    dims: {dims}\n  }}\n]\n'
            )
    text += f"instance_group [\n    {{\n        kind: KIND_MODEL\n        count: {count}\n    }}\n]\n"
    for key, value in zip(UPSTREAM_PARAMETERS, (compiled, start, end, "1"), strict=True):
        text += f'parameters: {{key: "{key}", value: {{string_value: "{value}"}}}} \n'
    return text


def _tensors(msgs) -> list[tuple[str, int, list[int]]]:
    return [(t.name, t.data_type, list(t.dims)) for t in msgs]


@pytest.mark.parametrize(("layout", "batched", "no_batch"), QA_MATRIX, ids=lambda v: str(v))
def test_qa_matrix_config_matches_upstream(cli, tmp_path, layout, batched, no_batch):
    model_dir = tmp_path / f"models_{layout}{'_batched_' if batched else '_'}pyt" / MODEL
    compiled = model_dir / "add_sub_model_pyt.pt"  # upstream QA passes an absolute path
    model_dir.mkdir(parents=True)
    compiled.write_bytes(b"torchscript")
    result = cli(*qa_args(model_dir, str(compiled), layout, batched, no_batch))
    assert result.exit_code == 0, result.stderr

    ours = parse_text((model_dir / "config.pbtxt").read_text())
    up = parse_text(upstream_config_text(layout, batched, str(compiled)))

    assert ours.name == up.name == MODEL
    assert ours.backend == up.backend == "python"
    assert ours.max_batch_size == up.max_batch_size
    assert ours.HasField("dynamic_batching") == up.HasField("dynamic_batching") == batched
    assert list(ours.dynamic_batching.preferred_batch_size) == list(up.dynamic_batching.preferred_batch_size)
    assert (
        ours.dynamic_batching.max_queue_delay_microseconds == up.dynamic_batching.max_queue_delay_microseconds
    )
    assert _tensors(ours.input) == _tensors(up.input)
    assert _tensors(ours.output) == _tensors(up.output)
    assert len(ours.instance_group) == len(up.instance_group) == 1
    assert ours.instance_group[0].kind == up.instance_group[0].kind == mc.ModelInstanceGroup.KIND_MODEL
    assert ours.instance_group[0].count == up.instance_group[0].count
    assert [f.name for f, _ in ours.instance_group[0].ListFields()] == ["count", "kind"]
    # No other top-level field is set than upstream sets.
    assert {f.name for f, _ in ours.ListFields()} == {f.name for f, _ in up.ListFields()}

    params = {k: v.string_value for k, v in ours.parameters.items()}
    up_params = {k: v.string_value for k, v in up.parameters.items()}
    for key in ("NEURON_CORE_START_INDEX", "NEURON_CORE_END_INDEX", "NUM_THREADS_PER_CORE"):
        assert params[key] == up_params[key]
    # Same compiled model, but stored relative to the model directory (upstream: absolute, verbatim).
    assert params["COMPILED_MODEL"] == "add_sub_model_pyt.pt"
    assert model_dir / params["COMPILED_MODEL"] == Path(up_params["COMPILED_MODEL"])
    assert set(params) == set(UPSTREAM_PARAMETERS) | OUR_EXTRA_PARAMETERS
    assert params["DISABLE_BATCH_REQUESTS_TO_NEURON"] == ("true" if no_batch else "false")
    assert params["TARGET"] == "inf1" and params["MODEL_TYPE"] == "pytorch"

    model_py = (model_dir / "1" / "model.py").read_text()
    assert "NEURON_MODULES = ('torch_neuron', 'torch.neuron')" in model_py
    assert "torch.neuron.DataParallel(model, device_ids=device_ids)" in model_py
    compile(model_py, "model.py", "exec")


def test_multiple_layout_warns_about_idle_cores(cli, tmp_path):
    model_dir = tmp_path / MODEL
    result = cli(*qa_args(model_dir, "add_sub_model_pyt.pt", "multiple", False, False))
    assert result.exit_code == 0
    assert any("cores 6-7 stay idle" in line for line in result.warning_lines), result.stderr


def test_inf2_flag_keeps_the_config_and_switches_the_framework(cli, tmp_path):
    model_dir = tmp_path / MODEL
    result = cli(*qa_args(model_dir, "add_sub_model_pyt.pt", "multiple", True, False), "--inf2")
    assert result.exit_code == 0, result.stderr
    cfg = parse_text((model_dir / "config.pbtxt").read_text())
    assert cfg.parameters["TARGET"].string_value == "inf2"
    assert cfg.parameters["COMPILED_MODEL"].string_value == "add_sub_model_pyt.pt"
    model_py = (model_dir / "1" / "model.py").read_text()
    assert "NEURON_MODULES = ('torch_neuronx',)" in model_py
    assert "self.neuron.DataParallel(model, device_ids=device_ids)" in model_py
