"""``docker inspect`` as tritonfleet reads it, on any shell that reaches a host's Docker engine: the pyinfra
fact (``roles/facts/docker.py``) and the SSH sessions of :mod:`tritonfleet.access` run the same format and
parse its lines here. Pure: no pyinfra, no SSH.

:data:`INSPECT_FORMAT` asks for the fields :func:`tritonfleet.hostcontract.container_summary` reads, and
nothing else: never the container's command line (Path, Args, Config.Cmd, Config.Entrypoint), which carries
Triton's arguments and with them the repository secret (a fact's output is printed by ``pyinfra -vvv``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from shlex import quote
from typing import Any

from tritonfleet import hostcontract as hc

INSPECT_FORMAT = ('{"Id":{{json .Id}},"Name":{{json .Name}},"Image":{{json .Image}},'
                  '"RestartCount":{{json .RestartCount}},'
                  '"State":{"Running":{{json .State.Running}},"Restarting":{{json .State.Restarting}},'
                  '"Status":{{json .State.Status}},"StartedAt":{{json .State.StartedAt}}},'
                  '"Config":{"Image":{{json .Config.Image}},"Labels":{{json .Config.Labels}},'
                  '"Env":{{json .Config.Env}}},'
                  '"HostConfig":{"Devices":{{json .HostConfig.Devices}}}}')

#: The line :func:`containers_command` prints once Docker has answered the container list.
LISTED = "@@listed"


def containers_command(label_filter: str = hc.TRITON_FILTER) -> str:
    """A POSIX shell command printing :data:`LISTED`, then one :data:`INSPECT_FORMAT` line per container
    (stopped ones included) that matches ``label_filter`` (``docker ps --filter``). When Docker does not answer
    it prints nothing on stdout and exits with docker's status (its error on stderr). A container removed
    between the list and the inspect is left out."""
    return (f"ids=$(docker ps -aq --filter {quote(label_filter)}) || exit; echo {LISTED}; "
            f"[ -z \"$ids\" ] || docker inspect --format {quote(INSPECT_FORMAT)} $ids 2>/dev/null; true")


def parse_containers(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{container name: hc.container_summary}`` of the :data:`INSPECT_FORMAT` lines among ``lines`` (the
    others are skipped)."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            c = json.loads(line)
            out[c["Name"].lstrip("/")] = hc.container_summary(c)
    return out
