"""@fake runs with each server its own models (``triton_servers[].models``): every container's ``--load-model``
flags, the health and model gates per server, the agent's sync and a rollback's switch told each server's
models, and preflight refusing bad lists before anything runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from roles.preflight import PreflightError
from roles.rollback import rollback
from roles.triton import triton
from tests.fake.fakehost import run_deploys
from tests.fake.test_roles import DATA
from tests.fake.test_rollback_role import docker_answer
from tritonfleet import hostcontract as hc
from tritonfleet import wheelhouse

SPLIT = {**DATA, "instance_type": "inf2.48xlarge"}
SERVERS = [{"name": "bert", "models": ["bert_base", "bert_large"]}, {"name": "resnet", "models": ["resnet50"]}]


@pytest.fixture
def source(tmp_path) -> str:
    for m in ("bert_base", "bert_large", "resnet50"):
        (tmp_path / m / "1").mkdir(parents=True)
        (tmp_path / m / "config.pbtxt").write_text(f'name: "{m}"\n')
    return str(tmp_path)


def script_args(rec, script: str) -> dict[str, list[str]]:
    """Each run of ``script``: its first argument (the container) -> the arguments after it."""
    out = {}
    for c in rec.commands:
        if f"' {script} " in c:
            args = shlex.split(c.rsplit(f"' {script} ", 1)[1])
            out[args[0]] = args[1:]
    return out


def load_flags(rec) -> dict[str, list[str]]:
    """Each swapped container -> its tritonserver --load-model flags."""
    out = {}
    for c in rec.commands:
        if "triton-swap.sh" in c and "tritonserver --model-repository" in c:
            name = shlex.split(c.rsplit("' triton-swap.sh ", 1)[1])[0]
            out[name] = [a for a in shlex.split(c.rsplit("tritonserver --model-repository", 1)[1])
                         if a.startswith("--load-model")]
    return out


def test_each_container_loads_its_own_models_and_each_gate_waits_for_them(monkeypatch, source):
    rec = run_deploys(triton, {**SPLIT, "models_source": source, "triton_servers": SERVERS}, "debian12",
                      monkeypatch, ready=False)
    assert load_flags(rec) == {"bert": ["--load-model=bert_base", "--load-model=bert_large"],
                               "resnet": ["--load-model=resnet50"]}
    gates = script_args(rec, "triton-models.sh")  # CONTAINER URL TIMEOUT DIR STAMPS PREVIOUS MODEL...
    assert {name: (args[0], args[5:]) for name, args in gates.items()} == {
        "bert": ("http://127.0.0.1:8000", ["bert_base", "bert_large"]),
        "resnet": ("http://127.0.0.1:8010", ["resnet50"])}
    # the gate's own check (is there anything to do) asks only for the server's models
    probes = [c for c in rec.commands if "/var/lib/tritonfleet/loaded/" in c and "#!/bin/sh" not in c]
    assert len(probes) == 2
    assert probes and all(("8010/v2/models/resnet50" in c) != ("8000/v2/models/bert" in c) for c in probes)
    assert not any("8010/v2/models/bert" in c or "8000/v2/models/resnet50" in c for c in probes)


def test_a_server_without_models_loads_the_hosts_or_every_model(monkeypatch, source):
    servers = [SERVERS[0], {"name": "rest"}]
    rec = run_deploys(triton, {**SPLIT, "models_source": source, "triton_servers": servers,
                               "triton_models": ["resnet50"]}, "debian12", monkeypatch, ready=False)
    assert load_flags(rec)["rest"] == ["--load-model=resnet50"]
    assert script_args(rec, "triton-models.sh")["rest"][5:] == ["resnet50"]
    rec = run_deploys(triton, {**SPLIT, "models_source": source, "triton_servers": servers}, "debian12",
                      monkeypatch, ready=False)
    assert load_flags(rec) == {"bert": ["--load-model=bert_base", "--load-model=bert_large"],
                               "rest": ["--load-model=*"]}
    assert script_args(rec, "triton-models.sh")["rest"][5:] == ["bert_base", "bert_large", "resnet50"]


def test_with_s3_each_servers_ready_gate_waits_for_its_own_models(monkeypatch):
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), "d" * 64, "0.1.0+t")  # the agent is installed already
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)
    rec = run_deploys(triton, {**SPLIT, "models_s3_uri": "s3://models-bucket/prod", "triton_servers": SERVERS},
                      "debian12", monkeypatch, ready=False, responses={"sys.version_info": ["3.11", "x86_64", "d" * 64]})
    assert load_flags(rec) == {"bert": ["--load-model=bert_base", "--load-model=bert_large"],
                               "resnet": ["--load-model=resnet50"]}
    gates = script_args(rec, "triton-ready.sh")  # CONTAINER URL TIMEOUT MODEL...
    assert {name: (args[0], args[2:]) for name, args in gates.items()} == {
        "bert": ("http://127.0.0.1:8000", ["bert_base", "bert_large"]),
        "resnet": ("http://127.0.0.1:8010", ["resnet50"])}
    assert not any("triton-models.sh" in c for c in rec.commands)  # the agent loads models, not the gate


@pytest.mark.parametrize("servers,field,says", [
    ([SERVERS[0], {"name": "resnet", "models": ["resnet50", "mobilenet"]}], "triton_servers[1].models",
     "server resnet: model mobilenet not in the repository"),
    ([SERVERS[0], {"name": "idle", "models": []}], "triton_servers[1].models",
     "server idle: an empty list loads no model, and this host has models: remove the server or give it models"),
    ([{"name": "bad", "models": ["../etc"]}, SERVERS[1]], "triton_servers[0].models",
     "model name '../etc' is not a valid Triton model directory name"),
])
def test_bad_model_lists_stop_the_run_before_anything_changes(monkeypatch, source, servers, field, says):
    with pytest.raises(PreflightError) as caught:
        run_deploys(triton, {**SPLIT, "models_source": source, "triton_servers": servers}, "debian12", monkeypatch)
    message = str(caught.value)
    assert message.startswith("preflight failed, nothing was changed:\n  ")
    (line,) = message.splitlines()[1:]
    assert line.strip().startswith(f"@fake/h1: {field} ") and says in line, line


# --- rollback: the switch reloads each server's models as of the spec it goes back to ----------------------


def test_a_rollback_switch_tells_each_server_the_models_of_the_spec_it_returns_to(monkeypatch):
    old = hc.ServerRecord(name="triton", image="img:v1", spec="spec-v1", run_args=[],
                          command=["tritonserver", "--model-control-mode=explicit", "--load-model=bert_base"])
    new = hc.ServerRecord(name="triton", image="img:v2", spec="spec-v2", run_args=[],
                          command=["tritonserver", "--model-control-mode=explicit", "--load-model=*"], previous=old)
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), "d" * 64, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)

    def switch(point: dict, record: hc.ServerRecord, **data) -> str:
        rec = run_deploys(rollback, {**DATA, "instance_type": "inf2.xlarge", "models_s3_uri": "s3://model-bucket/prod",
                                     "rollback_point": json.dumps(point), **data}, "debian12", monkeypatch,
                          responses={"@@containers": docker_answer("spec-v2", record),
                                     "sys.version_info": ["3.11", "x86_64", "d" * 64]})
        (cmd,) = [c for c in rec.commands if "tritonfleet-agent switch" in c and "readlink" not in c]
        return cmd

    version = "000003-20261126T080000Z"
    back = switch({"servers": {"triton": "spec-v1"}, "models_version": version}, new)
    assert "--server triton=grpc://127.0.0.1:8001 --server-models triton=bert_base" in back
    # a server on its spec keeps it: that spec's models (here every one: no --server-models)
    same = switch({"servers": {"triton": "spec-v2"}, "models_version": version}, new,
                  triton_servers=[{"models": ["resnet50"]}])
    assert "--server-models" not in same
    # a server the point does not name: the host data's models
    data = switch({"servers": {}, "models_version": version}, new, triton_servers=[{"models": ["resnet50"]}])
    assert "--server-models triton=resnet50" in data
