"""The session-scoped sandbox fleet shared by every e2e test, and a per-test host reset."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import run_dir, run_lock
from tritonfleet.sandbox import fleet

# One fleet for the whole session; tests pick hosts by role name.
FLEET = [
    fleet.HostSpec("inf2.xlarge", name="inf2"),
    fleet.HostSpec("inf1.6xlarge", name="inf1"),
    fleet.HostSpec("trn1.32xlarge", name="trn1"),
    fleet.HostSpec("g5.xlarge", name="gpu"),
    fleet.HostSpec("inf2.24xlarge", name="inf2big"),  # split into servers (test_12)
    fleet.HostSpec("inf1.xlarge", name="legacy", preinstall=["aws-neuron-dkms", "aws-neuron-runtime"]),
    fleet.HostSpec("inf2.xlarge", name="nodrv", driver_creates_devices=False),
    fleet.HostSpec("inf2.xlarge", name="scratch"),
    # the second fleet worker's hosts (tests/conftest.py: E2E_SECOND_FILES): no other e2e file touches them
    fleet.HostSpec("inf2.xlarge", name="scratch2"),
    fleet.HostSpec("inf2.xlarge", name="scratch3"),
    fleet.HostSpec(fleet.LB_TYPE, name="lb"),  # the load balancer: general purpose, no accelerator (test_lb.py)
]

#: The hosts of the second fleet worker's files (tests/conftest.py: E2E_SECOND_FILES), which run beside the others:
#: no other e2e file names them (tests/unit/test_suite_groups.py), and a test of the whole fleet leaves them out
#: (they may be mid-reset at any time).
SECOND_WORKER_HOSTS = ("scratch2", "scratch3", "inf2big")


def first_worker_hosts(names) -> list[str]:
    """``names`` without the second fleet worker's hosts (SECOND_WORKER_HOSTS)."""
    return [n for n in names if n not in SECOND_WORKER_HOSTS]


def machine_baseline() -> dict:
    """Machine state the sandbox must leave as it found it (forwarding, firewall, routes)."""

    def out(cmd):
        return subprocess.run(cmd, capture_output=True, text=True).stdout

    return {
        "ip_forward": open("/proc/sys/net/ipv4/ip_forward").read().strip(),
        "nft": out(["sh", "-c", "command -v nft >/dev/null && nft list ruleset || true"]),
        # a sandbox that is already up (e.g. after `make demo`) is not part of the machine's own state
        "routes": "".join(line for line in out(["ip", "route", "show"]).splitlines(True) if fleet.BRIDGE not in line),
        "dev": sorted(os.listdir("/dev")),
    }


@pytest.fixture(scope="session")
def baseline(request):
    """The machine's state before the sandbox came up (compared after `down`). Under xdist two workers run e2e
    tests: the first to get here takes it, before any ``up`` of this run, and the other reads the same."""
    path = run_dir(request.config) / "baseline.json"
    with run_lock(request.config, "baseline"):
        if path.exists():
            return json.loads(path.read_text())
        taken = machine_baseline()
        path.write_text(json.dumps(taken))
        return taken


@pytest.fixture(scope="session")
def sandbox(baseline):
    """The running sandbox fleet (brought up once; the ``teardown`` tests, run last, take it down)."""
    if os.geteuid() != 0:
        pytest.skip("e2e tests need root (network namespaces, systemd-nspawn)")
    fleet.up(FLEET)
    return {h.name: h for h in fleet.hosts_from_state(fleet.load_state())}


@pytest.fixture
def fresh(sandbox):
    """Reset a host to a bare root: ``fresh("scratch")`` returns its HostState."""

    def reset(name: str):
        return fleet.reset_host(name)

    return reset
