"""The agent's model check (``tritonfleet/agent/modelcheck.py``): before a sync switches ``current``, every
Neuron model of the version to serve is read (compiler and NEFF versions, from stand-in artifacts written by
``tritonfleet/sandbox/neffgen.py``) and judged against the image's limits (``compat.model_limits``). A model
the image cannot load fails the sync with one line naming it, and the version in service keeps serving; an
unknown version is a warning and the switch goes on; a model without Neuron artifacts gets no line. The
agent's verdicts equal ``compat.check_model``'s: tests/unit/test_compat_limits.py."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from tests.unit.test_agent_live import SECRET, FakeTriton
from tests.unit.test_agent_sync import (  # noqa: F401 (endpoint, s3, bucket: fixtures)
    agent,
    bucket,
    endpoint,
    s3,
    set_remote,
    sync_args,
)
from tritonfleet.agent import cli, modelcheck
from tritonfleet.agent.modelcheck import FAIL, OK, WARN, Line, check_staged
from tritonfleet.compat import model_limits
from tritonfleet.sandbox import neffgen

SDK_2_32 = "2.34.10.0"  # aws-neuronx-runtime-lib of Neuron SDK 2.32.0 (neuronx-cc 2.27)
SDK_2_31 = "2.33.10.0"  # ... of 2.31.0 (neuronx-cc 2.26)
CC_2_32, CC_2_31, CC_2_21 = "2.27.5334.0", "2.26.6360.0", "2.16.345.0"
NEEDS_2_34 = (f"compiled by neuronx-cc {CC_2_32} (NEFF 2.0), needs runtime >= 2.34 (Neuron SDK 2.32.0); the image has "
              f"{SDK_2_31}: set neuron_sdk_release to 2.32.0 or later, or recompile with the image's compiler "
              f"(neuronx-cc {CC_2_31})")


def limits(runtime: str | None = SDK_2_32, arch: str | None = "inf2") -> modelcheck.Limits:
    return modelcheck.limits_from_dict(model_limits(runtime, arch))


def limits_file(path: Path, runtime: str | None = SDK_2_32, arch: str | None = "inf2") -> str:
    path.write_text(json.dumps(model_limits(runtime, arch)))
    return str(path)


def neff(compiler: str, neff_version: str = "2.0") -> bytes:
    return neffgen.neff_bytes(compiler, neff_version)


def neuronx_pt(compiler: str) -> bytes:
    return neffgen.torchscript_neuronx_bytes(compiler)


def neuron_pt(compiler: str = "1.24.0.0") -> bytes:
    return neffgen.torchscript_neuron_bytes(compiler)


def write(root: Path, tree: dict[str, bytes]) -> Path:
    for rel, data in tree.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


# --- judging a staged tree ---------------------------------------------------------------------------------------


def test_each_neuron_model_is_judged_by_its_artifacts_and_cpu_models_get_no_line(tmp_path):
    root = tmp_path / "tree"
    neffgen.write_neff(root / "bert" / "1" / "model.neff", CC_2_32)
    neffgen.write_torchscript_neuronx(root / "resnet" / "1" / "model.pt", CC_2_21)
    neffgen.write_torchscript_neuron(root / "inf1model" / "1" / "model.pt")
    write(root, {"cpu/config.pbtxt": b'backend: "python"', "cpu/1/model.py": b"x", "plain/1/model.pt": b"PK\x03\x04",
                 ".hidden/1/model.neff": neff(CC_2_32), "loose.neff": neff(CC_2_32)})
    lines = check_staged(root, None, limits(SDK_2_31))
    assert [(x.model, x.verdict, x.artifact) for x in lines] == [
        ("bert", FAIL, "1/model.neff"), ("inf1model", FAIL, "1/model.pt"), ("resnet", OK, "1/model.pt")]
    assert str(lines[0]) == f"model bert: {NEEDS_2_34}"
    assert str(lines[1]) == ("model inf1model: compiled by neuron-cc 1.24.0.0 (NEFF 1.0) for inf1; the host is inf2: "
                             "recompile with neuronx-cc for inf2")
    assert str(lines[2]) == (f"model resnet: compiled by neuronx-cc {CC_2_21} (NEFF 2.0), needs runtime >= 2.23 "
                             f"(Neuron SDK 2.21.0); the image has {SDK_2_31}")
    assert [x.verdict for x in check_staged(root, None, limits(SDK_2_32))] == [OK, FAIL, OK]
    assert [x.verdict for x in check_staged(root, None, limits(None, "inf1"))] == [FAIL, OK, FAIL]
    # only the models named (those absent from the tree are skipped)
    assert [x.model for x in check_staged(root, ["resnet", "cpu", "gone"], limits())] == ["resnet"]
    assert check_staged(root, [], limits()) == []


def test_the_strictest_artifact_of_a_model_decides(tmp_path):
    root = write(tmp_path, {"m/1/a.neff": neff(CC_2_21), "m/2/b.pt": neuronx_pt(CC_2_32), "m/2/c.neff": neff(CC_2_31)})
    (line,) = check_staged(tmp_path, None, limits(SDK_2_31))
    assert (line.verdict, line.artifact) == (FAIL, "2/b.pt")
    assert line.line.startswith(f"compiled by neuronx-cc {CC_2_32}")
    assert check_staged(root, None, limits(SDK_2_32))[0].verdict == OK


@pytest.mark.parametrize("tree,line", [
    ({"m/1/model.neff": b"\x00" * 10},
     "no compiler version found (nothing read from truncated NEFF header (10 of 1024 bytes), unknown)"),
    ({"m/1/model.neff": neffgen.neff_header(neffgen.neff_tarball(CC_2_32, with_info=False))
      + neffgen.neff_tarball(CC_2_32, with_info=False)},
     "no compiler version found (NEFF 2.0 read from NEFF header; no compiler version: the NEFF's tarball has no "
     "info.json, neff)"),
    ({"m/1/model.neff": neff(CC_2_32, "3.0")},
     f"compiled by neuronx-cc {CC_2_32} (NEFF 3.0), needs runtime >= 2.34 (Neuron SDK 2.32.0); the image has "
     f"{SDK_2_32}; NEFF 3.0 is not in the NEFF support table (0.6, 1.0, 2.0)"),
    ({"m/1/model.neff": neff("2.22.12471.0")},
     "compiled by neuronx-cc 2.22.12471.0 (NEFF 2.0) is not in the compatibility table (between Neuron SDK 2.26.0 and "
     f"2.28.0), so the runtime it needs is unknown; the image has {SDK_2_32}"),
    ({"m/1/model.pt": neuron_pt("1.19.0.0")}, None),  # on inf2: the architecture fails first
])
def test_unknown_versions_are_warnings_never_silent_passes(tmp_path, tree, line):
    write(tmp_path, tree)
    (found,) = check_staged(tmp_path, None, limits())
    if line is None:
        assert found.verdict == FAIL
        return
    assert (found.verdict, found.line) == (WARN, line) and found.fix


def test_an_unknown_runtime_makes_every_neuronx_model_a_warning(tmp_path):
    write(tmp_path, {"a/1/model.neff": neff(CC_2_21), "b/1/model.pt": neuronx_pt(CC_2_32)})
    lines = check_staged(tmp_path, None, limits(None, "inf2"))
    assert [x.verdict for x in lines] == [WARN, WARN]
    assert lines[0].line == (f"compiled by neuronx-cc {CC_2_21} (NEFF 2.0); the image's aws-neuronx-runtime-lib "
                             "version is unknown")
    assert lines[0].fix == "declare it with the image label or triton_neuron_runtime_version"


def test_a_line_prints_as_a_finding():
    assert str(Line("m", OK, "fine")) == "model m: fine"
    assert str(Line("m", FAIL, "bad", "fix it")) == "model m: bad: fix it"
    assert modelcheck.worst([]) == OK and modelcheck.worst([Line("a", WARN, ""), Line("b", OK, "")]) == WARN
    assert modelcheck.worst([Line("a", WARN, ""), Line("b", FAIL, ""), Line("c", OK, "")]) == FAIL


def test_the_models_the_servers_load():
    parser = cli.build_parser()

    def loaded(*args: str):
        parsed = parser.parse_args(["sync", "--source", "s3://bucket/p", "--dest", "/d", *args])
        return cli.loaded_models(parsed, cli.server_models(parsed, parser))

    assert loaded() is None  # no servers (poll mode): every model
    assert loaded("--server", "a=grpc://h:1") is None
    assert loaded("--server", "a=grpc://h:1", "--server", "b=grpc://h:2", "--server-models", "a=x") is None
    assert loaded("--server", "a=grpc://h:1", "--server", "b=grpc://h:2", "--server-models", "a=x,y",
                  "--server-models", "b=") == frozenset({"x", "y"})


# --- the sync: checked before the switch --------------------------------------------------------------------------


V1 = {"bert/config.pbtxt": b'name: "bert"', "bert/1/model.neff": neff(CC_2_31),
      "cpu/config.pbtxt": b'name: "cpu"', "cpu/1/model.py": b"v1"}
V2 = {**V1, "bert/1/model.neff": neff(CC_2_32)}  # bert recompiled by the newer compiler


@pytest.fixture
def repo(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    """V1 synced with the limits of SDK 2.31's runtime; ``run(*extra, runtime=...)`` syncs again."""
    dest = tmp_path / "models"

    def run(*extra: str, runtime: str | None = SDK_2_31, arch: str = "inf2"):
        compat = limits_file(tmp_path / f"compat-{runtime}-{arch}.json", runtime, arch)
        return agent(capsys, *sync_args(endpoint, bucket, dest, "--compat", compat, *extra))

    set_remote(s3, bucket, "repo", V1)
    code, out, err = run()
    assert (code, out["status"], err) == (0, "synced", ""), err
    return dest, run, (s3, bucket), out


def test_a_compatible_version_is_switched_to_and_its_check_is_in_the_json(repo):
    dest, run, _, first = repo
    assert first["compat"] == {
        "runtime": SDK_2_31, "neuron_arch": "inf2", "verdict": OK, "refused": [],
        "models": [{"model": "bert", "verdict": OK, "artifact": "1/model.neff", "fix": None,
                    "line": f"compiled by neuronx-cc {CC_2_31} (NEFF 2.0), needs runtime >= 2.33 (Neuron SDK 2.31.0); "
                            f"the image has {SDK_2_31}"}]}
    assert os.readlink(dest / "current") == f"versions/{first['version']}"


def test_a_model_the_image_cannot_load_is_refused_before_the_switch_and_the_host_keeps_serving(repo):
    dest, run, (client, name), first = repo
    v1 = first["version"]
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 1 and out["status"] == "failed"
    line = f"model bert: {NEEDS_2_34}; refused before the switch: current keeps serving {v1}"
    assert err == f"tritonfleet-agent: error: {line}\n"
    assert out["error"] == line and out["compat"]["refused"] == [line] and out["compat"]["verdict"] == FAIL
    assert os.readlink(dest / "current") == f"versions/{v1}"
    assert (dest / "current" / "bert" / "1" / "model.neff").read_bytes() == V1["bert/1/model.neff"]
    assert [p.name for p in (dest / "versions").iterdir() if not p.name.startswith(".")] == [v1]
    # the refused tree stays a staging dir: with the image of SDK 2.32 the next run links its files
    assert [p.name for p in (dest / "versions").iterdir() if p.name.startswith(".staging-")]
    code, out, err = run(runtime=SDK_2_32)
    assert (code, out["status"], err) == (0, "synced", ""), err
    assert out["downloaded"] == 0 and out["resumed"] == 1 and out["compat"]["verdict"] == OK
    assert os.readlink(dest / "current") == f"versions/{out['version']}"


def test_each_refused_model_is_its_own_line_and_the_text_output_says_the_same(repo):
    dest, run, (client, name), first = repo
    set_remote(client, name, "repo", {**V2, "inf1/config.pbtxt": b"", "inf1/1/model.pt": neuron_pt(),
                                      "odd/1/model.neff": b"\x00" * 10})
    code, out, err = run("--server", "t=grpc://127.0.0.1:1", "--server-models", "t=bert,inf1,odd,cpu",
                         "--timeout", "1")
    keeps = f"refused before the switch: current keeps serving {first['version']}"
    assert code == 1 and err.splitlines() == [
        "tritonfleet-agent: warning: model odd: no compiler version found (nothing read from truncated NEFF header "
        "(10 of 1024 bytes), unknown): recompile with the image's compiler, or keep the compiler version with the "
        "model",
        f"tritonfleet-agent: error: model bert: {NEEDS_2_34}; {keeps}",
        "tritonfleet-agent: error: model inf1: compiled by neuron-cc 1.24.0.0 (NEFF 1.0) for inf1; the host is inf2: "
        f"recompile with neuronx-cc for inf2; {keeps}"]
    assert [m["model"] for m in out["compat"]["models"]] == ["bert", "inf1", "odd"]
    # the JSON's one error (what a caller of the library gets as the SyncError): the refusals, " | " between them
    assert out["error"] == " | ".join(line.removeprefix("tritonfleet-agent: error: ") for line in err.splitlines()[1:])
    assert os.readlink(dest / "current") == f"versions/{first['version']}"


def test_a_warning_is_printed_and_the_switch_goes_on(repo):
    dest, run, (client, name), first = repo
    set_remote(client, name, "repo", {**V1, "odd/1/model.neff": neff("2.22.12471.0")})
    code, out, err = run()
    warning = ("model odd: compiled by neuronx-cc 2.22.12471.0 (NEFF 2.0) is not in the compatibility table (between "
               f"Neuron SDK 2.26.0 and 2.28.0), so the runtime it needs is unknown; the image has {SDK_2_31}: add its "
               "Neuron SDK release to tritonfleet/compatchain.py CHAIN, or recompile with the image's compiler (neuronx-cc "
               f"{CC_2_31})")
    assert (code, out["status"]) == (0, "synced") and err == f"tritonfleet-agent: warning: {warning}\n"
    assert out["warnings"] == [warning] and out["compat"]["verdict"] == WARN
    assert os.readlink(dest / "current") == f"versions/{out['version']}"
    text = run(runtime=SDK_2_31)  # unchanged: nothing switched, nothing checked
    assert text[0] == 0 and text[1]["status"] == "unchanged" and text[1]["compat"] is None and text[2] == ""


def test_a_kept_version_the_image_cannot_load_is_not_switched_back_to(repo):
    dest, run, (client, name), first = repo
    set_remote(client, name, "repo", V2)
    code, out, err = run(runtime=SDK_2_32)
    assert code == 0, err
    v2 = out["version"]
    set_remote(client, name, "repo", V1)
    assert run()[0] == 0  # back to V1 (kept: switched)
    set_remote(client, name, "repo", V2)  # V2 is on disk, but the image is SDK 2.31's now
    code, out, err = run()
    assert code == 1 and err == (f"tritonfleet-agent: error: model bert: {NEEDS_2_34}; refused before the switch: "
                                 f"current keeps serving {first['version']}\n")
    assert os.readlink(dest / "current") == f"versions/{first['version']}" and (dest / "versions" / v2).is_dir()


def test_a_first_version_that_is_refused_says_nothing_serves_yet(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    set_remote(s3, bucket, "repo", V2)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, tmp_path / "m", "--compat",
                                              limits_file(tmp_path / "c.json", SDK_2_31)))
    assert code == 1 and err.endswith("refused before the switch: there is no current version yet\n"), err
    assert not (tmp_path / "m" / "current").exists()


def test_only_the_models_the_servers_load_are_judged(repo, tmp_path):
    dest, run, (client, name), first = repo
    triton = FakeTriton(dest / "current")
    triton.loaded = {"bert": b"", "cpu": b"v1"}
    header = tmp_path / "header"
    header.write_text(f"x-key: {SECRET}\n")
    header.chmod(0o600)
    # "other" is another host's model (for inf1): this host's server loads bert and cpu
    tree = {**V1, "cpu/1/model.py": b"v2", "bert/1/model.py": b"b", "other/1/model.pt": neuron_pt(),
            "other/1/model.py": b"o"}
    set_remote(client, name, "repo", tree)
    served = ("--server", f"t={triton.url}", "--header-file", str(header), "--timeout", "5")
    code, out, err = run(*served, "--server-models", "t=bert,cpu")
    assert code == 0, err
    assert [m["model"] for m in out["compat"]["models"]] == ["bert"]
    assert triton.loaded["cpu"] == b"v2" and "other" not in triton.loaded
    set_remote(client, name, "repo", {**tree, "cpu/1/model.py": b"v3"})
    code, out, err = run(*served)  # without --server-models the server loads every model: other too
    assert code == 1 and "error: model other: compiled by neuron-cc 1.24.0.0 (NEFF 1.0) for inf1" in err
    assert triton.loaded["cpu"] == b"v2"  # nothing was reloaded


def test_without_compat_nothing_is_checked_and_a_dry_run_checks_nothing(repo, endpoint, bucket, capsys):  # noqa: F811
    dest, run, (client, name), first = repo
    set_remote(client, name, "repo", V2)
    code, out, err = run("--dry-run")
    assert (code, out["status"], out["compat"]) == (0, "dry-run", None)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert (code, out["status"], out["compat"], err) == (0, "synced", None, "")


@pytest.mark.parametrize("text,message", [
    (None, "cannot read: No such file or directory"),
    ("{", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ('{"format": 99}', "format 99, this agent reads format 1"),
])
def test_a_bad_limits_file_is_one_line_and_exit_2_before_anything_runs(capsys, tmp_path, text, message):
    path = tmp_path / "compat.json"
    if text is not None:
        path.write_text(text)
    code, out, err = agent(capsys, "sync", "--source", "s3://bucket/p", "--dest", str(tmp_path / "d"), "--compat",
                           str(path))
    assert code == 2 and err == f"tritonfleet-agent sync: error: --compat {path}: {message}\n", err
    assert not (tmp_path / "d").exists()


def test_the_summary_line_is_unchanged_by_a_passing_check(repo, capsys, monkeypatch):
    dest, run, (client, name), first = repo
    set_remote(client, name, "repo", {**V1, "cpu/1/model.py": b"v2"})
    monkeypatch.setattr("sys.stderr", io.StringIO())
    compat = limits_file(dest.parent / "c.json", SDK_2_31)
    code = cli.main(["sync", "--source", f"s3://{name}/repo", "--dest", str(dest), "--endpoint-url",
                     client.meta.endpoint_url, "--compat", compat])
    assert code == 0 and capsys.readouterr().out.startswith("synced ")


# --- the rollout inherits the refusal -------------------------------------------------------------------------------


def test_a_rollout_reports_the_agents_line_and_does_not_count_the_host_as_updated(tmp_path, monkeypatch):
    """deploys/serve.py fails on the agent's refusal (the real pyinfra run replaced by what pyinfra 3 prints for a
    failed ``models.sync``): the host's row has the agent's line, its status is not "updated" and it counts."""
    from tritonfleet.fleet import rollout as ro

    line = f"model bert: {NEEDS_2_34}; refused before the switch: current keeps serving 000001-20261126T000000Z"
    failed = tmp_path / "serve-output"
    failed.write_text("--> Starting operation: Models | Model repository from s3://models-bucket/prod\n"
                      "    [inf2-a] tritonfleet-agent: warning: model odd: no compiler version found (nothing read): "
                      "recompile\n"
                      f"    [inf2-a] tritonfleet-agent: error: {line}\n"
                      "    [inf2-a] Error: executed 0 commands\n"
                      "--> pyinfra error: No hosts remaining!\n")
    pyinfra = tmp_path / "pyinfra"
    pyinfra.write_text(f'#!/bin/sh\ncase "$*" in *serve.py*) cat {failed}; exit 1;; esac\necho "--> Results:"\n')
    pyinfra.chmod(0o755)
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": "000001"})
    monkeypatch.setattr(ro, "serving", lambda name, data: (True, ""))
    rollout = ro.Rollout(ro.Options(inventory="inv.py", reports_dir=str(tmp_path)), [("inf2-a", {}), ("inf2-b", {})])
    rollout.runner.pyinfra = str(pyinfra)
    report = rollout.run()
    (row, _) = report["hosts"]
    assert (row["status"], row["failed_step"]) == ("rolled back", "serve"), row
    assert row["message"].startswith(f"[inf2-a] tritonfleet-agent: error: {line} | ")
    assert report["failures"] == 1
    assert report["stopped"] == "1 of 2 hosts failed (over fail_percent 0%): no further batches"
    assert report["hosts"][1]["status"] == "not started"
