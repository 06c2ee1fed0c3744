"""Issue 3 acceptance: preflight rejects bad data with host+field errors before any remote command runs."""

from __future__ import annotations

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.connectors.ssh import SSHConnector

from roles.preflight import PreflightError, config_for, preflight
from tests.preflight_cases import BAD
from tritonfleet.sandbox.inventory import sandbox_hosts


@pytest.fixture
def counted(monkeypatch):
    calls: list[str] = []
    orig_run, orig_put = SSHConnector.run_shell_command, SSHConnector.put_file

    def run(self, command, *a, **kw):
        calls.append(str(command))
        return orig_run(self, command, *a, **kw)

    def put(self, *a, **kw):
        calls.append(f"put {a[1] if len(a) > 1 else ''}")
        return orig_put(self, *a, **kw)

    monkeypatch.setattr(SSHConnector, "run_shell_command", run)
    monkeypatch.setattr(SSHConnector, "put_file", put)
    return calls


def _state(hosts: list[tuple[str, dict]]) -> State:
    state = State(inventory=Inventory((hosts, {})), config=Config())
    connect_all(state)
    return state


def test_bad_data_rejected_with_host_and_field_and_no_remote_command(sandbox, counted):
    assert len(BAD) >= 15
    (_, base), = sandbox_hosts(["inf2"])
    hosts = []
    for i, (itype, bad, _field, _msg) in enumerate(BAD):
        hosts.append((f"bad-{i:02d}", {**base, "instance_type": itype, **bad}))
    state = _state(hosts)
    try:
        with pytest.raises(PreflightError) as exc:
            add_deploy(state, preflight)
    finally:
        disconnect_all(state)
    lines = {line.split(":", 1)[0].strip(): line.strip() for line in str(exc.value).splitlines()[1:]}
    assert len(lines) == len(BAD)
    for i, (_itype, _bad, field, msg) in enumerate(BAD):
        line = lines[f"bad-{i:02d}"]
        assert line.startswith(f"bad-{i:02d}: {field}"), line
        assert msg in line, line
        assert "\n" not in line
    assert counted == [], f"preflight ran remote commands: {counted}"


def test_good_data_passes_and_instance_type_can_come_from_imds(sandbox, counted):
    (_, base), = sandbox_hosts(["inf1"])
    data = {k: v for k, v in base.items() if k != "instance_type"}
    state = _state([("inf1", data)])
    try:
        add_deploy(state, preflight)
        host = state.inventory.get_host("inf1")
        from pyinfra.context import ctx_host, ctx_state

        with ctx_state.use(state), ctx_host.use(host):
            assert config_for(host).instance.name == "inf1.6xlarge"
    finally:
        disconnect_all(state)
    assert any("instance-type" in c for c in counted), "IMDS was not asked"


def test_missing_instance_type_without_imds_names_the_field(sandbox):
    (_, base), = sandbox_hosts(["inf2"])
    data = {k: v for k, v in base.items() if k != "instance_type"}
    data["imds_endpoint"] = "http://192.168.250.1:9"  # nothing listens there
    state = _state([("lost", data)])
    try:
        with pytest.raises(PreflightError, match=r"lost: instance_type: missing"):
            add_deploy(state, preflight)
    finally:
        disconnect_all(state)
