"""QA on the host: a run of the suites (an action: it always runs), and removing what the schedule left."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from roles.facts.files import FileDigests
from roles.operations.common import script


@operation(is_idempotent=False)
def run(command: list[str], timeout: int):
    """
    Run the QA suites now (``templates/scripts/qa-run.sh``): failing cases leave the operation successful
    (the report says what failed); suites that cannot run, or a run over ``timeout``, fail it.

    + command: the runner's command line
    + timeout: seconds

    **Example:**

    .. code:: python

        qa.run(
            name="QA suites on 2 server(s)",
            command=[
                "/opt/tritonfleet/venv/bin/tritonfleet-agent", "qa", "run",
                "--suites", "/opt/tritonfleet/qa/suites", "--out", "/var/lib/tritonfleet/qa/reports",
            ],
            timeout=900,
        )
    """
    yield script("qa-run.sh", int(timeout), *command)


@operation()
def remove_paths(paths: list[str]):
    """
    Regular files that must not exist (removed when present; nothing to do when none is).

    + paths: remote paths

    **Example:**

    .. code:: python

        qa.remove_paths(
            name="QA units, script and metrics removed",
            paths=[
                "/etc/systemd/system/tritonfleet-qa.service",
                "/etc/systemd/system/tritonfleet-qa.timer",
                "/opt/tritonfleet/qa/qa-scheduled.sh",
            ],
        )
    """
    digests = host.get_fact(FileDigests, paths=tuple(paths))
    present = sorted(digests)
    if not present:
        host.noop("none present")
        return
    yield "rm -f " + " ".join(shlex.quote(p) for p in present)
    if any(p.startswith("/etc/systemd/") for p in present):
        yield "systemctl daemon-reload"


@operation(is_idempotent=False)
def daemon_reload():
    """
    ``systemctl daemon-reload`` (use with ``_if=`` after unit files changed).

    **Example:**

    .. code:: python

        qa.daemon_reload(
            name="systemd reads the changed QA units",
            _if=units.did_change,  # units: the files.managed that wrote them
        )
    """
    yield "systemctl daemon-reload"
