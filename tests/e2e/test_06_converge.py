"""What a run that changes nothing costs, counted on the connection (pyinfra's --debug log of every
command it sends), and that no secret reaches that log."""

from __future__ import annotations

import re

from tests.e2e.helpers import pyinfra, write_inventory
from tritonfleet.sandbox import fleet

#: Remote commands per host for a no-op deploys/serve.py run (the converge-cost budget): without a fact plan
#: (the first run of a deploy on this controller), and with the plan the previous run recorded (every fact in
#: one command per host, roles/facts/cache.py).
NOOP_BUDGET = 23  # 20, + the scheduled verify timer's unit files (models role, issue 20 part 2), + the
#                    watchdog's files (roles/watchdog.py, off: removed if present; issue 25), + the models'
#                    compatibility limits (/etc/tritonfleet/model-compat.json, models role; issue 26)
PLANNED_BUDGET = 2
HOST = "inf2"


def _sent(output: str, host: str) -> tuple[int, int]:
    commands = len(re.findall(rf"Running command on {re.escape(host)}:", output))
    uploads = len(re.findall(r"Attempting upload of ", output))
    return commands, uploads


def test_noop_serve_run_stays_within_the_command_budget(sandbox, tmp_path):
    inv = write_inventory(tmp_path, [HOST])
    first = pyinfra(inv, "deploys/serve.py")
    assert first.returncode == 0, first.output[-4000:]
    again = pyinfra(inv, "--debug", "deploys/serve.py")
    assert again.returncode == 0 and again.totals["changed"] == 0 and again.totals["operations"] > 0, \
        again.output[-4000:]
    commands, uploads = _sent(again.output, HOST)
    print(f"no-op serve run on {HOST}: {commands} remote commands, {uploads} uploads")
    assert uploads == 0
    assert 0 < commands <= PLANNED_BUDGET, f"{commands} remote commands on a no-op run (budget {PLANNED_BUDGET})"
    # without a plan (a controller that never ran this deploy): every fact on its own, still within budget
    unplanned = pyinfra(inv, "--debug", "-vvv", "deploys/serve.py", env={"TRITONFLEET_FACT_PLANS": "off"})
    assert unplanned.returncode == 0 and unplanned.totals["changed"] == 0, unplanned.output[-4000:]
    commands, uploads = _sent(unplanned.output, HOST)
    print(f"no-op serve run on {HOST} without a fact plan: {commands} remote commands, {uploads} uploads")
    assert uploads == 0
    assert PLANNED_BUDGET < commands <= NOOP_BUDGET, f"{commands} remote commands without a plan (budget {NOOP_BUDGET})"
    secret = fleet.load_state()["repository_secret"]
    assert secret not in again.output and secret not in unplanned.output


def test_a_changing_run_masks_the_secret_in_debug_output(sandbox, tmp_path):
    """Issue 20 part 4, as found: `-vvv --debug` prints every command, every fact's output and every
    script's output; the repository secret appears in none of it: a changing serve run, and a no-op run of
    the models deploy (S3 sync with its header file)."""
    secret = fleet.load_state()["repository_secret"]
    inv = write_inventory(tmp_path, [HOST], extra={"triton_shm_size": "768m"})  # with the sandbox's S3 sync
    run = pyinfra(inv, "--debug", "-vvv", "deploys/serve.py")
    assert run.returncode == 0, run.output[-4000:]
    assert "triton-swap.sh" in run.output and "*MASKED*" in run.output
    assert "@@containers" in run.output  # the facts' output is in the log
    assert secret not in run.output
    # a no-op run of models.py, whose sync reloads the servers with the header file (serve.py's no-op run
    # without plans is in the budget test above, with -vvv --debug)
    again = pyinfra(inv, "--debug", "-vvv", "deploys/models.py")
    assert again.returncode == 0, again.output[-4000:]
    assert secret not in again.output, "models.py: the secret in the -vvv --debug output"
