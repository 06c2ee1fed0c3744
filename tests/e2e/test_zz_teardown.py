"""Issue 2 acceptance: `sandbox down` leaves no trace; bad environments fail before anything is built.
Runs last (file order): it takes the session fleet down."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import BASELINE, machine_baseline
from tritonfleet.sandbox import fleet


def test_down_leaves_no_trace(sandbox):
    left = fleet.down()
    assert left == []
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if n.startswith(fleet.NETNS_PREFIX)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert fleet.BRIDGE not in links and fleet.VETH_PREFIX not in links
    assert str(fleet.STATE_DIR) not in open("/proc/self/mounts").read()
    assert fleet.find_cgroups() == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "systemd-nspawn" not in ps and "moto_server" not in ps and "tritonfleet.sandbox.imds" not in ps
    now = machine_baseline()
    for key in ("ip_forward", "nft", "routes", "dev"):
        assert now[key] == BASELINE[key], f"{key} changed by the sandbox"


def test_subnet_clash_is_a_clear_error_and_builds_nothing(sandbox):
    subprocess.run(["ip", "link", "add", "tfclash0", "type", "dummy"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", "192.168.250.77/24", "dev", "tfclash0"], check=True)
        proc = subprocess.run([sys.executable, "-m", "tritonfleet.cli", "sandbox", "up", "--instance-type",
                               "inf2.xlarge"], capture_output=True, text=True)
        assert proc.returncode == 1
        assert "subnet 192.168.250.0/24 is already used by tfclash0" in proc.stderr
        assert fleet.leftovers() == []
    finally:
        subprocess.run(["ip", "link", "del", "tfclash0"])


def test_non_root_is_a_clear_error(sandbox):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privileges")
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "tritonfleet.cli", "sandbox", "up"], capture_output=True, text=True,
                          env={**os.environ, "HOME": "/tmp"})
    assert proc.returncode == 1
    assert "needs root" in proc.stderr
