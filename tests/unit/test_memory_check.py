"""A plan whose models do not fit a server's accelerator memory is one line naming host, server, the biggest
models, need and capacity, refused before anything is loaded: in preflight where the repository is on the
controller (``models_source``), otherwise (S3 sync) by the agent before it switches ``current``, where the
version in service keeps serving. ``triton_memory_headroom_pct`` and ``triton_memory_check`` from the data; the
controller tells the agent each server's capacity. (The @fake deploys: tests/fake/test_memory_role.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roles.models import memory_args, server_capacity_args, sync_command
from tests.fake.test_roles import DATA
from tests.hostconfigs import host_config
from tests.unit.test_agent_live import SECRET, FakeTriton
from tests.unit.test_agent_sync import (  # noqa: F401 (endpoint, s3, bucket: fixtures)
    agent,
    bucket,
    endpoint,
    s3,
    set_remote,
    sync_args,
)
from tritonfleet.agent import memory
from tritonfleet.agent.memory import MemoryPlan, MemoryPlanError, ServerMemory
from tritonfleet.config import ConfigError

DECLARE = 'parameters {{ key: "tritonfleet_memory_mib" value: {{ string_value: "{mib}" }} }}\n'
SPLIT = {**DATA, "instance_type": "inf2.48xlarge"}  # 12 devices of 32 GiB
BERT = {"name": "bert", "devices": [0], "models": ["bert_base", "bert_large"]}
RESNET = {"name": "resnet", "devices": [1], "models": ["resnet50"]}
ONE_DEVICE = "its 1 device(s) hold 32768 MiB less 10% headroom = 29491 MiB"


def config(mib: int, instances: int = 1) -> str:
    return f"instance_group [ {{ kind: KIND_MODEL count: {instances} }} ]\n" + DECLARE.format(mib=mib)


def repository(root: Path, **models: str) -> str:
    """A controller-side repository: each model's config.pbtxt and a version directory."""
    for name, text in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}')
    return str(root)


@pytest.fixture
def src(tmp_path) -> str:
    # bert needs 2 x 12288 + 8192 = 32768 MiB: more than one device less 10% (29491), less than it less 0%
    return repository(tmp_path / "repo", bert_base=config(12288, 2), bert_large=config(8192),
                      resnet50=config(4096))


def refused(data: dict, field: str) -> str:
    with pytest.raises(ConfigError) as caught:
        host_config({**SPLIT, **data}, name="inf2-b")
    line = str(caught.value)
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"inf2-b: {field} "), line
    return line


# --- preflight (models_source) --------------------------------------------------------------------------------


def test_a_server_whose_models_do_not_fit_is_one_line_naming_host_field_server_models_need_and_capacity(src):
    line = refused({"models_source": src, "triton_servers": [BERT, RESNET]}, "triton_servers[0].models")
    assert line == ("inf2-b: triton_servers[0].models ['bert_base', 'bert_large']: server bert: models need 32768 MiB "
                    f"(bert_base 2 x 12288 MiB, bert_large 1 x 8192 MiB) but {ONE_DEVICE}; give it more devices or "
                    "fewer models (triton_memory_check: false skips this check)")


def test_the_field_is_where_the_servers_models_come_from(src):
    # the host's triton_models
    line = refused({"models_source": src, "triton_servers": [{"devices": [0]}], "triton_models": ["bert_base",
                                                                                                 "bert_large"]},
                   "triton_models")
    assert f"server triton: models need 32768 MiB (bert_base 2 x 12288 MiB, bert_large 1 x 8192 MiB) but {ONE_DEVICE}" \
        in line
    # every model of the repository: the repository
    line = refused({"models_source": src, "triton_servers": [{"devices": [0]}]}, "models_source")
    assert "server triton: models need 36864 MiB (bert_base 2 x 12288 MiB, bert_large 1 x 8192 MiB, resnet50 1 x " \
           "4096 MiB) but" in line
    # poll mode loads every model whatever triton_models says
    line = refused({"models_source": src, "triton_servers": [{"devices": [0]}], "triton_models": ["resnet50"],
                    "triton_model_control_mode": "poll"}, "models_source")
    assert "models need 36864 MiB" in line


def test_models_that_fit_pass_and_the_headroom_and_the_switch_come_from_the_data(src):
    host_config({**SPLIT, "models_source": src, "triton_servers": [{**BERT, "devices": [0, 1]},
                                                                   {**RESNET, "devices": [2]}]})
    host_config({**SPLIT, "models_source": src, "triton_servers": [BERT, RESNET], "triton_memory_headroom_pct": 0})
    two = [RESNET, {**BERT, "devices": [2, 3]}]
    host_config({**SPLIT, "models_source": src, "triton_servers": two, "triton_memory_headroom_pct": 50})  # exactly
    line = refused({"models_source": src, "triton_servers": two, "triton_memory_headroom_pct": 51},
                   "triton_servers[1].models")
    assert "server bert: models need 32768 MiB" in line
    assert "but its 2 device(s) hold 65536 MiB less 51% headroom = 32112 MiB" in line
    host_config({**SPLIT, "models_source": src, "triton_servers": [BERT, RESNET], "triton_memory_check": False})
    with pytest.raises(ConfigError, match="triton_memory_headroom_pct 100: Input should be less than 100"):
        host_config({**SPLIT, "triton_memory_headroom_pct": 100})


def test_an_exact_fit_fits_and_one_mib_more_does_not(tmp_path):
    src = repository(tmp_path, m=config(29491))
    host_config({**SPLIT, "models_source": src, "triton_servers": [{"devices": [0]}]})
    src = repository(tmp_path / "more", m=config(29492))
    assert "models need 29492 MiB (m 1 x 29492 MiB)" in refused(
        {"models_source": src, "triton_servers": [{"devices": [0]}]}, "models_source")


def test_a_gpu_servers_instances_are_per_gpu(tmp_path):
    src = repository(tmp_path, m="instance_group [ { kind: KIND_GPU count: 1 } ]\n" + DECLARE.format(mib=20000))
    g5 = {**DATA, "instance_type": "g5.12xlarge", "nvidia_key_fingerprint": "A" * 40, "models_source": src}
    host_config({**g5, "triton_servers": [{"gpus": [0]}, {"gpus": [1, 2, 3]}]})  # 20000 <= 22118, 60000 <= 66355
    host_config({**g5, "triton_servers": [{"gpus": [0, 1, 2, 3]}]})
    line = refused({**g5, "instance_type": "g5.12xlarge", "triton_memory_headroom_pct": 20,
                    "triton_servers": [{"gpus": [0, 1]}]}, "models_source")
    assert "models need 40000 MiB (m 2 x 20000 MiB) but its 2 GPU(s) hold 49152 MiB less 20% headroom = 39321 MiB" \
        in line


def test_a_model_whose_memory_cannot_be_told_is_one_line(tmp_path):
    src = repository(tmp_path, m=DECLARE.format(mib="12 GB"))
    line = refused({"models_source": src}, "models_source")
    assert "server triton: cannot tell its models' memory: m: parameters tritonfleet_memory_mib '12 GB'" in line
    (tmp_path / "m" / "config.pbtxt").write_text("instance_group [ { kind: KIND_NOPE } ]\n")
    assert "not a valid config.pbtxt" in refused({"models_source": src}, "models_source")


def test_preflight_leaves_s3_repositories_to_the_agent(src):
    host_config({**SPLIT, "models_s3_uri": "s3://bucket/repo", "triton_servers": [BERT, RESNET]})


# --- what the agent is told -----------------------------------------------------------------------------------


def test_the_sync_tells_the_agent_each_servers_capacity():
    c = host_config({**SPLIT, "models_s3_uri": "s3://bucket/repo", "triton_servers": [BERT, {**RESNET,
                                                                                              "devices": [1, 2]}]},
                    name="inf2-b")
    assert memory_args(c) == ["--host-name", "inf2-b", "--accelerator", "neuron", "--memory-headroom", "10",
                              "--server-capacity", "bert=1x32768", "--server-capacity", "resnet=2x32768"]
    cmd = sync_command(c)
    assert cmd[cmd.index("--server-models"):cmd.index("--header-file")] == [
        "--server-models", "bert=bert_base,bert_large", "--server-models", "resnet=resnet50"]
    assert cmd[cmd.index("--host-name"):] == [*memory_args(c), "--compat", "/etc/tritonfleet/model-compat.json"]
    # GPUs, another headroom, poll mode (no --server: the servers load the new version by themselves)
    g5 = host_config({**DATA, "instance_type": "g5.12xlarge", "nvidia_key_fingerprint": "A" * 40,
                      "models_s3_uri": "s3://bucket/repo", "triton_servers": [{"gpus": [0]}, {"gpus": [1, 2, 3]}],
                      "triton_memory_headroom_pct": 12.5, "triton_model_control_mode": "poll"}, name="g5")
    cmd = sync_command(g5)
    assert "--server" not in cmd and cmd[cmd.index("--host-name"):] == [
        "--host-name", "g5", "--accelerator", "gpu", "--memory-headroom", "12.5",
        "--server-capacity", "triton-0=1x24576", "--server-capacity", "triton-1=3x24576"]
    off = host_config({**SPLIT, "models_s3_uri": "s3://bucket/repo", "triton_memory_check": False})
    assert memory_args(off) == [] and "--server-capacity" not in sync_command(off)
    assert server_capacity_args([("a", 1, 100), ("b", 3, 7)]) == [
        "--server-capacity", "a=1x100", "--server-capacity", "b=3x7"]


# --- the agent's check ----------------------------------------------------------------------------------------


def test_the_agents_plan_checks_each_server_against_its_own_models(tmp_path):
    repository(tmp_path, big=config(20000), small=config(1000, 2), cpu="instance_group [ { kind: KIND_CPU } ]\n")
    fits = MemoryPlan("h", (ServerMemory("a", 1, 32768, frozenset({"big", "gone"})),
                            ServerMemory("b", 1, 4096, frozenset({"small", "cpu"}))))
    fits.check(tmp_path)
    with pytest.raises(MemoryPlanError) as err:
        MemoryPlan("h", (ServerMemory("a", 1, 32768, frozenset({"big"})), ServerMemory("b", 1, 2048))).check(tmp_path)
    assert str(err.value) == ("h: server b: models need 22000 MiB (big 1 x 20000 MiB, small 2 x 1000 MiB, cpu 0 x "
                              "0 MiB) but its 1 device(s) hold 2048 MiB less 10% headroom = 1843 MiB")
    gpu = MemoryPlan("h", (ServerMemory("g", 2, 24576, frozenset({"small"})),), "gpu", 0)
    gpu.check(tmp_path)  # KIND_MODEL: 2 instances whatever the GPUs
    (tmp_path / "small" / "config.pbtxt").write_text(DECLARE.format(mib=24576))  # no group: one per GPU
    gpu.check(tmp_path)
    (tmp_path / "small" / "config.pbtxt").write_text(DECLARE.format(mib=24577))
    with pytest.raises(MemoryPlanError, match=r"h: server g: models need 49154 MiB \(small 2 x 24577 MiB\) but its 2 "
                                              r"GPU\(s\) hold 49152 MiB less 0% headroom = 49152 MiB"):
        gpu.check(tmp_path)
    (tmp_path / "small" / "config.pbtxt").write_text("instance_group [ { kind: KIND_NOPE } ]")
    with pytest.raises(MemoryPlanError, match=r"^h: server b: .*small/config.pbtxt: not a valid config.pbtxt"):
        fits.check(tmp_path)


V1 = {"steady/config.pbtxt": config(1000).encode(), "steady/1/model.py": b"one",
      "changing/config.pbtxt": config(1000).encode(), "changing/1/model.py": b"v1"}
# changing needs 2 x 12000 MiB now (with steady: 25000 MiB), and arrives a new model of 4000
V2 = {**V1, "changing/config.pbtxt": config(12000, 2).encode(), "changing/1/model.py": b"v2",
      "arriving/config.pbtxt": config(4000).encode(), "arriving/1/model.py": b"hi"}


@pytest.fixture
def served(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    """V1 synced and served by a running server; ``run(*capacity)`` syncs with the server and its capacity."""
    dest = tmp_path / "models"
    header = tmp_path / "header"
    header.write_text(f"x-key: {SECRET}\n")
    header.chmod(0o600)
    set_remote(s3, bucket, "repo", V1)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert code == 0, err
    triton = FakeTriton(dest / "current")
    triton.loaded = {"steady": b"one", "changing": b"v1"}

    def run(*extra: str):
        return agent(capsys, *sync_args(endpoint, bucket, dest, "--server", f"triton={triton.url}", "--header-file",
                                        str(header), "--timeout", "5", "--host-name", "inf2-a", *extra))
    return dest, triton, run, (s3, bucket), out["version"]


def test_a_version_that_does_not_fit_is_refused_before_the_switch_and_the_current_one_keeps_serving(served):
    dest, triton, run, (client, name), v1 = served
    set_remote(client, name, "repo", V2)
    code, out, err = run("--server-capacity", "triton=1x32768")  # 29491 usable: 29000 fits
    assert code == 0, err
    set_remote(client, name, "repo", V1)
    assert run("--server-capacity", "triton=1x32768")[0] == 0  # back to V1 (kept: switched, no download)
    triton.calls.clear()
    set_remote(client, name, "repo", {**V2, "arriving/config.pbtxt": config(5000).encode()})  # 30000 MiB
    code, out, err = run("--server-capacity", "triton=1x32768")
    assert code == 1 and out["status"] == "failed"
    assert err == ("tritonfleet-agent: error: inf2-a: server triton: models need 30000 MiB (changing 2 x 12000 MiB, "
                   f"arriving 1 x 5000 MiB, steady 1 x 1000 MiB) but {ONE_DEVICE}; refused before the switch: "
                   f"current keeps serving {v1}\n")
    assert os.readlink(dest / "current") == f"versions/{v1}"
    assert triton.calls == [] and triton.loaded == {"steady": b"one", "changing": b"v1"}  # nothing loaded
    assert not (dest / ".reload-pending.json").exists()
    # the refused tree stays a staging dir: the next run links its files instead of downloading them again
    assert [p.name for p in (dest / "versions").iterdir() if p.name.startswith(".staging-")]
    code, out, err = run("--server-capacity", "triton=1x32768", "--memory-headroom", "5")  # 31129 usable
    assert code == 0, err
    assert out["downloaded"] == 0 and out["resumed"] == 4  # changing's and arriving's files
    assert triton.loaded == {"steady": b"one", "changing": b"v2", "arriving": b"hi"}
    assert os.readlink(dest / "current") == f"versions/{out['version']}"


def test_a_kept_version_that_does_not_fit_is_not_switched_back_to(served):
    dest, triton, run, (client, name), v1 = served
    set_remote(client, name, "repo", V2)
    code, out, err = run()  # no capacity given: no check
    assert code == 0, err
    v2 = out["version"]
    set_remote(client, name, "repo", V1)
    assert run("--server-capacity", "triton=1x32768")[0] == 0  # V1 fits
    set_remote(client, name, "repo", V2)  # V2 is on disk: a switch, no download, but on a smaller device now
    code, out, err = run("--server-capacity", "triton=1x16384")
    assert code == 1 and "server triton: models need 29000 MiB" in err
    assert f"less 10% headroom = 14745 MiB; refused before the switch: current keeps serving {v1}" in err
    assert os.readlink(dest / "current") == f"versions/{v1}" and (dest / "versions" / v2).is_dir()


def test_only_the_servers_models_count(served):
    dest, triton, run, (client, name), v1 = served
    set_remote(client, name, "repo", V2)
    # the server loads steady and arriving (5000 MiB); changing (24000 MiB) is another host's
    code, out, err = run("--server-models", "triton=steady,arriving", "--server-capacity", "triton=1x8192")
    assert code == 0, err
    assert triton.loaded == {"steady": b"one", "changing": b"v1", "arriving": b"hi"}


def test_a_dry_run_and_an_unchanged_repository_check_nothing(served):
    dest, triton, run, (client, name), v1 = served
    assert run("--server-capacity", "triton=1x1")[0] == 0  # unchanged: nothing is switched
    set_remote(client, name, "repo", V2)
    code, out, err = run("--server-capacity", "triton=1x1", "--dry-run")
    assert code == 0 and out["status"] == "dry-run", err


@pytest.mark.parametrize("args,message", [
    (["--server-capacity", "triton"], "expected NAME=DEVICESxMIB"),
    (["--server-capacity", "triton=0x32768"], "expected NAME=DEVICESxMIB"),
    (["--server-capacity", "triton=2x"], "expected NAME=DEVICESxMIB"),
    (["--server-capacity", "tri ton=1x5"], "expected NAME=DEVICESxMIB"),
    (["--server-capacity", "a=1x5", "--server-capacity", "a=2x5"], "--server-capacity a given twice"),
    (["--server-capacity", "a=1x5", "--memory-headroom", "100"], "100 is not within 0 to below 100"),
    (["--server-capacity", "a=1x5", "--memory-headroom", "nan"], "is not within 0 to below 100"),
    (["--server-capacity", "a=1x5", "--memory-headroom", "x"], "not a percentage"),
    (["--server-capacity", "a=1x5", "--accelerator", "tpu"], "invalid choice: 'tpu'"),
    (["--server-capacity", "a=1x5", "--host-name", " "], "not a host name"),
    (["--server-capacity", "a=1x5", "--host-name", "a\nb"], "not a host name"),
])
def test_bad_memory_arguments_are_one_line_and_exit_2(capsys, tmp_path, args, message):
    code, out, err = agent(capsys, "sync", "--source", "s3://bucket/p", "--dest", str(tmp_path), *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_the_agents_plan_from_its_command_line(monkeypatch):
    from tritonfleet.agent import cli

    parser = cli.build_parser()
    args = parser.parse_args(["sync", "--source", "s3://bucket/p", "--dest", "/d", "--server", "a=grpc://h:1",
                              "--server-models", "a=x,y", "--server-capacity", "a=2x100", "--server-capacity", "b=1x7",
                              "--accelerator", "gpu", "--memory-headroom", "5"])
    monkeypatch.setattr(cli.socket, "gethostname", lambda: "ip-10-0-0-1")
    plan = cli.memory_plan(args, parser, cli.server_models(args, parser))
    assert plan == MemoryPlan("ip-10-0-0-1", (ServerMemory("a", 2, 100, frozenset({"x", "y"})),
                                              ServerMemory("b", 1, 7)), "gpu", 5.0)
    none = parser.parse_args(["sync", "--source", "s3://bucket/p", "--dest", "/d"])
    assert cli.memory_plan(none, parser, {}) is None
    assert none.memory_headroom == memory.DEFAULT_HEADROOM_PCT and none.accelerator == "neuron"


# --- tritonfleet plan: the host's headroom, and its own table where preflight would refuse -----------------------


def test_plan_takes_each_hosts_headroom_and_shows_a_plan_preflight_refuses(tmp_path, src):
    from click.testing import CliRunner

    from tritonfleet.face.cli import main

    common = {"neuron_key_fingerprint": "A" * 40, "triton_repository_secret": "s" * 24}
    host = {"instance_type": "inf2.48xlarge", "models_source": src, "triton_servers": [BERT, RESNET]}

    def plan(*args: str, **data):
        inv = tmp_path / "inv.py"
        inv.write_text(f"hosts = ([('inf2-a', {{**{host!r}, **{data!r}}})], {common!r})\n")
        return CliRunner().invoke(main, ["plan", "-i", str(inv), *args])

    result = plan()  # preflight refuses this host's data; plan shows it, the same line at the end
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: inf2-a: server bert: models need 32768 MiB (bert_base 2 x 12288 MiB, bert_large 1 x 8192 MiB) "
        f"but {ONE_DEVICE}")
    assert plan(triton_memory_headroom_pct=0).exit_code == 0
    assert plan("--headroom", "10", triton_memory_headroom_pct=0).exit_code == 1
    assert plan("--headroom", "0").exit_code == 0


def test_a_first_version_that_does_not_fit_says_nothing_serves_yet(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    """No current version to keep serving: the refusal says so (and makes none)."""
    dest = tmp_path / "models"
    set_remote(s3, bucket, "repo", V2)  # 29000 MiB on a 16 GiB device
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, dest, "--server-capacity", "triton=1x16384",
                                              "--host-name", "inf2-a"))
    assert code == 1 and out["status"] == "failed"
    assert err.endswith("refused before the switch: there is no current version yet\n"), err
    assert not (dest / "current").exists()
