"""systemd units in the states the roles need, read with one fact for the units involved."""

from __future__ import annotations

import logging
import shlex

from pyinfra import host
from pyinfra.api import operation

from roles.facts.files import ServiceStates

logger = logging.getLogger(__name__)


@operation()
def units(units: list[str], running: bool | None = None, enabled: bool | None = None, restarted: bool = False):
    """
    systemd units running (or stopped), enabled (or not), or restarted. Units systemd does not know are
    left alone when they should be stopped (the legacy neuron-rtd on a host that never had it).

    + units: unit names, e.g. docker.service
    + running: True: started; False: stopped; None: as they are
    + enabled: True/False/None, likewise for starting at boot
    + restarted: restart them (use with ``_if=``)

    **Examples:**

    .. code:: python

        services.units(
            name="Docker running and enabled",
            units=["docker.service"],
            running=True,
            enabled=True,
        )

        services.units(
            name="QA timer stopped and disabled",
            units=["tritonfleet-qa.timer", "tritonfleet-qa.service"],
            running=False,
            enabled=False,
        )

        services.units(
            name="Restart Docker for the new daemon.json",
            units=["docker.service"],
            restarted=True,
            _if=daemon_json.did_change,  # daemon_json: the files.managed that wrote it
        )
    """
    states = host.get_fact(ServiceStates, units=tuple(units))
    q = shlex.quote
    todo = []
    for unit in units:
        state = states.get(unit)
        if state is None:
            if running or enabled or restarted:
                todo.append(f"systemctl start {q(unit)}")  # fails with systemd's own message
            else:
                logger.debug("%s: %s is not known to systemd; left alone", host.name, unit)
            continue
        if restarted:
            todo.append(f"systemctl restart {q(unit)}")
        elif running is True and state["active"] != "active":
            todo.append(f"systemctl start {q(unit)}")
        elif running is False and state["active"] in ("active", "activating", "reloading"):
            todo.append(f"systemctl stop {q(unit)}")
        if enabled is True and state["enabled"] not in ("enabled", "static", "alias", "indirect", "generated"):
            todo.append(f"systemctl enable {q(unit)}")
        elif enabled is False and state["enabled"] == "enabled":
            todo.append(f"systemctl disable {q(unit)}")
    if not todo:
        host.noop(", ".join(f"{u} {states.get(u, {}).get('active', 'absent')}" for u in units))
        return
    yield from todo
