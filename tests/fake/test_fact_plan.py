"""The fact plan (roles/facts/cache.py): a run records the facts it asked; the next run of the same deploy reads
them in one command per host and seeds the cache. Here: what is recorded and kept (0600), how the batch output
is split and processed by the facts' own ``process()``, and that a fact whose command failed in the batch is not
seeded (it is read again the usual way)."""

from __future__ import annotations

import json
import os
import stat
from types import SimpleNamespace

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops

from roles.facts import cache
from roles.facts.files import FileDigests, ServiceStates
from roles.facts.system import LinuxDistribution
from roles.preflight import preflight
from tests.fake.fakehost import healthy


def test_a_run_records_its_facts_and_keeps_the_plan_private(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TRITONFLEET_FACT_PLANS", raising=False)
    data = {"instance_type": "inf2.xlarge", "neuron_key_fingerprint": "A" * 40, "triton_repository_secret": "s" * 24,
            "fake_responses": healthy("inf2.xlarge", "debian12"), "fake_delay": 0, "fake_delay_jitter": 0}
    state = State(inventory=Inventory((["@fake/h1"], data)), config=Config())
    state.current_exec_filename = str(tmp_path / "deploys" / "serve.py")
    monkeypatch.setattr(cache.atexit, "register", lambda *a: None)  # saved explicitly below
    connect_all(state)
    add_deploy(state, preflight)
    run_ops(state)
    disconnect_all(state)
    state.current_exec_filename = None  # as pyinfra leaves it once the deploy file has run
    cache._save_plans(state)
    (plan,) = (tmp_path / "tritonfleet" / "factplans").glob("*.json")
    assert stat.S_IMODE(os.stat(plan).st_mode) == 0o600
    entries = json.loads(plan.read_text())
    assert ["roles.facts.system", "LinuxDistribution", "{}"] in entries
    loaded = cache._load_plan(plan)
    assert (LinuxDistribution, {}) in loaded
    # another deploy file, another plan
    other = cache._plan_file(SimpleNamespace(current_exec_filename="deploys/qa.py"), SimpleNamespace(name="@fake/h1"))
    assert other != plan
    monkeypatch.setenv("TRITONFLEET_FACT_PLANS", "off")
    assert cache._plan_file(SimpleNamespace(current_exec_filename="deploys/qa.py"), SimpleNamespace(name="h")) is None


class _Host:
    """The parts of a pyinfra Host _prefetch_host uses; the batch command's output is given."""

    name = "h1"
    connected = True
    current_op_global_arguments = None

    def __init__(self, stdout: list[str], status: bool = True) -> None:
        setattr(self, cache._MARK, cache._HostCache())
        self.stdout, self.status, self.sent = stdout, status, []
        self.data = SimpleNamespace()

    def run_shell_command(self, command, **kwargs):
        self.sent.append(command)
        return self.status, SimpleNamespace(stdout_lines=self.stdout)


def _state():
    return State(inventory=Inventory((["@fake/x"], {})), config=Config())


def test_the_batch_output_seeds_each_fact_with_its_own_processing(monkeypatch):
    monkeypatch.setattr("pyinfra.api.facts.pop_global_arguments",
                        lambda state, host, kw: ({"_sudo": False, "_ignore_errors": False}, {}))
    plan = [(ServiceStates, {"units": ("docker.service",)}), (FileDigests, {"paths": ("/etc/a", "/etc/b")}),
            (LinuxDistribution, {})]
    m = cache._MARK
    host = _Host([f"{m} 0", "Id=docker.service", "ActiveState=active", "UnitFileState=enabled", "LoadState=loaded",
                  f"{m}-rc 0 0",
                  f"{m} 1", f"{m}-rc 1 1",  # a failing command: not seeded
                  f"{m} 2", f"{m}-rc 2 0"])  # no output: the fact's default
    assert cache._prefetch_host(_state(), host, plan) == 2
    assert len(host.sent) == 1  # one command for all of them
    values = getattr(host, m).values
    assert values[(ServiceStates, "()", repr([("units", ("docker.service",))]))] == {
        "docker.service": {"active": "active", "enabled": "enabled"}}
    assert (FileDigests, "()", repr([("paths", ("/etc/a", "/etc/b"))])) not in values
    assert values[(LinuxDistribution, "()", "[]")] == LinuxDistribution.default()


def test_a_failed_batch_seeds_nothing(monkeypatch):
    monkeypatch.setattr("pyinfra.api.facts.pop_global_arguments",
                        lambda state, host, kw: ({"_sudo": False, "_ignore_errors": False}, {}))
    host = _Host([f"{cache._MARK} 0", "x"], status=False)
    assert cache._prefetch_host(_state(), host, [(LinuxDistribution, {})]) == 0
    assert getattr(host, cache._MARK).values == {}
