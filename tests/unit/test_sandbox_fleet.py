"""The sandbox lifecycle without the fleet: state file, inventory data, and `down` finding what `up`
started. Tests that run `down` do it in isolation: their own state and cache dirs, bridge, namespace,
veth and cgroup names, and services on loopback at free ports (a running sandbox is not touched)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

import tritonfleet.sandbox.fleet as fleet
import tritonfleet.sandbox.inventory as inventory

# The names every sandbox module may hold that point at machine-global things.
ISOLATED = ("STATE_DIR", "CACHE_DIR", "BRIDGE", "BRIDGE_IP", "NETNS_PREFIX", "VETH_PREFIX",
            "CGROUP_PARENT", "CGROUP_PREFIX", "REPO_PORT", "IMDS_PORT", "S3_PORT", "PROMETHEUS_PORT")


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

    repo, imds, s3, prometheus = _free_ports(4)
    patch(STATE_DIR=tmp_path / "state", CACHE_DIR=tmp_path / "cache-a", BRIDGE="tfut0", BRIDGE_IP="127.0.0.1",
          NETNS_PREFIX="tfut-", VETH_PREFIX="tfutv-", CGROUP_PARENT="tritonfleet-unittest",
          CGROUP_PREFIX="tritonfleet-unittest-", REPO_PORT=repo, IMDS_PORT=imds, S3_PORT=s3,
          PROMETHEUS_PORT=prometheus)
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
            with contextlib.suppress(ProcessLookupError):  # it may end between the look and the kill
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
# State file secrecy
# ---------------------------------------------------------------------------------------------


def test_state_file_with_the_repository_secret_is_owner_only(isolated, tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "state.json").write_text("{}")
    os.chmod(state_dir / "state.json", 0o644)  # as an earlier version left it
    old = os.umask(0o022)
    try:
        fleet.save_state({"hosts": {}, "services": {}, "repository_secret": "s3cret"})
    finally:
        os.umask(old)
    path = state_dir / "state.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["repository_secret"] == "s3cret"
    assert sorted(p.name for p in state_dir.iterdir()) == ["state.json"]  # no temporary copy left


def test_client_private_key_is_owner_only(isolated, tmp_path):
    keys = tmp_path / "state" / "keys"
    keys.mkdir(parents=True)
    os.chmod(keys, 0o755)
    fleet.ensure_client_key()
    assert stat.S_IMODE((keys / "id_ed25519").stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700


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


# ---------------------------------------------------------------------------------------------
# `down` finds what `up` started, whatever the environment, and checks what is left
# ---------------------------------------------------------------------------------------------


def test_down_stops_services_started_with_another_cache_dir(isolated, root_only, tmp_path):
    """`TRITONFLEET_CACHE=/tmp/x sandbox up`, then `sandbox down` without the variable."""
    (tmp_path / "cache-a" / "serve").mkdir(parents=True)
    (tmp_path / "state").mkdir()
    fleet.ensure_services(fleet.load_state())
    pids = _service_pids()
    try:
        assert len(pids) == 4 and all(_pid_alive(p) for p in pids)  # repositories, IMDS, S3, Prometheus
        isolated(CACHE_DIR=tmp_path / "cache-b")  # the environment `down` runs in
        left = fleet.down()
        assert [p for p in pids if _pid_alive(p)] == [], "services still running after down"
        assert left == []
        assert all(_port_free(port) for port in (fleet.REPO_PORT, fleet.IMDS_PORT, fleet.S3_PORT,
                                                 fleet.PROMETHEUS_PORT))
    finally:
        _kill(pids)


def test_down_stops_a_service_no_state_records(isolated, root_only, tmp_path):
    serve = tmp_path / "elsewhere" / "serve"
    serve.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(fleet.REPO_PORT), "--bind", "127.0.0.1",
                             "--directory", str(serve)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        for _ in range(200):  # bounded: up to ~20 s
            if not _port_free(fleet.REPO_PORT) or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None
        found = [x for x in fleet.leftovers() if x.startswith(f"process {proc.pid} ")]
        assert found and f"listening on 127.0.0.1:{fleet.REPO_PORT}" in found[0]
        assert fleet.down() == []
        assert proc.wait(timeout=10) is not None
    finally:
        proc.kill()
        proc.wait()


def test_down_reports_a_listener_it_cannot_stop(isolated, root_only):
    """Something else holds a service port at the bridge address: `down` says so, and kills nothing."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", fleet.IMDS_PORT))
        blocker.listen()
        left = fleet.down()
        found = [x for x in left if x.endswith(f"(listening on 127.0.0.1:{fleet.IMDS_PORT})")]
        assert len(found) == 1 and found[0].startswith(f"process {os.getpid()} ")


def test_a_hosts_mac_is_fixed_by_its_address_unique_and_locally_administered():
    """A host made again keeps its MAC, so neighbour tables that hold it stay right (a new random MAC sent the
    controller's traffic to the old one for about 40 s after every reset)."""
    from tritonfleet.sandbox.network import host_mac

    macs = [host_mac(f"192.168.250.{i}") for i in range(2, 255)]
    assert len(set(macs)) == len(macs) and host_mac("192.168.250.16") == macs[14]
    for mac in macs:
        first = int(mac.split(":")[0], 16)
        assert first & 0b10 and not first & 0b01, mac  # locally administered, unicast
        assert len(mac.split(":")) == 6 and all(len(x) == 2 for x in mac.split(":"))


@pytest.mark.parametrize(("base", "cache", "elsewhere"), [
    ("/var/cache/tritonfleet/base-8dfcaf69d873", "/var/cache/tritonfleet", False),
    ("/var/cache/tritonfleet/base-8dfcaf69d873", "/var/cache/tritonfleet/", False),
    ("/tmp/fc/base-8dfcaf69d873", "/var/cache/tritonfleet", True),
    ("/var/cache/tritonfleet-old/base-1", "/var/cache/tritonfleet", True),  # a prefix of the name is not the dir
    ("", "/var/cache/tritonfleet", False),  # never started: nothing of another cache in it
])
def test_a_host_built_from_another_cache_is_built_again(base, cache, elsewhere):
    """`up` with another TRITONFLEET_CACHE than the running hosts were built from (CI-like run 14 of the ninth
    session): the mirror's signing key, the base and the images are the new cache's, so such a host is replaced,
    else its apt refuses the mirror (NO_PUBKEY)."""
    h = fleet.HostState(name="h", ip="192.0.2.1", instance_type="inf2.xlarge", instance_id="i-0", spec={}, base=base)
    assert fleet.built_elsewhere(h, fleet.Path(cache)) is elsewhere
