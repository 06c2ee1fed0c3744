"""Converge cost of deploys/serve.py (issue "Converge cost"): wall time, remote commands and uploads per
host for a first run and a no-op run on the sandbox fleet at 1, 3 and 8 hosts, and the --dry run over
200 and 1000 @fake hosts (wall time, peak memory). Commands are counted on the connection (pyinfra's
--debug log of every command it sends).

    make bench-converge          # needs root (the sandbox); prints a table and the scaling ratio

Targets (issue): no-op <= 20 commands per host, first run <= 60; 8-host no-op wall <= 1.3x the 1-host
one; --dry over 1000 hosts <= 60 s and <= 1 GiB.
"""

from __future__ import annotations

import os
import pprint
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fake.fakehost import healthy  # noqa: E402
from tritonfleet.sandbox import fleet  # noqa: E402
from tritonfleet.sandbox.inventory import sandbox_hosts  # noqa: E402

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
SIZES = (1, 3, 8)
NOOP_RUNS = 3


def pyinfra(*args: str) -> tuple[float, str, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    start = time.monotonic()
    proc = subprocess.run([PYINFRA, "-y", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    return time.monotonic() - start, proc.stdout + proc.stderr, proc.returncode


def sent(output: str, hosts: list[str]) -> tuple[float, float]:
    commands = [len(re.findall(rf"Running command on {re.escape(h)}:", output)) for h in hosts]
    uploads = len(re.findall(r"Attempting upload of ", output))
    return statistics.mean(commands), uploads / len(hosts)


def write_inventory(path: Path, hosts: list[tuple[str, dict]]) -> Path:
    path.write_text("hosts = " + pprint.pformat(hosts) + "\n")
    return path


def sandbox_rows(tmp: Path) -> list[dict]:
    specs = [fleet.HostSpec("inf2.xlarge", name=f"bench-{i}") for i in range(1, max(SIZES) + 1)]
    fleet.up(specs)
    rows = []
    for n in SIZES:
        names = [s.name for s in specs[:n]]
        for name in names:
            fleet.reset_host(name)
        inv = write_inventory(tmp / f"inv{n}.py", sandbox_hosts(names))
        wall, out, rc = pyinfra(str(inv), "--debug", "deploys/serve.py")
        if rc:
            raise SystemExit(f"first run on {n} hosts failed:\n{out[-3000:]}")
        first_cmds, first_up = sent(out, names)
        walls, cmds = [], []
        for _ in range(NOOP_RUNS):
            w, out, rc = pyinfra(str(inv), "--debug", "deploys/serve.py")
            if rc:
                raise SystemExit(f"no-op run on {n} hosts failed:\n{out[-3000:]}")
            walls.append(w)
            cmds.append(sent(out, names)[0])
        rows.append({"hosts": n, "first_wall": wall, "first_cmds": first_cmds, "first_uploads": first_up,
                     "noop_wall": statistics.median(walls), "noop_cmds": statistics.median(cmds)})
    return rows


def dry_rows(tmp: Path) -> list[dict]:
    rows = []
    for n in (200, 1000):
        data = {"instance_type": "inf2.xlarge", "neuron_key_fingerprint": "A" * 40,
                "triton_repository_secret": "s" * 24, "fake_delay": 0, "fake_delay_jitter": 0}
        hosts = [(f"@fake/h{i}", {**data, "fake_responses": _responses()}) for i in range(n)]
        inv = write_inventory(tmp / f"fake{n}.py", hosts)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        wall, out, rc = pyinfra(str(inv), "--dry", "deploys/serve.py")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if rc:
            raise SystemExit(f"--dry over {n} hosts failed:\n{out[-3000:]}")
        rows.append({"hosts": n, "wall": wall, "peak_mib": max(peak, before) / 1024})
    return rows


def _responses() -> dict:
    # plain-string keys only (an inventory file is Python source: patterns are written as their text)
    return {k: v for k, v in healthy("inf2.xlarge", "debian12").items() if isinstance(k, str)}


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        dry = dry_rows(tmp)
        rows = sandbox_rows(tmp)
    print("\nconverge cost, deploys/serve.py on the sandbox (inf2.xlarge hosts, Debian 12)")
    print(f"{'hosts':>5} {'first wall s':>12} {'first cmds/host':>15} {'uploads/host':>12} "
          f"{'no-op wall s':>12} {'no-op cmds/host':>15}")
    for r in rows:
        print(f"{r['hosts']:>5} {r['first_wall']:>12.2f} {r['first_cmds']:>15.1f} {r['first_uploads']:>12.1f} "
              f"{r['noop_wall']:>12.2f} {r['noop_cmds']:>15.1f}")
    one, eight = rows[0]["noop_wall"], rows[-1]["noop_wall"]
    print(f"no-op wall, 8 hosts / 1 host: {eight / one:.2f}x (target <= 1.3x)")
    for r in dry:
        print(f"--dry over {r['hosts']} @fake hosts: {r['wall']:.1f} s, peak {r['peak_mib']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
