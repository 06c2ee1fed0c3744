"""Helpers for e2e tests on the sandbox fleet: run pyinfra for real (CLI, subprocess) and read its results."""

from __future__ import annotations

import os
import pprint
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tritonfleet.sandbox import fleet
from tritonfleet.sandbox.inventory import sandbox_hosts

ROOT = Path(__file__).resolve().parents[2]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")


@dataclass
class PyinfraRun:
    returncode: int
    stdout: str
    stderr: str
    totals: dict[str, int]  # Grand total: operations / changed (Success) / errors / no_change

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


_TOTAL = re.compile(r"Grand total\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)")


def _totals(text: str) -> dict[str, int]:
    matches = list(_TOTAL.finditer(text))
    if not matches:
        return {}
    m = matches[-1]
    vals = [0 if v == "-" else int(v) for v in m.groups()]
    return dict(zip(("operations", "changed", "errors", "no_change"), vals, strict=True))


#: Host data for a controller-copy model repository (``models_source``) instead of the sandbox's S3.
COPY_MODE = {"models_s3_uri": None, "models_s3_endpoint": None, "models_s3_region": None}


def write_inventory(tmp: Path, names: list[str], extra: dict | None = None, per_host: dict | None = None) -> Path:
    """An inventory file with sandbox hosts ``names`` (data from the sandbox inventory plus overrides)."""
    hosts = []
    for name, data in sandbox_hosts(names):
        data = {**data, **(extra or {}), **((per_host or {}).get(name, {}))}
        hosts.append((name, data))
    inv = tmp / f"inv_{'_'.join(names)}.py"
    inv.write_text("sandbox = " + pprint.pformat(hosts) + "\n")
    return inv


def pyinfra(inventory: Path | str, *args: str, timeout: float = 900, env: dict | None = None) -> PyinfraRun:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off", **(env or {})}
    proc = subprocess.run([PYINFRA, "-y", str(inventory), *args], cwd=ROOT, text=True, capture_output=True,
                          timeout=timeout, env=env)
    return PyinfraRun(proc.returncode, proc.stdout, proc.stderr, _totals(proc.stdout + proc.stderr))


def assert_noop(run: PyinfraRun) -> None:
    """A run that did real work and changed nothing: the check for every "second run changes nothing".

    Each condition alone is too weak: ``changed == 0`` also holds for a run with no operations (a deploy
    that quietly did nothing) and for a run whose operations errored (``_ignore_errors`` keeps exit 0).
    """
    tail = run.output[-4000:]
    assert run.returncode == 0, f"pyinfra exited {run.returncode}:\n{tail}"
    assert run.totals, f"no 'Grand total' line in the pyinfra output:\n{tail}"
    assert run.totals["operations"] > 0, f"the run had no operations:\n{tail}"
    assert run.totals["errors"] == 0, f"{run.totals['errors']} operations failed:\n{tail}"
    assert run.totals["changed"] == 0, f"{run.totals['changed']} operations changed something:\n{tail}"
    assert run.totals["no_change"] == run.totals["operations"], f"{run.totals}:\n{tail}"


class SshError(RuntimeError):
    """SSH itself failed (host unreachable, refused, auth or host key): the command never ran.

    Distinct from the command's own non-zero exit, so an "is absent" check cannot pass on a dead host."""


class RemoteCommandError(RuntimeError):
    """The command ran on the host and exited non-zero (with ``check=True``)."""


# Printed to stderr by the remote shell before the command: its presence proves the command ran.
# (ssh's own exit code 255 is ambiguous: a remote command may exit 255 too.)
_RAN = "__tritonfleet_e2e_command_ran__"


def ssh(name: str, command: str, check: bool = True, timeout: float = 300,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` on sandbox host ``name``.

    Raises :class:`SshError` when SSH fails (whatever ``check`` says), and :class:`RemoteCommandError`
    when ``check`` and the command exits non-zero. With ``check=False`` a non-zero ``returncode`` is
    always the command's own."""
    h = fleet.get_host(name)
    proc = subprocess.run(fleet.ssh_base_args(h) + [f"echo {_RAN} >&2; {command}"], text=True,
                          capture_output=True, timeout=timeout, input=input)
    lines = proc.stderr.splitlines(keepends=True)
    ran = [line for line in lines if line.rstrip("\n") == _RAN]
    if not ran:
        raise SshError(f"{name} ({h.ip}): ssh failed (exit {proc.returncode}), `{command}` did not run: "
                       f"{proc.stderr.strip()[-500:]}")
    lines.remove(ran[0])
    proc.stderr = "".join(lines)
    if check and proc.returncode != 0:
        raise RemoteCommandError(f"{name}: `{command}` failed (exit {proc.returncode}): "
                                 f"{proc.stderr.strip()[-500:]}")
    return proc


def _yes_no(name: str, command: str, what: str) -> bool:
    """True/False from a test command that exits 0 (yes) or 1 (no); anything else is an error."""
    proc = ssh(name, command, check=False)
    if proc.returncode not in (0, 1):
        raise RemoteCommandError(f"{name}: cannot tell {what}: `{command}` exited {proc.returncode}: "
                                 f"{proc.stderr.strip()[-500:]}")
    return proc.returncode == 0


def path_exists(name: str, path: str) -> bool:
    """Whether ``path`` exists on host ``name`` (raises if the host cannot be asked)."""
    return _yes_no(name, f"test -e {shlex.quote(path)}", f"whether {path} exists")


def dpkg_version(name: str, pkg: str) -> str | None:
    """The installed version of ``pkg`` on host ``name``; ``None`` only when dpkg says it is not installed."""
    proc = ssh(name, f"dpkg-query -W -f='${{Status}}\\t${{Version}}' {shlex.quote(pkg)}", check=False)
    if proc.returncode == 1 and "no packages found matching" in proc.stderr:
        return None  # dpkg has never heard of it
    if proc.returncode != 0:
        raise RemoteCommandError(f"{name}: dpkg-query {pkg} exited {proc.returncode}: {proc.stderr.strip()}")
    status, _, version = proc.stdout.partition("\t")
    return version if status == "install ok installed" else None


# `systemctl is-active` prints one of these; a unit that does not exist is "inactive".
_UNIT_STATES = {"active", "reloading", "inactive", "failed", "activating", "deactivating", "maintenance",
                "refreshing"}


def service_active(name: str, unit: str) -> bool:
    """Whether systemd ``unit`` is active on host ``name`` (raises if systemd cannot be asked)."""
    proc = ssh(name, f"systemctl is-active {shlex.quote(unit)}", check=False)
    state = proc.stdout.strip()
    if state not in _UNIT_STATES:
        raise RemoteCommandError(f"{name}: `systemctl is-active {unit}` said {state!r} (exit "
                                 f"{proc.returncode}): {proc.stderr.strip()[-500:]}")
    return state == "active"


def host_ip(name: str) -> str:
    return fleet.get_host(name).ip


def killed_first_run(inv, marker: str, delay: float) -> str:
    """``deploys/serve.py`` SIGKILLed (its whole process group) ``delay`` seconds after its output shows the
    operation ``marker`` starting; its remote commands may go on running on the hosts. Returns its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    proc = subprocess.Popen([PYINFRA, "-y", str(inv), "deploys/serve.py"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: list[str] = []
    deadline = time.monotonic() + 600
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded: the deploy ends, or the deadline below
            lines.append(line)
            if "Starting operation:" in line and marker in line:
                time.sleep(delay)
                break
            if time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return "".join(lines)


def poll(what: str, check, deadline: float, interval: float = 1.0, context=lambda: "") -> object:
    """``check()`` every ``interval`` seconds until it returns something truthy (returned), bounded by ``deadline``
    seconds; then the test fails naming ``what``, the last answer and ``context()``."""
    import pytest

    end = time.monotonic() + deadline
    last = None
    while time.monotonic() < end:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"{what}: not seen within {deadline}s (last: {last!r}){context()}")


# -- the host watchdog, read as a user reads it (its state file and textfile metric, over SSH) ---------------------

WATCHDOG_STATE = "/var/lib/tritonfleet/watchdog/last.json"
WATCHDOG_TEXTFILE = "/var/lib/prometheus/node-exporter/tritonfleet_watchdog.prom"


def watchdog_state(name: str) -> dict:
    """The watchdog's state file on host ``name`` (``{}`` before its first pass)."""
    import json

    return json.loads(ssh(name, f"cat {WATCHDOG_STATE} 2>/dev/null || echo {{}}").stdout or "{}")


def watchdog_actions(name: str, reason: str, since: float) -> list[dict]:
    """The watchdog's actions for ``reason`` taken at ``since`` or later (the state file carries the last 50 over
    restarts of the service; the sandbox's hosts share this machine's clock)."""
    return [a for a in watchdog_state(name).get("actions", []) if a["reason"] == reason and a["at"] >= since]


def watchdog_metric(name: str, action: str, reason: str) -> float:
    """``tritonfleet_watchdog_actions_total`` of ``action`` for ``reason`` in the host's textfile (0 if none)."""
    for line in ssh(name, f"cat {WATCHDOG_TEXTFILE} 2>/dev/null || true").stdout.splitlines():
        if line.startswith("tritonfleet_watchdog_actions_total{") and f'action="{action}"' in line \
                and f'reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
