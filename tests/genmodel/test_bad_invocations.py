"""Bad gen-model invocations: one one-line error each, a nonzero exit, and no file written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

IN = ["INPUT__0,INT64,-1x4", "INPUT__1,INT64,-1x4"]
OUT = ["OUTPUT__0,INT64,-1x4", "OUTPUT__1,INT64,-1x4"]


def base(**override: list[str] | None) -> list[str]:
    """A valid invocation; each keyword replaces (list) or drops (None) one option."""
    opts: dict[str, list[str] | None] = {
        "--model_type": ["pytorch"],
        "--triton_input": IN,
        "--triton_output": OUT,
        "--compiled_model": ["model.pt"],
        "--neuron_core_range": ["0:3"],
    }
    for key, value in override.items():
        opts["--" + key] = value
    args: list[str] = []
    for key, value in opts.items():
        if value is not None:
            args += [key, *value]
    return args


# (id, arguments besides --triton_model_dir, text the error line must contain)
BAD = [
    ("pytorch-name", base(triton_input=["BADNAME,INT64,4", "INPUT__1,INT64,4"]), "<name>__<index>"),
    ("dtype", base(triton_input=["INPUT__0,FOO,-1x4", IN[1]]), "unknown data type 'FOO'"),
    ("dim-negative", base(triton_input=["INPUT__0,INT64,4x-2", IN[1]]), "dim -2 is invalid"),
    ("dim-zero", base(triton_input=["INPUT__0,INT64,0x4", IN[1]]), "dim 0 is invalid"),
    ("dim-not-int", base(triton_input=["INPUT__0,INT64,4xa", IN[1]]), "is not an integer"),
    ("two-fields", base(triton_input=["INPUT__0,INT64", IN[1]]), "expected NAME,DTYPE,DIMS"),
    ("indices-gap", base(triton_input=["INPUT__0,INT64,4", "INPUT__2,INT64,4"]), "contiguous from 0"),
    ("indices-dup", base(triton_output=["OUTPUT__0,INT64,4", "OUT__0,INT64,4"]), "index 0 is used twice"),
    ("name-dup", base(triton_output=["OUTPUT__0,INT64,4", "OUTPUT__0,INT64,4"]), "given twice"),
    ("range-reversed", base(neuron_core_range=["5:2"]), "START must be <= END"),
    ("range-format", base(neuron_core_range=["0-3"]), "expected START:END"),
    (
        "range-too-big-inf2",
        [*base(neuron_core_range=["0:24"]), "--inf2"],
        "no inf2 instance has more than 24",
    ),
    ("range-vs-instance", [*base(), "--instance-type", "inf2.xlarge"], "inf2.xlarge has 2 NeuronCores"),
    ("unknown-instance", [*base(), "--instance-type", "inf9.huge"], "unknown instance type"),
    (
        "instance-family",
        [*base(neuron_core_range=["0:1"]), "--instance-type", "inf2.xlarge", "--target", "trn1"],
        "belongs to the inf2 family",
    ),
    (
        "gpu-instance",
        [*base(neuron_core_range=["0:0"]), "--instance-type", "g5.xlarge", "--inf2"],
        "has no NeuronCores",
    ),
    ("instances-gt-cores", base(triton_model_instance_count=["5"]), "exceeds the 4 core(s)"),
    (
        "preferred-gt-max",
        [*base(), "--max_batch_size", "8", "--enable_dynamic_batching", "--preferred_batch_size", "4", "16"],
        "16 exceeds --max_batch_size 8",
    ),
    (
        "preferred-without-dyn",
        [*base(), "--max_batch_size", "8", "--preferred_batch_size", "4"],
        "needs --enable_dynamic_batching",
    ),
    ("dyn-without-batching", [*base(), "--enable_dynamic_batching"], "needs --max_batch_size > 0"),
    ("unknown-option", [*base(), "--frobnicate", "3"], "unrecognized arguments: --frobnicate"),
    ("abbreviated-option", [*base(model_type=None), "--model_t", "pytorch"], "--model_type"),
    ("bad-model-type", base(model_type=["keras"]), "invalid choice: 'keras'"),
    ("not-an-int", [*base(), "--max_batch_size", "abc"], "invalid int value: 'abc'"),
    ("model-version-0", [*base(), "--model_version", "0"], "versions are integers >= 1"),
    ("inf2-vs-target", [*base(), "--inf2", "--target", "inf1"], "--inf2 contradicts --target inf1"),
    ("missing-output", base(triton_output=None), "needs at least one --triton_output"),
    ("threads-0", [*base(), "--threads_per_core", "0"], "must be >= 1"),
    (
        "tp-degree-too-big",
        [
            *base(
                model_type=["transformers-neuronx"],
                triton_input=["ids,INT64,-1"],
                triton_output=["out,INT64,-1"],
                neuron_core_range=["0:1"],
            ),
            "--inf2",
            "--tp_degree",
            "4",
        ],
        "exceeds the 2 core(s)",
    ),
    ("tnx-option-on-pytorch", [*base(), "--tp_degree", "2"], "need --model_type transformers-neuronx"),
    (
        "tnx-on-cpu",
        [
            *base(
                model_type=["transformers-neuronx"],
                triton_input=["ids,INT64,-1"],
                triton_output=["out,INT64,-1"],
            ),
            "--target",
            "cpu",
        ],
        "not on --target cpu",
    ),
    (
        "tnx-float-ids",
        [
            *base(
                model_type=["transformers-neuronx"],
                triton_input=["ids,FP32,-1"],
                triton_output=["out,INT64,-1"],
            ),
            "--inf2",
        ],
        "must be an integer type",
    ),
    ("bf16", base(triton_output=["OUTPUT__0,BF16,4", OUT[1]]), "BF16 cannot pass through numpy"),
    (
        "tf-only-inputs",
        base(model_type=["tensorflow"], triton_output=None),
        "give both --triton_input and --triton_output",
    ),
    (
        "tf-signature-needs-tf",
        base(model_type=["tensorflow"], triton_input=None, triton_output=None),
        "needs tensorflow installed",
    ),
]


def _snapshot(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_there_are_at_least_15_bad_invocations():
    assert len(BAD) >= 15
    assert len({case[0] for case in BAD}) == len(BAD)


@pytest.mark.parametrize(("args", "message"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "existing-dir"])
def test_rejected_with_one_line_and_nothing_written(cli, tmp_path, args, message, existing):
    root = tmp_path / "repo"
    model_dir = root / "add_sub"
    model_dir.mkdir(parents=True)
    (model_dir / "model.pt").write_bytes(b"compiled")
    if not existing:
        os.unlink(model_dir / "model.pt")
        model_dir.rmdir()
    before = _snapshot(root)
    result = cli(*args, "--triton_model_dir", str(model_dir))
    assert result.exit_code != 0
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(result.error_lines) == 1, result.stderr
    assert all(line.startswith(("error:", "warning:")) for line in lines), result.stderr
    assert message in result.error_lines[0], result.error_lines[0]
    assert _snapshot(root) == before


def test_several_problems_are_each_one_line(cli, tmp_path):
    args = base(triton_input=["INPUT__0,FOO,4", "INPUT__1,INT64,4x0"], neuron_core_range=["x:1"])
    result = cli(*args, "--triton_model_dir", str(tmp_path / "m"))
    assert result.exit_code == 1
    assert len(result.error_lines) == 3, result.stderr
    assert not (tmp_path / "m").exists()
