"""Sandbox hosts behave like EC2 instances when they reboot or stop: they come back with their disks."""

from __future__ import annotations

import subprocess
import time

from tests.e2e.conftest import FLEET, SECOND_WORKER_HOSTS
from tests.e2e.helpers import SshError, ssh
from tritonfleet.sandbox import fleet

RUN_MARKER = "/run/tritonfleet-test-boot"  # on tmpfs: gone after a reboot
DISK_MARKER = "/var/tmp/tritonfleet-test-disk"


def _mark(name: str) -> None:
    ssh(name, f"touch {RUN_MARKER} && echo kept > {DISK_MARKER} && sync")


def _in_background(name: str, command: str) -> None:
    """``command`` on the host a second after SSH returned (reboot and power-off end the session)."""
    ssh(name, f"nohup sh -c 'sleep 1; {command}' >/dev/null 2>&1 &")


def _wait(what: str, check, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(1)


def _rebooted(name: str) -> bool:
    try:
        proc = ssh(name, f"test -e {RUN_MARKER} || systemctl is-system-running --wait", check=False, timeout=30)
    except (subprocess.TimeoutExpired, SshError):  # down while it reboots
        return False
    return proc.returncode == 0 and proc.stdout.strip() in ("running", "degraded")


def _state(name: str) -> str:
    return next(r["state"] for r in fleet.status() if r["name"] == name)


def test_a_rebooted_host_comes_back_with_its_disk(fresh):
    fresh("scratch")
    launcher = fleet.get_host("scratch").nspawn_pid
    _mark("scratch")
    _in_background("scratch", "systemctl reboot")
    _wait("scratch to reboot and answer over SSH", lambda: _rebooted("scratch"))
    assert ssh("scratch", f"cat {DISK_MARKER}").stdout.strip() == "kept"
    assert ssh("scratch", "hostname").stdout.strip() == "scratch"
    assert fleet.get_host("scratch").nspawn_pid == launcher  # the same launcher started it again
    assert _state("scratch") == "running"


def _launchers_but(name: str) -> dict[str, int | None]:
    """Each host's launcher pid, but ``name``'s and the second fleet worker's (it may reset its hosts meanwhile)."""
    return {h.name: h.nspawn_pid for h in fleet.hosts_from_state(fleet.load_state())
            if h.name != name and h.name not in SECOND_WORKER_HOSTS}


def test_a_stopped_host_is_started_by_up_with_its_disk(fresh):
    fresh("scratch")
    _mark("scratch")
    others = _launchers_but("scratch")
    _in_background("scratch", "systemctl poweroff")
    _wait("scratch to stop", lambda: _state("scratch") != "running")
    fleet.up(FLEET)
    assert _state("scratch") == "running"
    assert ssh("scratch", f"cat {DISK_MARKER}").stdout.strip() == "kept"
    assert ssh("scratch", f"test -e {RUN_MARKER}", check=False).returncode == 1  # it did boot again
    # the other hosts kept running, untouched
    assert _launchers_but("scratch") == others and others


def _mac(name: str) -> str:
    h = fleet.get_host(name)
    out = subprocess.run(["ip", "-n", h.netns, "-o", "link", "show", "eth0"], capture_output=True, text=True,
                         check=True).stdout
    return out.split("link/ether ")[1].split()[0]


def test_a_host_made_again_keeps_its_mac_and_the_controller_reaches_it(fresh):
    fresh("scratch")
    before = _mac("scratch")
    fresh("scratch")
    assert _mac("scratch") == before
    assert ssh("scratch", "hostname").stdout.strip() == "scratch"
    ip = fleet.get_host("scratch").ip
    neigh = subprocess.run(["ip", "neigh", "show", ip], capture_output=True, text=True).stdout
    assert before in neigh, neigh  # the controller's entry names the MAC the host has
