"""Helpers for e2e tests on the sandbox fleet: run pyinfra for real (CLI, subprocess) and read its results."""

from __future__ import annotations

import os
import pprint
import re
import subprocess
import sys
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


def write_inventory(tmp: Path, names: list[str], extra: dict | None = None, per_host: dict | None = None) -> Path:
    """An inventory file with sandbox hosts ``names`` (data from the sandbox inventory plus overrides)."""
    hosts = []
    for name, data in sandbox_hosts(names):
        data = {**data, **(extra or {}), **((per_host or {}).get(name, {}))}
        hosts.append((name, data))
    inv = tmp / f"inv_{'_'.join(names)}.py"
    inv.write_text("sandbox = " + pprint.pformat(hosts) + "\n")
    return inv


def pyinfra(inventory: Path | str, *args: str, timeout: float = 900) -> PyinfraRun:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    proc = subprocess.run([PYINFRA, "-y", str(inventory), *args], cwd=ROOT, text=True, capture_output=True,
                          timeout=timeout, env=env)
    return PyinfraRun(proc.returncode, proc.stdout, proc.stderr, _totals(proc.stdout + proc.stderr))


def ssh(name: str, command: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    return fleet.ssh(fleet.get_host(name), command, check=check, timeout=timeout)


def host_ip(name: str) -> str:
    return fleet.get_host(name).ip
