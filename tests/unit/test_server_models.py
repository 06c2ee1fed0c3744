"""Each server its own models (``triton_servers[].models``): the placement's default, preflight's one-line
refusals, the agent's live reload per server, QA per server, the host record's models and ``tritonfleet
status``'s models column. The deploys' commands per server are in tests/fake/test_server_models_role.py."""

from __future__ import annotations

import os
import subprocess

import pytest

from roles.models import server_models_args, sync_command
from roles.qa import run_command
from roles.triton import server_command, server_models
from tests.fake.test_roles import DATA
from tests.hostconfigs import host_config
from tests.unit.test_agent_live import SECRET, V1, V2, FakeTriton
from tests.unit.test_agent_sync import (  # noqa: F401 (endpoint, s3, bucket: fixtures)
    agent,
    bucket,
    endpoint,
    s3,
    set_remote,
    sync_args,
)
from tests.unit.test_mut_status import _Canned
from tests.unit.test_qa_suites import GOOD_CASE, add_sub, write
from tests.unit.test_scripts import calls, triton_api  # noqa: F401 (triton_api: a fixture)
from tritonfleet import hostcontract as hc
from tritonfleet.access import health
from tritonfleet.agent.qa import command
from tritonfleet.agent.qa.suites import load_all
from tritonfleet.config import ConfigError
from tritonfleet.face import status

SPLIT = {**DATA, "instance_type": "inf2.48xlarge"}
BERT = {"name": "bert", "models": ["bert_base", "bert_large"]}
RESNET = {"name": "resnet", "models": ["resnet50"]}


def repository(tmp_path, *models: str) -> str:
    """A controller-side model repository (models_source) with ``models``."""
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    for m in models:
        (root / m / "1").mkdir(parents=True)  # a version: Triton needs one, the memory check estimates from it
        (root / m / "config.pbtxt").write_text(f'name: "{m}"\n')
    return str(root)


def cfg(servers, **data):
    return host_config({**SPLIT, "triton_servers": servers, **data})


# --- the placement: its own models, else the host's ----------------------------------------------------------


def test_a_server_loads_its_own_models_else_the_hosts_else_every_model():
    c = cfg([BERT, {"name": "rest"}], triton_models=["resnet50"])
    assert [(p.name, p.models) for p in c.triton.placements] == [("bert", ("bert_base", "bert_large")),
                                                                ("rest", ("resnet50",))]
    c = cfg([BERT, {"name": "rest"}])
    assert [p.models for p in c.triton.placements] == [("bert_base", "bert_large"), None]
    assert c.triton.placements[1].serves("anything") and not c.triton.placements[0].serves("resnet50")


def test_the_load_model_flags_are_the_servers_own():
    c = cfg([BERT, RESNET, {"name": "rest"}])
    flags = [[a for a in server_command(c, p) if a.startswith("--load-model")] for p in c.triton.placements]
    assert flags == [["--load-model=bert_base", "--load-model=bert_large"], ["--load-model=resnet50"],
                     ["--load-model=*"]]
    c = cfg([BERT, RESNET, {"name": "rest"}], triton_models=["resnet50", "bert_base"])
    rest = c.triton.placements[2]
    assert [a for a in server_command(c, rest) if a.startswith("--load-model")] == [
        "--load-model=resnet50", "--load-model=bert_base"]


def test_the_health_gate_waits_for_the_servers_models_or_the_repositorys(tmp_path):
    src = repository(tmp_path, "bert_base", "bert_large", "resnet50")
    c = cfg([BERT, RESNET, {"name": "rest"}], models_source=src)
    assert [server_models(c, p) for p in c.triton.placements] == [
        ["bert_base", "bert_large"], ["resnet50"], ["bert_base", "bert_large", "resnet50"]]


def test_an_empty_list_loads_nothing_on_a_host_that_has_no_models(tmp_path):
    c = cfg([{"name": "idle", "models": []}], models_source=repository(tmp_path))
    (p,) = c.triton.placements
    assert p.models == () and not [a for a in server_command(c, p) if a.startswith("--load-model")]
    assert server_models(c, p) == []


# --- preflight: one line naming host and field, before anything changes ---------------------------------------


def refused(data: dict, field: str, *words: str) -> str:
    with pytest.raises(ConfigError) as caught:
        host_config({**SPLIT, **data}, name="inf2-b")
    line = str(caught.value)
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"inf2-b: {field} "), line
    for w in words:
        assert w in line, line
    return line


@pytest.mark.parametrize("name", ["a/b", "..//x", "bert base", ""])
def test_a_model_name_that_is_no_triton_model_directory_is_refused(name):
    refused({"triton_servers": [BERT, {"name": "xx", "models": ["resnet50", name]}]}, "triton_servers[1].models",
            f"model name {name!r} is not a valid Triton model directory name")


def test_a_model_the_repository_does_not_have_is_refused_naming_the_server(tmp_path):
    src = repository(tmp_path, "bert_base", "resnet50")
    refused({"models_source": src, "triton_servers": [RESNET, BERT]}, "triton_servers[1].models",
            "['bert_base', 'bert_large']", "server bert: model bert_large not in the repository",
            f"models_source {src} has bert_base, resnet50")
    refused({"models_source": src, "triton_models": ["nope", "resnet50", "gone"]}, "triton_models",
            "models nope, gone not in the repository")


def test_models_are_not_checked_against_a_repository_the_controller_does_not_know():
    c = cfg([BERT], models_s3_uri="s3://bucket/repo")  # S3: only the host sees the repository
    assert c.triton.placements[0].models == ("bert_base", "bert_large")


def test_an_empty_list_on_a_host_with_models_is_refused(tmp_path):
    for data in ({"models_source": repository(tmp_path, "resnet50")}, {"triton_models": ["resnet50"]},
                 {"models_s3_uri": "s3://bucket/repo"}):
        refused({"triton_servers": [RESNET, {"name": "idle", "models": []}], **data}, "triton_servers[1].models",
                "server idle: an empty list loads no model", "remove the server or give it models")


def test_models_of_a_server_need_explicit_model_control():
    refused({"triton_servers": [BERT], "triton_model_control_mode": "poll"}, "triton_servers[0].models",
            "server bert: has no effect with triton_model_control_mode 'poll'")


def test_a_qa_suite_for_a_model_no_server_loads_is_one_line_naming_host_and_model(tmp_path):
    write(tmp_path, "model: bert_base\ncases:" + GOOD_CASE, name="bert.yaml")
    write(tmp_path, "cases:" + GOOD_CASE, name="mobilenet.yaml")  # the model is the file name
    suites = str(tmp_path / "qa")
    refused({"qa_suites": suites, "triton_servers": [BERT, RESNET]}, "qa_suites",
            "mobilenet.yaml: model mobilenet is loaded by no Triton server of this host",
            "bert: bert_base, bert_large; resnet: resnet50")
    (tmp_path / "qa" / "mobilenet.yaml").unlink()
    assert cfg([BERT, RESNET], qa_suites=suites).qa.suites == suites
    # a server that loads every model of a repository the controller knows: that repository's models
    src = repository(tmp_path, "bert_base")
    write(tmp_path, "cases:" + GOOD_CASE, name="resnet50.yaml")
    refused({"qa_suites": suites, "models_source": src, "triton_servers": [{"name": "all"}]}, "qa_suites",
            "model resnet50 is loaded by no Triton server")
    cfg([{"name": "all"}], qa_suites=suites, models_s3_uri="s3://bucket/repo")  # unknown repository: the host says


# --- what the host agent is told ------------------------------------------------------------------------------


def test_the_sync_and_the_qa_runner_are_told_each_servers_models():
    c = cfg([BERT, RESNET, {"name": "rest"}], models_s3_uri="s3://bucket/repo")
    sync = sync_command(c)
    assert sync[sync.index("--server-models"):sync.index("--header-file")] == [
        "--server-models", "bert=bert_base,bert_large", "--server-models", "resnet=resnet50"]
    qa = run_command(c, "S1")
    assert qa[qa.index("--server-models"):qa.index("--server-models") + 4] == [
        "--server-models", "bert=bert_base,bert_large", "--server-models", "resnet=resnet50"]
    assert server_models_args([("a", None), ("b", ()), ("c", ("x",))]) == [
        "--server-models", "b=", "--server-models", "c=x"]
    default = host_config({**SPLIT, "triton_servers": [{}, {}], "models_s3_uri": "s3://bucket/repo"})
    assert "--server-models" not in sync_command(default) and "--server-models" not in run_command(default, None)


@pytest.fixture
def two_servers(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    """A synced V1 and two running servers: ``a`` loads steady, changing and arriving; ``b`` loads leaving."""
    dest = tmp_path / "models"
    header = tmp_path / "header"
    header.write_text(f"x-key: {SECRET}\n")
    header.chmod(0o600)
    set_remote(s3, bucket, "repo", V1)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert code == 0, err
    a, b = FakeTriton(dest / "current"), FakeTriton(dest / "current")
    a.loaded = {m: V1[f"{m}/1/model.py"] for m in ("steady", "changing")}
    b.loaded = {"leaving": V1["leaving/1/model.py"]}

    def run(*extra: str, models_of_a: str = "a=steady,changing,arriving"):
        return agent(capsys, *sync_args(endpoint, bucket, dest, "--server", f"a={a.url}", "--server", f"b={b.url}",
                                        "--server-models", models_of_a, "--server-models", "b=leaving",
                                        "--header-file", str(header), "--timeout", "5", *extra))
    return dest, a, b, run, (s3, bucket), out["version"]


def test_each_server_loads_and_unloads_only_its_own_models(two_servers):
    dest, a, b, run, (client, name), v1 = two_servers
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 0, err
    assert a.loads() == ["arriving:load", "changing:load"] and b.loads() == ["leaving:unload"]
    assert a.loaded == {"steady": b"one", "changing": b"v2", "arriving": b"hi"} and b.loaded == {}
    assert out["reload"]["loaded"] == ["arriving", "changing"] and out["reload"]["unloaded"] == ["leaving"]


def test_a_model_no_server_loads_is_neither_loaded_nor_unloaded(two_servers):
    dest, a, b, run, (client, name), v1 = two_servers
    set_remote(client, name, "repo", V2)
    code, out, err = run(models_of_a="a=steady")
    assert code == 0, err
    assert a.calls == [] and b.loads() == ["leaving:unload"]
    assert out["reload"]["loaded"] == [] and os.readlink(dest / "current").endswith(out["version"])


def test_a_failed_load_rolls_back_only_on_the_servers_that_load_the_model(two_servers):
    dest, a, b, run, (client, name), v1 = two_servers
    set_remote(client, name, "repo", {**V2, "changing/1/model.py": b"broken v3"})
    code, out, err = run()
    assert code == 1 and "model changing did not load" in err and out["reload"]["rolled_back"]
    assert b.calls == []  # leaving is b's: still loaded, since the update did not happen
    assert a.loaded == {"steady": b"one", "changing": b"v1"} and b.loaded == {"leaving": b"bye"}
    assert os.readlink(dest / "current") == f"versions/{v1}"


def test_switching_back_reloads_each_servers_own_models(two_servers, capsys):
    dest, a, b, run, (client, name), v1 = two_servers
    set_remote(client, name, "repo", V2)
    assert run()[0] == 0
    a.calls.clear()
    b.calls.clear()
    code, out, err = agent(capsys, "switch", "--dest", str(dest), "--to", v1, "--server", f"a={a.url}",
                           "--server", f"b={b.url}", "--server-models", "b=leaving", "--server-models",
                           "a=steady,changing,arriving", "--header-file", str(dest.parent / "header"),
                           "--timeout", "5")
    assert code == 0, err
    assert a.loads() == ["arriving:unload", "changing:load", "changing:unload"] and b.loads() == ["leaving:load"]
    assert a.loaded == {"steady": b"one", "changing": b"v1"} and b.loaded == {"leaving": b"bye"}


@pytest.mark.parametrize("extra,message", [
    (["--server-models", "c=x"], "--server-models c: no --server c"),
    (["--server-models", "a=x", "--server-models", "a=y"], "--server-models a given twice"),
    (["--server-models", "a=x/y"], "expected NAME=MODEL[,MODEL...]"),
    (["--server-models", "a"], "expected NAME=MODEL[,MODEL...]"),
])
def test_bad_server_models_exit_2_with_one_line(capsys, tmp_path, extra, message):
    for argv in (["sync", "--source", "s3://models-bucket/p", "--dest", str(tmp_path / "d")],
                 ["switch", "--dest", str(tmp_path / "d"), "--to", "v"],
                 ["qa", "check", "--selftest"]):
        code, out, err = agent(capsys, *argv, "--server", "a=grpc://127.0.0.1:1", *extra)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, (argv, err)


# --- QA: a suite runs against the servers that load its model -------------------------------------------------


class _Conn:
    def __init__(self, asked: list, server: str) -> None:
        self.asked, self.server = asked, server

    def wait_ready(self, wait: float) -> None:
        pass

    def model_info(self, model: str, version: str):
        self.asked.append((self.server, model))
        return add_sub(name=model)

    def close(self) -> None:
        pass


def _suites(tmp_path):
    write(tmp_path, "model: bert_base\ncases:" + GOOD_CASE, name="bert.yaml")
    write(tmp_path, "model: resnet50\ncases:" + GOOD_CASE, name="resnet.yaml")
    suites, errors = load_all([str(tmp_path / "qa")])
    assert not errors
    return suites


def test_qa_plans_each_suite_on_the_servers_that_load_its_model(tmp_path):
    asked: list = []
    servers = [command.Server("bert", {"grpc": "grpc://127.0.0.1:8001"}, frozenset({"bert_base"})),
               command.Server("resnet", {"grpc": "grpc://127.0.0.1:8011"}, frozenset({"resnet50"})),
               command.Server("all", {"grpc": "grpc://127.0.0.1:8021"})]
    jobs = command.plan(_suites(tmp_path), command.Options(servers=servers), lambda e: _Conn(asked, e.server))
    assert [(j.server.name, j.suite.model) for j in jobs] == [
        ("bert", "bert_base"), ("resnet", "resnet50"), ("all", "bert_base"), ("all", "resnet50")]
    assert sorted(asked) == sorted((j.server.name, j.suite.model) for j in jobs)


def test_a_suite_whose_model_no_server_loads_is_one_line_before_anything_is_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(command.socket, "gethostname", lambda: "inf2-b")
    asked: list = []
    servers = [command.Server("bert", {"grpc": "grpc://127.0.0.1:8001"}, frozenset({"bert_base"})),
               command.Server("idle", {"grpc": "grpc://127.0.0.1:8011"}, frozenset())]
    with pytest.raises(command.BadRun) as caught:
        command.plan(_suites(tmp_path), command.Options(servers=servers), lambda e: _Conn(asked, e.server))
    assert caught.value.lines == [f"{tmp_path}/qa/resnet.yaml: model resnet50: no server on inf2-b loads it "
                                  "(bert: bert_base; idle: none)"]
    assert asked == []


def test_qa_run_names_the_model_no_server_loads_on_one_line_and_exits_2(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(command.socket, "gethostname", lambda: "inf2-b")
    _suites(tmp_path)
    code, out, err = agent(capsys, "qa", "run", "--suites", str(tmp_path / "qa"), "--out", str(tmp_path / "out"),
                           "--server", "bert=grpc://127.0.0.1:1", "--server-models", "bert=bert_base")
    assert (code, out) == (2, "")
    assert err == (f"tritonfleet-agent: error: {tmp_path}/qa/resnet.yaml: model resnet50: no server on inf2-b "
                   "loads it (bert: bert_base)\n")


# --- the host record, rollback and status -----------------------------------------------------------------------


def test_the_host_record_says_which_models_its_spec_loads():
    explicit = ["tritonserver", "--model-control-mode=explicit", "--load-model=a", "--load-model=b"]
    assert hc.loaded_models(explicit) == ["a", "b"]
    assert hc.loaded_models(["tritonserver", "--model-control-mode=explicit", "--load-model=*"]) is None
    assert hc.loaded_models(["tritonserver", "--model-control-mode=explicit"]) == []
    assert hc.loaded_models(["tritonserver", "--model-control-mode=poll", "--load-model=a"]) is None
    record = hc.ServerRecord(name="bert", image="i", spec="s", run_args=[], command=explicit)
    assert hc.ServerRecord.from_json(record.to_json()).models == ["a", "b"]
    assert status._previous(record) == "i (spec s, models a, b)"
    assert status._previous(record.model_copy(update={"command": explicit[:2]})) == "i (spec s, models none)"
    assert status._previous(record.model_copy(update={"command": ["tritonserver"]})) == "i (spec s)"


def _row(models: list[str] | None, **placed) -> dict:
    return status.server_row({}, health.ServerHealth("h1", "bert", "8000", None, None, True, models, **placed))


def test_status_shows_each_servers_models_and_those_not_ready():
    assert _row(["bert_base", "bert_large"], placed=True, loads=("bert_base", "bert_large"))["models"] == \
        "bert_base, bert_large"
    assert _row(["bert_base"], placed=True, loads=("bert_base", "bert_large"))["models"] == \
        "bert_base, bert_large (not ready: bert_large)"
    assert _row(None, placed=True, loads=("bert_base",))["models"] == "bert_base"  # no index: nothing to compare
    assert _row(["x"], placed=True, loads=None)["models"] == "all"
    assert _row(["x"], placed=True, loads=())["models"] == "none"
    assert _row(["x"])["models"] == "?"  # a server the inventory does not place here


def test_status_reads_each_servers_models_from_the_inventory(monkeypatch):
    session = _Canned('@ready\n[{"name": "bert_base", "state": "READY"}, {"name": "resnet50", "state": "READY"}]')
    monkeypatch.setattr(health, "connect", lambda name, data: session)
    data = {**SPLIT, "ssh_hostname": "10.0.0.5", "triton_servers": [BERT, RESNET]}
    rows = status.host_status("inf2-b", data)
    assert [(r["server"], r["models"], r["endpoint"]) for r in rows] == [
        ("bert", "bert_base, bert_large (not ready: bert_large)", "http://10.0.0.5:8000"),
        ("resnet", "resnet50", "http://10.0.0.5:8010")]
    print_rows = status.host_status("inf2-b", {**data, "triton_servers": [{}, {}]})
    assert [r["models"] for r in print_rows] == ["all", "all"]


# --- the model gate (controller copy): a model that is no longer the server's ------------------------------------


def test_the_model_gate_drops_the_stamp_of_a_model_the_restarted_server_no_longer_loads(triton_api, tmp_path):  # noqa: F811
    gate, repo, state = triton_api
    assert gate("add_sub", "other").returncode == 0  # loaded: a stamp each
    stamps = tmp_path / "stamps"
    assert sorted(os.listdir(stamps)) == ["add_sub", "other"]
    (state / "started").write_text("3000000\n")  # recreated with its new list (add_sub only), after the stamps
    proc = gate("add_sub")
    assert proc.returncode == 0, proc.stderr
    assert calls(state) == [] and sorted(os.listdir(stamps)) == ["add_sub"]


def test_the_model_gate_unloads_a_model_loaded_since_the_start_that_is_no_longer_the_servers(triton_api, tmp_path):  # noqa: F811
    gate, repo, state = triton_api
    assert gate("add_sub", "other").returncode == 0
    os.utime(tmp_path / "stamps" / "other", (2_500_000, 2_500_000))  # the gate loaded it after the start
    proc = gate("add_sub")
    assert proc.returncode == 0, proc.stderr
    assert calls(state) == ["unload other"] and "unloading other (not one of this server's models)" in proc.stderr
    assert not (tmp_path / "stamps" / "other").exists()


def test_the_model_gate_without_a_list_keeps_the_stamps_of_models_still_there(triton_api, tmp_path):  # noqa: F811
    gate, repo, state = triton_api
    assert gate("add_sub", "other").returncode == 0
    (state / "started").write_text("3000000\n")
    assert gate().returncode == 0
    assert calls(state) == [] and sorted(os.listdir(tmp_path / "stamps")) == ["add_sub", "other"]


def test_the_script_is_valid_sh():
    from tests.unit.test_scripts import script_body

    assert subprocess.run(["sh", "-n", "-c", script_body("triton-models.sh")], capture_output=True).returncode == 0


def test_the_qa_runner_waits_for_its_servers_as_long_as_the_data_says():
    quick = run_command(cfg([BERT], qa_server_wait=5), None)
    assert quick[quick.index("--wait") + 1] == "5"
    default = run_command(cfg([BERT]), None)
    assert default[default.index("--wait") + 1] == "60"
