"""The live model repository, switched from a complete staged copy one atomic rename per file."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from roles.facts.system import CommandSucceeds
from roles.operations.common import script


@operation()
def models_switch(staging: str, live: str, previous: str, only_if_empty: bool = False):
    """
    Make ``live`` equal to ``staging`` (``templates/scripts/models-switch.sh``): changed files are
    replaced by rename, files and directories ``staging`` lacks are removed, so Triton never reads a
    half-written file and a removed model leaves no empty directories. ``previous`` keeps the repository
    as it was, for the model gate to restore a model that fails to load.

    + staging: the complete copy (written by files.sync)
    + live: the repository Triton reads
    + previous: where the repository as it was is kept (hard links)
    + only_if_empty: switch only when ``live`` holds nothing yet (first fill of a new host)
    """
    q = shlex.quote
    probe = f"diff -rq {q(staging)} {q(live)}"
    if only_if_empty:
        probe = f"[ -n \"$(ls -A {q(live)} 2>/dev/null)\" ] || {probe}"
    if host.get_fact(CommandSucceeds, command=probe):
        host.noop(f"{live} matches {staging}" if not only_if_empty else f"{live} is filled")
        return
    yield script("models-switch.sh", staging, live, previous, int(only_if_empty))
