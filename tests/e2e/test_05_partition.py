"""A host that stops answering mid-run is named and failed while the others finish (no hang)."""

from __future__ import annotations

import os
import subprocess
import time

from tests.e2e.helpers import PYINFRA, ROOT, write_inventory
from tritonfleet.sandbox import fleet

HOSTS = ["inf2", "inf1", "gpu"]
LOST = "gpu"


def test_a_partitioned_host_times_out_and_the_others_finish(sandbox, tmp_path):
    inv = write_inventory(tmp_path, HOSTS, extra={"connection_keepalive": 2, "connection_dead_after": 10})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    veth = fleet.get_host(LOST).veth
    proc = subprocess.Popen([PYINFRA, "-y", str(inv), "deploys/neuron.py"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    start = time.monotonic()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded: pyinfra connects within CONNECT_TIMEOUT or fails
            lines.append(line)
            if sum("Connected" in x for x in lines) == len(HOSTS):
                break
        subprocess.run(["ip", "link", "set", veth, "down"], check=True)
        partitioned = time.monotonic()
        rest, _ = proc.communicate(timeout=240)
        elapsed = time.monotonic() - partitioned
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=False)
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + rest
    assert proc.returncode != 0, output[-3000:]
    assert elapsed < 120, f"the run took {elapsed:.0f}s after the partition (start {partitioned - start:.0f}s)"
    failed = [line for line in output.splitlines() if f"[{LOST}]" in line and ("rror" in line or "ail" in line)]
    assert failed, output[-3000:]
    for other in set(HOSTS) - {LOST}:
        assert not [line for line in output.splitlines() if f"[{other}]" in line and "rror" in line], output[-3000:]
    fleet.wait_host(fleet.get_host(LOST))  # reachable again for the tests after this one
