"""Issue 3 acceptance: preflight rejects bad data with host+field errors before any remote command runs."""

from __future__ import annotations

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.connectors.ssh import SSHConnector

from roles.preflight import PreflightError, config_for, preflight
from tritonfleet.sandbox.inventory import sandbox_hosts

# (instance type, bad data, field named in the error, words of the message)
BAD = [
    ("inf2.xlarg", {}, "instance_type", "closest known: inf2.xlarge"),
    ("inf2.24xlarge", {"triton_servers": [{"devices": [0, 1]}, {"devices": [3, 5]}]}, "triton_servers[1].devices",
     "contiguous (inf2.24xlarge has devices 0-5)"),
    ("inf2.24xlarge", {"triton_servers": [{"devices": [0, 1, 2]}, {"devices": [2, 3]}]}, "triton_servers[1].devices",
     ""),
    ("inf2.xlarge", {"triton_servers": [{"devices": [0, 1]}]}, "triton_servers[0].devices", "inf2.xlarge has"),
    ("inf2.8xlarge", {"triton_servers": [{"devices": [0], "cores": [2]}]}, "triton_servers[0].cores", ""),
    ("inf2.24xlarge", {"triton_servers": [{"devices": [0]}, {"devices": [1], "http_port": 8001}]},
     "triton_servers[1]", "port"),
    ("inf2.xlarge", {"triton_servers": [{"gpus": [0]}]}, "triton_servers[0].gpus", ""),
    ("inf2.xlarge", {"neuron_sdk_relase": "2.31.0"}, "neuron_sdk_relase", "did you mean neuron_sdk_release"),
    ("inf2.xlarge", {"neuron_sdk_release": "9.9.9"}, "neuron_sdk_release", "not in neuron_releases"),
    ("inf2.xlarge", {"neuron_key_fingerprint": "ABCD"}, "neuron_key_fingerprint", "40-hex-digit"),
    ("inf2.xlarge", {"neuron_key_fingerprint": None}, "neuron_key_fingerprint", "required on Neuron hosts"),
    ("inf2.xlarge", {"docker_data_root": "var/lib/docker"}, "docker_data_root", "absolute path"),
    ("inf2.xlarge", {"docker_log_max_file": 0}, "docker_log_max_file", "greater than or equal to 1"),
    ("inf2.xlarge", {"triton_shm_size": "huge"}, "triton_shm_size", "size like 1g"),
    ("inf2.xlarge", {"triton_image_source": "ftp"}, "triton_image_source", "'build', 'pull' or 'archive'"),
    ("inf2.xlarge", {"triton_repository_secret": "short"}, "triton_repository_secret", "at least 16"),
    ("inf1.6xlarge", {"neuron_dkms_version": "2.30.*"}, "neuron_dkms_version", "2.24"),
    ("inf2.xlarge", {"triton_bind_address": "300.1.1.1"}, "triton_bind_address", ""),
    ("inf2.xlarge", {"models_dir": "models"}, "models_dir", "absolute directory"),
    ("g5.xlarge", {"nvidia_driver_branch": "latest"}, "nvidia_driver_branch", "like '550'"),
    ("inf2.xlarge", {"triton_image_source": "archive", "triton_image_archive": None}, "triton_image_archive",
     "required when triton_image_source is 'archive'"),
    ("inf2.xlarge", {"neuron_dkms_version": "2.26.10.0*"}, "triton_neuron_runtime_version",
     "upgrade the host driver"),
    ("inf2.xlarge", {"imds_endpoint": "169.254.169.254"}, "imds_endpoint", "http"),
]


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
