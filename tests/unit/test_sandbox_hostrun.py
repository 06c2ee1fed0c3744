"""The host launcher runs its command again after a reboot (exit status 133), and only then."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HOSTRUN = [sys.executable, "-m", "tritonfleet.sandbox.hostrun", "--host", "t", "--"]


def _count(path: Path) -> int:
    return int(path.read_text().strip() or 0) if path.exists() else 0


def _counting(counter: Path, then: str, first: str = ":") -> list[str]:
    """A command that runs the shell snippet ``first``, counts its starts in ``counter``, then runs ``then``."""
    return ["sh", "-c", f'{first}; n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}; {then}']


def test_reboot_starts_the_host_again_and_power_off_ends_it(tmp_path):
    counter = tmp_path / "starts"
    cmd = _counting(counter, f'[ "$(cat {counter})" -lt 3 ] && exit 133; exit 7')
    proc = subprocess.run(HOSTRUN + cmd, capture_output=True, text=True, timeout=60)
    assert _count(counter) == 3  # two reboots, then a power-off
    assert proc.returncode == 7
    assert proc.stdout.count("rebooted; starting it again") == 2


def test_a_boot_loop_is_left_stopped(tmp_path):
    counter = tmp_path / "starts"
    proc = subprocess.run(HOSTRUN + _counting(counter, "exit 133"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert _count(counter) == 5
    assert "leaving it stopped" in proc.stdout


def test_sigterm_is_passed_on_and_ends_it_even_if_the_host_reboots(tmp_path):
    counter, got = tmp_path / "starts", tmp_path / "got-term"
    cmd = _counting(counter, "while :; do sleep 0.1; done", first=f"trap 'echo term > {got}; exit 133' TERM")
    proc = subprocess.Popen(HOSTRUN + cmd, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # bounded: up to ~30 s for the command to start
            if _count(counter):
                break
            time.sleep(0.1)
        assert _count(counter) == 1
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 133
    finally:
        proc.kill()
        proc.wait()
    assert got.read_text().strip() == "term"
    assert _count(counter) == 1  # not started again


def test_usage_error_is_one_line():
    proc = subprocess.run(HOSTRUN[:-1], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("usage:") and len(proc.stderr.strip().splitlines()) == 1
