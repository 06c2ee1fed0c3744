"""The sandbox lifecycle without the fleet: state file, inventory data, and `down` finding what `up`
started. Tests that run `down` do it in isolation: their own state and cache dirs, bridge, namespace,
veth and cgroup names, and services on loopback at free ports (a running sandbox is not touched)."""

from __future__ import annotations

import os
import signal
import socket
import sys

import pytest

import tritonfleet.sandbox.fleet as fleet
import tritonfleet.sandbox.inventory as inventory

# The names every sandbox module may hold that point at machine-global things.
ISOLATED = ("STATE_DIR", "CACHE_DIR", "BRIDGE", "BRIDGE_IP", "NETNS_PREFIX", "VETH_PREFIX",
            "CGROUP_PARENT", "CGROUP_PREFIX", "REPO_PORT", "IMDS_PORT", "S3_PORT")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A sandbox of its own: ``isolated(NAME=value, ...)`` changes a name in every sandbox module."""

    def patch(**values):
        assert set(values) <= set(ISOLATED)
        for name, module in list(sys.modules.items()):
            if name.startswith("tritonfleet.sandbox"):
                for key, value in values.items():
                    if hasattr(module, key):
                        monkeypatch.setattr(module, key, value)

    repo, imds, s3 = _free_ports(3)
    patch(STATE_DIR=tmp_path / "state", CACHE_DIR=tmp_path / "cache-a", BRIDGE="tfut0", BRIDGE_IP="127.0.0.1",
          NETNS_PREFIX="tfut-", VETH_PREFIX="tfutv-", CGROUP_PARENT="tritonfleet-unittest",
          CGROUP_PREFIX="tritonfleet-unittest-", REPO_PORT=repo, IMDS_PORT=imds, S3_PORT=s3)
    return patch


@pytest.fixture
def root_only():
    if os.geteuid() != 0:
        pytest.skip("`sandbox down` needs root")


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def _service_pids() -> list[int]:
    out = []
    for record in fleet.load_state().get("services", {}).values():
        out.append(record if isinstance(record, int) else record["pid"])
    return out


def _kill(pids) -> None:
    for pid in pids:
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Inventory host data
# ---------------------------------------------------------------------------------------------


def test_inventory_gives_the_models_role_its_s3_keys(isolated):
    fleet.save_state({"hosts": {"h1": {"name": "h1", "ip": "192.168.250.11", "instance_type": "inf2.xlarge",
                                       "instance_id": "i-0abc", "spec": {}, "nspawn_pid": 0}},
                      "services": {}, "repository_secret": "x", "supplies": {"repos": {}}})
    [(name, data)] = inventory.sandbox_hosts()
    assert name == "h1"
    assert data["models_s3_endpoint"] == fleet.s3_endpoint()
    assert data["models_s3_region"] == "us-east-1"
    assert data["models_s3_uri"] == "s3://tritonfleet-models/repos/sandbox/"
    assert "s3_endpoint" not in data and "s3_region" not in data
