"""The live model repository, switched from a complete staged copy one atomic rename per file."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from roles.facts.system import CommandSucceeds
from roles.operations.common import script


@operation()
def models_switch(staging: str, live: str):
    """
    Make ``live`` equal to ``staging`` (``templates/scripts/models-switch.sh``): changed files are
    replaced by rename, files and directories ``staging`` lacks are removed, so Triton never reads a
    half-written file and a removed model leaves no empty directories.

    + staging: the complete copy (written by files.sync)
    + live: the repository Triton reads
    """
    if host.get_fact(CommandSucceeds, command=f"diff -rq {shlex.quote(staging)} {shlex.quote(live)}"):
        host.noop(f"{live} matches {staging}")
        return
    yield script("models-switch.sh", staging, live)
