"""@fake deploys and the memory check: a plan whose models do not fit a server's devices stops the run in
preflight, one line, before any command reaches the host (``models_source``); with S3 the agent is told each
server's capacity, and the models it loads, to check each new version before it switches to it
(the agent's side: tests/unit/test_memory_check.py)."""

from __future__ import annotations

import shlex

import pytest
from pyinfra.connectors.fake import FakeConnector

from roles.agent import agent
from roles.models import models
from roles.preflight import PreflightError
from tests.fake.fakehost import run_deploys
from tests.fake.test_models_role import AGENT_PYTHON, S3, sync_lines
from tests.fake.test_models_role import small_wheelhouse as small_wheelhouse  # noqa: F401 (a fixture)
from tests.fake.test_roles import DATA, SERVE_DEPLOY

SPLIT = {**DATA, "instance_type": "inf2.48xlarge"}  # 12 devices of 32 GiB
DECLARE = 'parameters {{ key: "tritonfleet_memory_mib" value: {{ string_value: "{mib}" }} }}\n'


@pytest.fixture
def source(tmp_path) -> str:
    for name, mib in (("bert_base", 12288), ("bert_large", 20480), ("resnet50", 4096)):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n' + DECLARE.format(mib=mib))
    return str(tmp_path)


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """Every command and upload that reaches the @fake host (run_deploys records only a run that finishes)."""
    seen: list[str] = []
    run, put = FakeConnector.run_shell_command, FakeConnector.put_file

    def record_run(self, command, *args, **kwargs):
        seen.append(str(command))
        return run(self, command, *args, **kwargs)

    def record_put(self, src, dest, *args, **kwargs):
        seen.append(f"put {dest}")
        return put(self, src, dest, *args, **kwargs)

    monkeypatch.setattr(FakeConnector, "run_shell_command", record_run)
    monkeypatch.setattr(FakeConnector, "put_file", record_put)
    return seen


def test_models_that_do_not_fit_stop_the_run_in_preflight_before_anything_reaches_the_host(monkeypatch, source,
                                                                                          sent):
    servers = [{"name": "bert", "devices": [0], "models": ["bert_base", "bert_large"]},
               {"name": "resnet", "devices": [1], "models": ["resnet50"]}]
    with pytest.raises(PreflightError) as caught:
        run_deploys(SERVE_DEPLOY, {**SPLIT, "models_source": source, "triton_servers": servers}, "debian12",
                    monkeypatch)
    message = str(caught.value)
    assert message.startswith("preflight failed, nothing was changed:\n  ") and "Traceback" not in message
    (line,) = message.splitlines()[1:]
    assert line.strip() == (
        "@fake/h1: triton_servers[0].models ['bert_base', 'bert_large']: server bert: models need 32768 MiB "
        "(bert_large 1 x 20480 MiB, bert_base 1 x 12288 MiB) but its 1 device(s) hold 32768 MiB less 10% headroom "
        "= 29491 MiB; give it more devices or fewer models (triton_memory_check: false skips this check)")
    assert sent == []  # not a fact read, not an upload: refused from the data and the repository alone


def test_models_that_fit_deploy(monkeypatch, source, sent):
    servers = [{"name": "bert", "devices": [0, 1], "models": ["bert_base", "bert_large"]},
               {"name": "resnet", "devices": [2], "models": ["resnet50"]}]
    run_deploys(SERVE_DEPLOY, {**SPLIT, "models_source": source, "triton_servers": servers}, "debian12", monkeypatch)
    assert any("triton-swap.sh" in c for c in sent)
    # the check off: the plan that does not fit deploys as it is
    servers[0]["devices"] = [0]
    run_deploys(SERVE_DEPLOY, {**SPLIT, "models_source": source, "triton_servers": servers,
                               "triton_memory_check": False}, "debian12", monkeypatch)


def test_with_s3_the_agent_is_told_each_servers_capacity_and_models(monkeypatch):
    servers = [{"name": "bert", "devices": [0, 1], "models": ["bert_base"]}, {"name": "rest"}]
    data = {**S3, "instance_type": "inf2.48xlarge", "triton_servers": servers, "triton_memory_headroom_pct": 15}
    rec = run_deploys([agent, models], data, "debian12", monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    (sync,) = sync_lines(rec)
    args = shlex.split(sync)
    assert args[args.index("--server-models"):] == [
        "--server-models", "bert=bert_base", "--header-file", "/etc/tritonfleet/repository-header",
        "--host-name", "@fake/h1", "--accelerator", "neuron", "--memory-headroom", "15",
        "--server-capacity", "bert=2x32768", "--server-capacity", "rest=10x32768",
        "--compat", "/etc/tritonfleet/model-compat.json"]  # (the model check: tests/fake/test_models_role.py)
    # the dry run that decides whether to sync is the same command line: the agent parses it the same way
    dry = [c for c in rec.commands if "tritonfleet-agent sync" in c and "--dry-run" in c]
    assert dry and all("--server-capacity bert=2x32768 --server-capacity rest=10x32768" in c for c in dry)
    rec = run_deploys([agent, models], {**data, "triton_memory_check": False}, "debian12", monkeypatch,
                      responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    (sync,) = sync_lines(rec)
    assert "--server-capacity" not in sync and "--host-name" not in sync
