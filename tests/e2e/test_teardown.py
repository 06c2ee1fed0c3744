"""Issue 2 acceptance: `sandbox down` leaves no trace; bad environments fail before anything is built.

Marked ``teardown``: tests/conftest.py runs these after every other test of the session (whatever this
file is called), because they take the session fleet down."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import machine_baseline
from tritonfleet.sandbox import fleet

pytestmark = pytest.mark.teardown

# The console script, not a module path: it stays `tritonfleet` wherever the CLI module lives.
TRITONFLEET = str(Path(sys.executable).parent / "tritonfleet")


def test_up_recovers_from_a_killed_session(sandbox):
    """A session end kills every process but leaves mounts, namespaces, links and cgroups behind."""
    import contextlib
    import signal

    victims = fleet._our_processes()
    assert victims
    for pid in victims:  # a listed process may be gone by now (a child that ends with its parent)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    fleet._kill_pids(set(victims))
    stale = fleet.leftovers()
    assert any(x.startswith("netns ") for x in stale) and any(x.startswith("mount ") for x in stale)
    state = fleet.up([fleet.HostSpec("inf2.xlarge", name="again")])
    assert list(state["hosts"]) == ["again"]
    h = fleet.get_host("again")
    assert fleet.ssh(h, "hostname").stdout.strip() == "again"
    # Only the new host's objects exist: the killed fleet's mounts, namespaces, links and cgroups are gone.
    allowed_links = {f"link {fleet.BRIDGE}", f"link {h.veth}"}
    for item in fleet.leftovers():
        if item.startswith("process "):
            continue
        assert item in allowed_links or "again" in item, f"stale leftover after recovery: {item}"


def test_down_leaves_no_trace(sandbox, baseline):
    left = fleet.down()
    assert left == []
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if n.startswith(fleet.NETNS_PREFIX)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert fleet.BRIDGE not in links and fleet.VETH_PREFIX not in links
    assert str(fleet.STATE_DIR) not in open("/proc/self/mounts").read()
    assert fleet.find_cgroups() == []
    # zombies left out: a launcher or the AWS endpoint (awsapi) started by the other fleet worker's `up` (its parent) stays a
    # zombie until that worker reaps it; it holds nothing (CI run 7 of the seventh session)
    ps = "\n".join(line.split(None, 1)[-1] for line in subprocess.run(
        ["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout.splitlines()
        if line.strip() and not line.split()[0].startswith("Z"))
    assert "systemd-nspawn" not in ps and "tritonfleet.sandbox.awsapi" not in ps and "tritonfleet.sandbox.imds" not in ps
    now = machine_baseline()
    for key in ("ip_forward", "nft", "routes", "dev"):
        assert now[key] == baseline[key], f"{key} changed by the sandbox"


def test_subnet_clash_is_a_clear_error_and_builds_nothing(sandbox):
    subprocess.run(["ip", "link", "add", "tfclash0", "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", "192.168.250.77/24", "dev", "tfclash0"], check=True)
        proc = subprocess.run([TRITONFLEET, "sandbox", "up", "--instance-type", "inf2.xlarge"],
                              capture_output=True, text=True)
        assert proc.returncode == 1
        assert "subnet 192.168.250.0/24 is already used by tfclash0" in proc.stderr
        assert fleet.leftovers() == []
    finally:
        subprocess.run(["ip", "link", "del", "tfclash0"])


def test_non_root_is_a_clear_error(monkeypatch):
    # The machine's Python lives under /root, so a real unprivileged process cannot run it here;
    # the check only reads the effective uid, which is what we vary.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(fleet.SandboxError, match="needs root"):
        fleet.up([fleet.HostSpec("inf2.xlarge")])
    with pytest.raises(fleet.SandboxError, match="needs root"):
        fleet.down()


def test_port_clash_is_a_clear_error_and_builds_nothing(sandbox):
    import socket

    assert fleet.down() == []
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT of the stopped repo server
    try:
        blocker.bind(("0.0.0.0", fleet.REPO_PORT))
    except OSError:
        pytest.skip(f"port {fleet.REPO_PORT} is already taken on this machine")
    blocker.listen()
    try:
        with pytest.raises(fleet.SandboxError, match=rf"port 192.168.250.1:{fleet.REPO_PORT} is in use"):
            fleet.up([fleet.HostSpec("inf2.xlarge")])
        assert fleet.leftovers() == []
    finally:
        blocker.close()
