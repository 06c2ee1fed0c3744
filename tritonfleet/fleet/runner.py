"""The rollout's pyinfra runs and its reports lock (:mod:`tritonfleet.fleet.rollout` uses both).

:class:`Runner` runs one deploy on one host as a child process in a session of its own, so Ctrl-C (SIGINT)
reaches only the rollout; a run over ``--step-timeout`` gets SIGTERM, then SIGKILL after ``TERM_GRACE``
seconds. The process ids of the runs in flight are in ``<reports>/.rollout-running.json``, and the next
rollout waits for those a killed one left behind (:meth:`Runner.wait_for_leftovers`).

:class:`ReportsLock`: ``<reports>/.rollout.lock`` (flock, with the holder's pid), one rollout at a time per
reports directory.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonfleet.fleet.rollout import Options

#: Each pyinfra run's start and exit at DEBUG.
logger = logging.getLogger(__name__)

# How long a pyinfra run that overran --step-timeout gets after SIGTERM before its group is killed.
TERM_GRACE = 30.0


class Runner:
    """Runs pyinfra for one host at a time, each in a session of its own (see the module docstring)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.pyinfra = str(Path(sys.executable).parent / "pyinfra")
        self.running: dict[int, str] = {}
        self._lock = threading.Lock()
        self.state_file = Path(opts.reports_dir) / ".rollout-running.json"

    def _save(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(pid): h for pid, h in self.running.items()}))
        os.replace(tmp, self.state_file)

    def run(self, deploy: str, host: str, data: dict[str, str] | None = None) -> tuple[bool, str]:
        cmd = [self.pyinfra, "-y", self.opts.inventory, deploy, "--limit", host]
        for key, value in (data or {}).items():
            cmd += ["--data", f"{key}={value}"]
        env = {**os.environ, "PYINFRA_PROGRESS": "off"}
        proc = subprocess.Popen(cmd, cwd=self.opts.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        logger.debug("%s: %s started (pid %d)%s", host, deploy, proc.pid,
                     f" with {', '.join(data)}" if data else "")
        with self._lock:
            self.running[proc.pid] = host
            self._save()
        try:
            out, _ = proc.communicate(timeout=self.opts.step_timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.communicate(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=TERM_GRACE)
            return False, f"{deploy} took longer than {self.opts.step_timeout:.0f}s"
        finally:
            with self._lock:
                self.running.pop(proc.pid, None)
                self._save()
        logger.debug("%s: %s exited %d", host, deploy, proc.returncode)
        return proc.returncode == 0, _reason(out)

    def wait_for_leftovers(self, timeout: float = 1800) -> list[str]:
        """Wait for pyinfra runs a killed rollout left behind; the hosts they were on."""
        from tritonfleet.fleet.rollout import RolloutError  # here: the rollout module imports this one

        try:
            left = {int(pid): host for pid, host in json.loads(self.state_file.read_text()).items()}
        except (OSError, ValueError):
            return []
        deadline = time.monotonic() + timeout
        alive = [pid for pid in left if _alive(pid)]
        while alive and time.monotonic() < deadline:
            time.sleep(1)
            alive = [pid for pid in alive if _alive(pid)]
        if alive:
            raise RolloutError(f"pyinfra runs of an earlier rollout still running: pids {alive}")
        return sorted(set(left.values()))


def _signal_group(pid: int, sig: int) -> None:
    """Signal a run's process group; a group that has already gone is no error."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


class ReportsLock:
    """``<reports>/.rollout.lock``: one rollout at a time against a reports directory (flock; released
    by the kernel when the holder dies, so a killed rollout leaves no stale lock)."""

    def __init__(self, reports_dir: str) -> None:
        self.path = Path(reports_dir) / ".rollout.lock"
        self.fd: int | None = None

    def __enter__(self) -> ReportsLock:
        from tritonfleet.fleet.rollout import RolloutError  # here: the rollout module imports this one

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RolloutError(f"another rollout is running against {self.path.parent}/ ({holder}); wait for it "
                               "or use another --reports directory") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _reason(output: str) -> str:
    """The lines of a pyinfra run that say why it failed (errors, not the whole log)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    keep = [line for line in lines if "ERROR" in line or "rror:" in line or "failed" in line.lower()
            or "QA failed" in line]
    return " | ".join((keep or lines)[-4:])[:600]
