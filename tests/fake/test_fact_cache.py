"""The fact cache (roles/facts/cache.py) on @fake hosts: a fact is read once per host until a command or an upload
changes that host (then it is read afresh), a fact read does not drop the others, and each host has its own
values and its own plan (one host's plan never seeds another host's facts)."""

from __future__ import annotations

import io
import json

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all

from roles.facts import cache
from roles.facts.files import FileDigests, ServiceStates

A, B = "a" * 64, "b" * 64
UNIT = "docker.service"


def _digests(sha: str) -> list[str]:
    """FileDigests output for /etc/app.conf with ``sha``."""
    return [f"{sha} 644 /etc/app.conf"]


def _units(active: str) -> list[str]:
    return [f"Id={UNIT}", f"ActiveState={active}", "UnitFileState=enabled", "LoadState=loaded"]


@pytest.fixture
def fleet(monkeypatch):
    """Two connected @fake hosts with the cache installed; ``answers[host]`` is what its commands print (edit it
    to change the host)."""
    monkeypatch.setattr(cache.atexit, "register", lambda *a: None)
    answers = {name: {"/etc/app.conf; do": _digests(sha), "systemctl show": _units("active")}
               for name, sha in (("@fake/h1", A), ("@fake/h2", B))}
    state = State(inventory=Inventory(([(name, {"fake_responses": answers[name], "fake_delay": 0,
                                              "fake_delay_jitter": 0}) for name in answers], {})), config=Config())
    connect_all(state)
    cache.install(state)
    hosts = {name: state.inventory.get_host(name) for name in answers}
    answers = {name: h.connector.data["fake_responses"] for name, h in hosts.items()}  # the ones it answers from
    yield state, hosts, answers
    disconnect_all(state)


def _reads(host, needle: str) -> int:
    """How many commands containing ``needle`` ran on ``host`` (a fact's command, alone or in a batch)."""
    return sum(needle in c for c in host.connector.executed_commands)


CONF, SHOW = "for f in /etc/app.conf; do", "systemctl show"


def _conf(host) -> tuple | None:
    return host.get_fact(FileDigests, paths=("/etc/app.conf",)).get("/etc/app.conf")


def test_a_fact_is_read_once_and_each_host_has_its_own_value(fleet):
    _, hosts, _ = fleet
    h1, h2 = hosts["@fake/h1"], hosts["@fake/h2"]
    assert _conf(h1) == (A, "644") and _conf(h2) == (B, "644")
    assert _conf(h1) == (A, "644") and _conf(h2) == (B, "644")
    assert _reads(h1, CONF) == 1 and _reads(h2, CONF) == 1


@pytest.mark.parametrize("change", ["command", "upload"])
def test_a_fact_is_read_again_after_a_command_or_an_upload_on_its_host(fleet, change):
    _, hosts, answers = fleet
    h1, h2 = hosts["@fake/h1"], hosts["@fake/h2"]
    assert _conf(h1) == (A, "644") and _conf(h2) == (B, "644")
    answers["@fake/h1"]["/etc/app.conf; do"] = _digests("c" * 64)  # the host changes (by hand, say) ...
    assert _conf(h1) == (A, "644")  # ... unseen until something runs there
    if change == "command":
        h1.run_shell_command("install -m 644 /tmp/new /etc/app.conf")
    else:
        h1.put_file(io.BytesIO(b"new\n"), "/etc/app.conf")
    assert _conf(h1) == ("c" * 64, "644")
    assert _reads(h1, CONF) == 2
    # every fact of the changed host is dropped, not only the one read last
    assert h1.get_fact(ServiceStates, units=(UNIT,))[UNIT]["active"] == "active"
    answers["@fake/h1"]["systemctl show"] = _units("failed")
    assert h1.get_fact(ServiceStates, units=(UNIT,))[UNIT]["active"] == "active"
    if change == "command":
        h1.run_shell_command("systemctl restart docker.service")
    else:
        h1.put_file(io.BytesIO(b"[Service]\n"), "/etc/systemd/system/docker.service.d/x.conf")
    assert h1.get_fact(ServiceStates, units=(UNIT,))[UNIT]["active"] == "failed"
    # the other host was not changed: its value stands, read once
    assert _conf(h2) == (B, "644") and _reads(h2, CONF) == 1


def test_reading_a_fact_does_not_drop_the_others(fleet):
    _, hosts, _ = fleet
    h1 = hosts["@fake/h1"]
    _conf(h1)
    h1.get_fact(ServiceStates, units=(UNIT,))  # its command runs through the same run_shell_command
    _conf(h1)
    assert _reads(h1, CONF) == 1 and _reads(h1, SHOW) == 1


def test_each_host_keeps_and_reads_its_own_plan(fleet, tmp_path, monkeypatch):
    state, hosts, answers = fleet
    h1, h2 = hosts["@fake/h1"], hosts["@fake/h2"]
    monkeypatch.setenv("TRITONFLEET_FACT_PLANS", str(tmp_path / "plans"))
    state.current_exec_filename = str(tmp_path / "deploys" / "serve.py")
    assert cache._plan_file(state, h1) != cache._plan_file(state, h2)
    # this run: h1 asks for the file, h2 for the unit; each plan holds what its own host asked
    cache.prefetch(state, [h1, h2])  # no plans yet: nothing read in a batch
    _conf(h1)
    h2.get_fact(ServiceStates, units=(UNIT,))
    cache._save_plans(state)
    plan1, plan2 = (json.loads(cache._plan_file(state, h).read_text()) for h in (h1, h2))
    assert plan1 == [["roles.facts.files", "FileDigests", repr({"paths": ("/etc/app.conf",)})]]
    assert plan2 == [["roles.facts.files", "ServiceStates", repr({"units": (UNIT,)})]]
    # the next run: each host's batch reads its own plan's facts, answered by that host
    mark = cache._MARK
    batch = {name: {mark: [f"{mark} 0", *facts, f"{mark}-rc 0 0"], **answers[name]}  # the batch matched first
             for name, facts in (("@fake/h1", _digests(A)), ("@fake/h2", _units("active")))}
    state2 = State(inventory=Inventory(([(name, {"fake_responses": batch[name], "fake_delay": 0,
                                               "fake_delay_jitter": 0}) for name in batch], {})), config=Config())
    state2.current_exec_filename = state.current_exec_filename
    connect_all(state2)
    try:
        cache.install(state2)
        n1, n2 = state2.inventory.get_host("@fake/h1"), state2.inventory.get_host("@fake/h2")
        answers = {h.name: h.connector.data["fake_responses"] for h in (n1, n2)}
        cache.prefetch(state2, [n1, n2])
        batches = {h.name: [c for c in h.connector.executed_commands if mark in c] for h in (n1, n2)}
        assert len(batches["@fake/h1"]) == 1 and "/etc/app.conf" in batches["@fake/h1"][0]
        assert "systemctl show" not in batches["@fake/h1"][0]
        assert len(batches["@fake/h2"]) == 1 and "systemctl show" in batches["@fake/h2"][0]
        assert "/etc/app.conf" not in batches["@fake/h2"][0]
        assert _conf(n1) == (A, "644") and n2.get_fact(ServiceStates, units=(UNIT,))[UNIT]["active"] == "active"
        assert _reads(n1, CONF) == 1 and _reads(n2, SHOW) == 1  # the batch, nothing more
        # h2's plan did not seed h1: h1's unit fact is read on its own (h1 answers "failed")
        answers["@fake/h1"]["systemctl show"] = _units("failed")
        assert n1.get_fact(ServiceStates, units=(UNIT,))[UNIT]["active"] == "failed"
        assert _reads(n1, SHOW) == 1
    finally:
        disconnect_all(state2)
