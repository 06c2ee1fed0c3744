"""The model repository on the host: a controller copy switched in one atomic rename per file, or the S3
sync of the host agent (installed from the controller's wheelhouse)."""

from __future__ import annotations

import logging
import shlex

from pyinfra import host
from pyinfra import logger as pyinfra_logger
from pyinfra.api import StringCommand, operation

from roles.facts.models import AgentState, ModelSyncPlan
from roles.facts.system import CommandSucceeds
from roles.operations.common import script
from roles.operations.docker import explained
from tritonfleet.pipreport import import_hints

# Decisions, for debugging (pyinfra's CLI shows them with --debug-all); what the user must see goes to
# pyinfra's own logger, which its CLI prints with the host's name.
logger = logging.getLogger(__name__)


@operation()
def switch_staged(staging: str, live: str, previous: str, only_if_empty: bool = False):
    """
    Make ``live`` equal to ``staging`` (``templates/scripts/models-switch.sh``): changed files are
    replaced by rename, files and directories ``staging`` lacks are removed, so Triton never reads a
    half-written file and a removed model leaves no empty directories. ``previous`` keeps the repository
    as it was, for the model gate to restore a model that fails to load.

    + staging: the complete copy (written by files.sync_tree)
    + live: the repository Triton reads
    + previous: where the repository as it was is kept (hard links)
    + only_if_empty: switch only when ``live`` holds nothing yet (first fill of a new host)

    **Examples:**

    .. code:: python

        # A new host: fill the empty repository now
        models.switch_staged(
            name="Model repository (first fill)",
            staging="/var/lib/tritonfleet/models-staging",
            live="/opt/tritonfleet/models",
            previous="/var/lib/tritonfleet/models-previous",
            only_if_empty=True,
        )

        # A serving host: switch once the servers passed their health gate
        models.switch_staged(
            name="Model repository (switched in)",
            staging="/var/lib/tritonfleet/models-staging",
            live="/opt/tritonfleet/models",
            previous="/var/lib/tritonfleet/models-previous",
        )
    """
    q = shlex.quote
    probe = f"diff -rq {q(staging)} {q(live)}"
    if only_if_empty:
        probe = f"[ -n \"$(ls -A {q(live)} 2>/dev/null)\" ] || {probe}"
    if host.get_fact(CommandSucceeds, command=probe):
        host.noop(f"{live} matches {staging}" if not only_if_empty else f"{live} is filled")
        return
    yield script("models-switch.sh", staging, live, previous, int(only_if_empty))


@operation()
def agent_install(python: str, venv: str, wheelhouse: str, digest: str, requirement: str):
    """
    Install the host agent into ``venv`` from the wheelhouse uploaded to ``wheelhouse``, offline
    (``templates/scripts/agent-install.sh``), unless ``venv`` was installed from this very wheelhouse.

    + python: the host interpreter the venv is made with
    + venv: e.g. /opt/tritonfleet/venv
    + wheelhouse: directory of the uploaded wheels
    + digest: the wheelhouse's content hash (stamped into the venv)
    + requirement: what to install, e.g. ``tritonfleet-agent[qa]==0.1.0+abc``

    **Example:**

    .. code:: python

        models.agent_install(
            name="Host agent (tritonfleet-agent[qa]==0.1.0+3f9c2a1b)",
            python="python3",
            venv="/opt/tritonfleet/venv",
            wheelhouse="/opt/tritonfleet/wheelhouse",
            digest="9b74c9897bac770ffc029102a200c5de",
            requirement="tritonfleet-agent[qa]==0.1.0+3f9c2a1b",
        )
    """
    state = host.get_fact(AgentState, python=python, venv=venv)
    if state["installed"] == digest:
        host.noop(f"{requirement} installed in {venv}")
        return
    yield script("agent-install.sh", python, venv, wheelhouse, digest, requirement)


@operation()
def sync(command: list[str]):
    """
    Sync the model repository from S3 with the host agent (download, verify, switch ``current``, reload
    the servers it names), when its dry run says there is something to do: a change in S3 or a reload a
    killed run owes, or a file of the current version that is missing, resized or changed on disk (the
    ``verify`` command hashes every file). A no-op run asks S3 for a listing only (no GET). The agent's
    model check (``--compat``): a model the image cannot load fails the sync, one line per model; its
    warnings (a model whose versions are unknown) are shown even when the sync succeeds.

    + command: the agent's ``sync`` command line, without --dry-run/--json

    **Example:**

    .. code:: python

        models.sync(
            name="Model repository from s3://models-bucket/prod",
            command=[
                "/opt/tritonfleet/venv/bin/tritonfleet-agent", "sync",
                "--source", "s3://models-bucket/prod", "--dest", "/opt/tritonfleet/models",
                "--server", "triton-0=grpc://127.0.0.1:8001",
                "--header-file", "/etc/tritonfleet/repository-header",
            ],
        )
    """
    line = " ".join(shlex.quote(c) for c in command)
    plan = host.get_fact(ModelSyncPlan, command=line)
    files = plan.get("files") or {}
    damaged = plan.get("damaged") or {}
    if damaged:
        shown = ", ".join(f"{p} ({why})" for p, why in sorted(damaged.items())[:5])
        pyinfra_logger.warning(f"{host.name}: model repository {plan.get('version')}: {len(damaged)} damaged "
                               f"file{'s' if len(damaged) > 1 else ''}, repaired from S3 by this run: {shown}"
                               + (", ..." if len(damaged) > 5 else ""))
    if plan.get("status") == "dry-run" and plan.get("version") and not any(files.values()) \
            and not plan.get("damaged") and not (plan.get("reload") or {}).get("pending"):
        host.noop(f"model repository is {plan['version']} ({plan.get('unchanged', 0)} files), as in S3")
        return
    logger.debug("%s: the agent's dry run says sync (status %s, current version %s, files %s, %d damaged, "
                 "reload %s)", host.name, plan.get("status"), plan.get("version"),
                 {k: len(v) for k, v in files.items() if isinstance(v, list)}, len(damaged), plan.get("reload"))
    # a python model that fails to load on a missing module: one line naming it and triton_python_requirements
    yield explained(StringCommand(line), import_hints, model_check_warnings)


#: how the agent's model check starts a warning line (the model's name follows)
MODEL_WARNING = "tritonfleet-agent: warning: model "


def model_check_warnings(output: str) -> list[str]:
    """The agent's model-check warnings in a sync's output (``tritonfleet-agent: warning: model <name>: ...``)."""
    return [line.strip() for line in output.splitlines() if line.strip().startswith(MODEL_WARNING)]


@operation()
def switch_version(dest: str, version: str, command: list[str]):
    """
    Switch the model repository back to a kept version with the host agent (``tritonfleet-agent switch``),
    which reloads the running servers; nothing to do when ``current`` is that version and no reload is owed.

    + dest: the repository root (models_dir)
    + version: the version id to serve
    + command: the agent's ``switch`` command line

    **Example:**

    .. code:: python

        models.switch_version(
            name="Model repository back to 000003-20261126T080000Z",
            dest="/opt/tritonfleet/models",
            version="000003-20261126T080000Z",
            command=[
                "/opt/tritonfleet/venv/bin/tritonfleet-agent", "switch",
                "--dest", "/opt/tritonfleet/models", "--to", "000003-20261126T080000Z",
                "--timeout", "180", "--server", "triton-0=grpc://127.0.0.1:8001",
            ],
        )
    """
    q = shlex.quote
    probe = (f"[ \"$(readlink {q(dest + '/current')})\" = {q('versions/' + version)} ] "
             f"&& [ ! -e {q(dest + '/.reload-pending.json')} ]")
    if host.get_fact(CommandSucceeds, command=probe):
        host.noop(f"{dest} serves {version}")
        return
    yield " ".join(q(c) for c in command)
