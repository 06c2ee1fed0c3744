"""gen-model command behaviour on valid input: files, options, warnings, atomic writes."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from tritonfleet.genmodel import writer
from tritonfleet.genmodel.config import parse_text
from tritonfleet.genmodel.spec import SpecError, allocate_cores, parse_core_range, parse_tensor_spec

ADD_SUB = [
    "--model_type", "pytorch",
    "--triton_input", "INPUT__0,INT64,-1x4", "INPUT__1,INT64,-1x4",
    "--triton_output", "OUTPUT__0,INT64,-1x4", "OUTPUT__1,INT64,-1x4",
    "--compiled_model", "model.pt",
]  # fmt: skip


def _params(model_dir: Path) -> dict[str, str]:
    cfg = parse_text((model_dir / "config.pbtxt").read_text())
    return {k: v.string_value for k, v in cfg.parameters.items()}


def test_help_lists_the_upstream_options(cli):
    result = cli("--help")
    assert result.exit_code == 0
    for option in (
        "--model_type",
        "--triton_input",
        "--neuron_core_range",
        "--disable_batch_requests_to_neuron",
        "--signature_def_key",
        "--target",
        "--instance-type",
        "--tp_degree",
    ):
        assert option in result.stdout


def _console_script():
    """The object behind the installed `tritonfleet` command (wherever its module lives)."""
    return importlib.metadata.entry_points(group="console_scripts")["tritonfleet"].load()


def test_top_level_command_registers_gen_model():
    main = _console_script()  # a broken CLI import is an error here, never a skip
    from click.testing import CliRunner

    assert "gen-model" in main.commands
    result = CliRunner().invoke(main, ["gen-model", "--help"])
    assert result.exit_code == 0 and "--triton_model_dir" in result.stdout


def test_installed_console_script_runs_gen_model():
    exe = Path(sys.executable).parent / "tritonfleet"  # what `pip install` put next to this Python
    proc = subprocess.run([str(exe), "gen-model", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--triton_model_dir" in proc.stdout


def test_module_entry_point_reports_one_line_and_exit_status(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tritonfleet.genmodel", *ADD_SUB, "--neuron_core_range", "3:1",
         "--triton_model_dir", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "error: --neuron_core_range 3:1: START must be <= END (the range is inclusive)"
    ]
    assert not (tmp_path / "m").exists()


def test_model_version_2_goes_to_its_own_directory(cli, tmp_path):
    """Upstream creates <dir>/2 but writes <dir>/1/model.py and crashes."""
    d = tmp_path / "m"
    result = cli(*ADD_SUB, "--neuron_core_range", "0:0", "--model_version", "2", "--triton_model_dir", d)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("*")) == ["2", "2/model.py", "config.pbtxt"]


def test_repeated_and_multi_valued_specs_are_equivalent(cli, tmp_path):
    a, b = tmp_path / "a" / "m", tmp_path / "b" / "m"
    common = ["--compiled_model", "model.pt", "--neuron_core_range", "0:0", "--model_type", "pytorch"]
    r1 = cli(*common, "--triton_input", "INPUT__0,INT64,4", "INPUT__1,INT64,4",
             "--triton_output", "OUTPUT__0,INT64,4", "--triton_model_dir", a)  # fmt: skip
    r2 = cli(*common, "--triton_input", "INPUT__0,INT64,4", "--triton_input", "INPUT__1,INT64,4",
             "--triton_output", "OUTPUT__0,INT64,4", "--triton_model_dir", b)  # fmt: skip
    assert r1.exit_code == r2.exit_code == 0
    assert parse_text((a / "config.pbtxt").read_text()) == parse_text((b / "config.pbtxt").read_text())


def test_several_preferred_batch_sizes_and_hyphen_aliases(cli, tmp_path):
    d = tmp_path / "m"
    result = cli("--model-type", "pytorch", "--triton-input", "INPUT__0,fp32,4", "--triton-output", "OUTPUT__0,TYPE_FP32,4",
                 "--compiled-model", "model.pt", "--neuron-core-range", "0:1", "--triton-model-dir", d,
                 "--max-batch-size", "16", "--enable-dynamic-batching", "--preferred-batch-size", "4", "8",
                 "--preferred_batch_size", "16")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    cfg = parse_text((d / "config.pbtxt").read_text())
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8, 16]
    assert cfg.input[0].data_type == cfg.output[0].data_type  # fp32 and TYPE_FP32 both accepted


def test_warnings_do_not_stop_generation(cli, tmp_path):
    d = tmp_path / "m"
    result = cli(*ADD_SUB, "--neuron_core_range", "0:4", "--triton_model_instance_count", "2",
                 "--max_batch_size", "4", "--tag_set", "serve", "--triton_model_dir", d)  # fmt: skip
    assert result.exit_code == 0
    warnings = "\n".join(result.warning_lines)
    assert "cores 4-4 stay idle" in warnings
    assert "INPUT__0 dims [-1, 4] start with -1 but --max_batch_size 4" in warnings
    assert "only apply to --model_type tensorflow" in warnings
    assert "does not exist yet" in warnings  # model.pt is not there
    assert all(line.startswith(("error:", "warning:")) for line in result.stderr.splitlines())
    assert not result.error_lines
    assert "cores 0: 0-1, 1: 2-3" in result.stdout


def test_dry_run_prints_the_config_and_writes_nothing(cli, tmp_path):
    result = cli(*ADD_SUB, "--neuron_core_range", "0:0", "--triton_model_dir", tmp_path / "m", "--dry-run")
    assert result.exit_code == 0
    assert parse_text(result.stdout).name == "m"
    assert list(tmp_path.iterdir()) == []


def test_regenerating_keeps_the_compiled_model_and_leaves_no_staging(cli, tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.pt").write_bytes(b"compiled")
    assert cli(*ADD_SUB, "--neuron_core_range", "0:0", "--triton_model_dir", d).exit_code == 0
    first = (d / "1" / "model.py").read_text()
    assert cli(*ADD_SUB, "--neuron_core_range", "0:1", "--triton_model_dir", d, "--inf2").exit_code == 0
    assert (d / "model.pt").read_bytes() == b"compiled"
    assert (d / "1" / "model.py").read_text() != first
    assert _params(d)["NEURON_CORE_END_INDEX"] == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_failed_write_leaves_nothing_behind(cli, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "rename", boom)
    result = cli(*ADD_SUB, "--neuron_core_range", "0:0", "--triton_model_dir", tmp_path / "m")
    assert result.exit_code == 1
    assert result.error_lines == [f"error: writing {tmp_path / 'm'}: No space left on device"]
    assert list(tmp_path.iterdir()) == []


def test_compiled_model_paths(cli, tmp_path, monkeypatch):
    d = tmp_path / "m"
    d.mkdir()
    (d / "sub").mkdir()
    (d / "sub" / "model.pt").write_bytes(b"x")
    # absolute inside the model directory -> relative
    assert (
        cli(
            *ADD_SUB[:-1], str(d / "sub" / "model.pt"), "--neuron_core_range", "0:0", "--triton_model_dir", d
        ).exit_code
        == 0
    )
    assert _params(d)["COMPILED_MODEL"] == "sub/model.pt"
    # relative to the current directory (upstream inf1 habit) but inside the model dir -> relative
    monkeypatch.chdir(tmp_path)
    r = cli(*ADD_SUB[:-1], "m/sub/model.pt", "--neuron_core_range", "0:0", "--triton_model_dir", "m")
    assert r.exit_code == 0 and _params(d)["COMPILED_MODEL"] == "sub/model.pt"
    assert any("relative paths are relative to --triton_model_dir" in w for w in r.warning_lines)
    # outside -> absolute, with a warning
    (tmp_path / "elsewhere.pt").write_bytes(b"x")
    r = cli(
        *ADD_SUB[:-1], str(tmp_path / "elsewhere.pt"), "--neuron_core_range", "0:0", "--triton_model_dir", d
    )
    assert _params(d)["COMPILED_MODEL"] == str(tmp_path / "elsewhere.pt")
    assert any("not from S3 or a copy" in w for w in r.warning_lines)


def test_instance_type_checks_the_real_core_count_and_picks_the_target(cli, tmp_path):
    d = tmp_path / "m"
    ok = cli(*ADD_SUB, "--neuron_core_range", "0:11", "--triton_model_instance_count", "6",
             "--instance-type", "inf2.24xlarge", "--triton_model_dir", d)  # fmt: skip
    assert ok.exit_code == 0, ok.stderr
    assert _params(d)["TARGET"] == "inf2"
    bad = cli(
        *ADD_SUB, "--neuron_core_range", "0:12", "--instance-type", "inf2.24xlarge", "--triton_model_dir", d
    )
    assert bad.error_lines == [
        "error: --neuron_core_range 0:12 does not fit: inf2.24xlarge has 12 NeuronCores (0-11)"
    ]
    trn = cli(
        *ADD_SUB, "--neuron_core_range", "0:31", "--instance_type", "trn1n.32xlarge", "--triton_model_dir", d
    )
    assert trn.exit_code == 0 and _params(d)["TARGET"] == "trn1"
    cpu = cli(
        *ADD_SUB,
        "--neuron_core_range",
        "0:1",
        "--instance-type",
        "inf2.xlarge",
        "--target",
        "cpu",
        "--triton_model_dir",
        d,
    )
    assert cpu.exit_code == 0 and _params(d)["TARGET"] == "cpu"


def test_transformers_neuronx_parameters(cli, tmp_path):
    d = tmp_path / "opt"
    result = cli("--model_type", "transformers-neuronx", "--inf2", "--triton_input", "input_ids,INT64,-1x-1",
                 "--triton_output", "output_ids,INT64,-1x-1", "--compiled_model", "opt-split",
                 "--neuron_core_range", "0:23", "--triton_model_instance_count", "2", "--triton_model_dir", d,
                 "--n_positions", "4096", "--amp", "f16")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    params = _params(d)
    assert params["TP_DEGREE"] == "12"  # default: every core of an instance
    assert (params["N_POSITIONS"], params["AMP"], params["BATCH_SIZE"]) == ("4096", "f16", "1")
    assert params["TNX_MODEL_CLASS"] == "transformers_neuronx.opt.model.OPTForSampling"
    assert params["DISABLE_BATCH_REQUESTS_TO_NEURON"] == "false"
    model_py = (d / "1" / "model.py").read_text()
    assert "NEURON_MODULES = ('transformers_neuronx',)" in model_py
    compile(model_py, "model.py", "exec")


@pytest.mark.parametrize("target", ["inf1", "inf2", "trn1", "trn2", "cpu"])
@pytest.mark.parametrize("model_type", ["pytorch", "tensorflow"])
def test_every_template_variant_compiles(cli, tmp_path, target, model_type):
    d = tmp_path / "m"
    result = cli(*ADD_SUB[2:], "--model_type", model_type, "--target", target, "--neuron_core_range", "0:1",
                 "--triton_model_dir", d)  # fmt: skip
    assert result.exit_code == 0, result.stderr
    model_py = (d / "1" / "model.py").read_text()
    compile(model_py, "model.py", "exec")
    assert ("NEURON_RT_NUM_CORES" if model_type == "tensorflow" else "NEURON_RT_VISIBLE_CORES") in model_py
    assert ("NEURON_MODULES = ()" in model_py) == (target == "cpu")


# ----------------------------------------------------------------------------- parsers


def test_parse_tensor_spec():
    t = parse_tensor_spec("INPUT__0,type_int64,-1x4x8")
    assert (t.name, t.dtype, t.dims, t.triton_type) == ("INPUT__0", "INT64", (-1, 4, 8), "TYPE_INT64")
    with pytest.raises(SpecError, match="no dims"):
        parse_tensor_spec("X,INT64,")
    with pytest.raises(SpecError, match="name must be non-empty"):
        parse_tensor_spec(",INT64,4")


def test_parse_core_range_and_allocation():
    assert parse_core_range("2:9") == (2, 9)
    assert allocate_cores(0, 7, 3) == [(0, 1), (2, 3), (4, 5)]
    assert allocate_cores(4, 7, 2) == [(4, 5), (6, 7)]
    assert allocate_cores(0, 0, 1) == [(0, 0)]
    assert allocate_cores(0, 1, 3) == []
    with pytest.raises(SpecError):
        parse_core_range("a:b")


def test_trailing_slash_still_names_the_model(cli, tmp_path):
    """Upstream takes basename('dir/') == '' as the model name."""
    result = cli(*ADD_SUB, "--neuron_core_range", "0:0", "--triton_model_dir", f"{tmp_path / 'add_sub'}/")
    assert result.exit_code == 0, result.stderr
    assert parse_text((tmp_path / "add_sub" / "config.pbtxt").read_text()).name == "add_sub"
