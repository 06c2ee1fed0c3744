"""A host that stops answering is named and left out while the others finish (no hang).

One test, deterministic: the cut lands while preflight reads the host's facts (the case issue 20 found; the
earlier test here cut the link right after connecting, which raced with the same reads)."""

from __future__ import annotations

import os
import subprocess
import time

from tests.e2e.helpers import PYINFRA, ROOT, ssh, write_inventory
from tritonfleet.sandbox import fleet

HOSTS = ["inf2", "inf1", "gpu"]
LOST = "gpu"


def _run_cut_after_connect(inv, veth: str, settle: float = 0.0) -> tuple[subprocess.Popen, str, float]:
    """deploys/neuron.py on HOSTS; once every host is connected (and ``settle`` seconds more), ``veth``'s link
    goes down. Returns the finished process, its output and the seconds it ran after the cut."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    proc = subprocess.Popen([PYINFRA, "-y", str(inv), "deploys/neuron.py"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded: pyinfra connects within CONNECT_TIMEOUT or fails
            lines.append(line)
            if sum("Connected" in x for x in lines) == len(HOSTS):
                break
        time.sleep(settle)
        subprocess.run(["ip", "link", "set", veth, "down"], check=True)
        partitioned = time.monotonic()
        rest, _ = proc.communicate(timeout=240)
        return proc, "".join(lines) + rest, time.monotonic() - partitioned
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=False)
        if proc.poll() is None:
            proc.kill()


def test_a_host_lost_while_preflight_reads_its_facts_is_left_out_and_the_others_go_on(sandbox, tmp_path):
    """Issue 20 part 3, as found: the partition lands while preflight reads the host's facts. It is named
    unreachable with its cause (not "unsupported OS"), left out, and the other hosts run the deploy. To land
    the partition inside that read every time, the host's /etc/os-release (what the OS fact reads) is a FIFO
    that blocks the read until the link is down."""
    inv = write_inventory(tmp_path, HOSTS, extra={"connection_keepalive": 2, "connection_dead_after": 10})
    lost = fleet.get_host(LOST)
    ssh(LOST, "mv /etc/os-release /etc/os-release.tf-e2e && mkfifo -m 644 /etc/os-release")
    try:  # 2 s after connecting, the OS fact is read, and waits on the FIFO
        proc, output, elapsed = _run_cut_after_connect(inv, lost.veth, settle=2)
    finally:
        fleet.wait_host(lost)
        # a writer ends the read still blocked on the FIFO, then the real file goes back
        ssh(LOST, "timeout 5 sh -c ': > /etc/os-release'; rm -f /etc/os-release; "
                  "mv /etc/os-release.tf-e2e /etc/os-release")
    assert f"{LOST}: unreachable during preflight (" in output, output[-4000:]
    assert "unsupported OS" not in output and "preflight failed" not in output, output[-4000:]
    assert "Traceback" not in output
    assert proc.returncode != 0
    assert elapsed < 120, f"the run took {elapsed:.0f}s after the partition"
    for other in set(HOSTS) - {LOST}:  # the others ran the deploy
        assert [line for line in output.splitlines() if f"[{other}]" in line and ("Success" in line or
                                                                                 "No changes" in line)], output[-4000:]
        assert not [line for line in output.splitlines() if f"[{other}]" in line and "rror" in line], output[-3000:]
