"""A rerun right after a killed first run (issue 20, part 7), as found: `deploys/serve.py` SIGKILLed while it
installs a bare host, then run again at once while the killed run's remote commands may still be running.
The rerun must succeed: its scripts wait for the killed run's (one host-wide lock, naming the holder), and
the agent install never uses, nor is blocked by, a half-written venv. Asserted from outside: the rerun's
exit code, the container over SSH, Triton answering.

`make test` runs this once, as the first run of tests/e2e/test_07_models.py's host (the kill during the
agent's install, where it was found; `killed_first_run` is in tests/e2e/helpers.py). More rounds, at several
points: `TF_RERUN_ROUNDS=8 .venv/bin/python -m pytest tests/e2e/test_11_rerun.py` (each round a fresh host;
the kill points cycle through KILL_POINTS)."""

from __future__ import annotations

import os

import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import host_ip, killed_first_run, pyinfra, ssh, write_inventory
from tritonfleet.sandbox import fleet

HOST = "scratch"
# (what the first run's output shows, seconds after it) -> the kill
KILL_POINTS = [("Host agent", 1.0), ("Docker", 2.0), ("Models | Model repository from", 0.5), ("Triton", 3.0)]
ROUNDS = int(os.environ.get("TF_RERUN_ROUNDS", "0"))


@pytest.mark.allow_skip("on demand (TF_RERUN_ROUNDS=N): make test runs one round in test_07_models.py's fixture")
@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_rerun_right_after_a_killed_first_run_succeeds(sandbox, tmp_path, round_):
    marker, delay = KILL_POINTS[round_ % len(KILL_POINTS)]
    fleet.reset_host(HOST)
    inv = write_inventory(tmp_path, [HOST])
    first = killed_first_run(inv, marker, delay)
    assert "Starting operation:" in first and marker in first, first[-3000:]
    rerun = pyinfra(inv, "deploys/serve.py")  # at once
    assert rerun.returncode == 0, f"killed at {marker!r}+{delay}s; the rerun:\n{rerun.output[-4000:]}"
    assert "Directory not empty" not in rerun.output and "executed 0 commands" not in rerun.output
    assert ssh(HOST, "docker inspect -f '{{.State.Running}}' triton").stdout.strip() == "true"
    assert ssh(HOST, "readlink /opt/tritonfleet/venv").stdout.strip().startswith("venvs/")
    assert httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000").is_server_ready()
