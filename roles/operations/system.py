"""Host-wide kernel settings tritonfleet relies on."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from roles.facts.system import CommandSucceeds

_PROC_HIDDEN = r"grep -qE '^proc /proc proc [^ ]*hidepid=(2|invisible)' /proc/mounts"
_FSTAB_HIDDEN = r"grep -qE '^proc[[:space:]]+/proc[[:space:]]+proc[[:space:]]+[^[:space:]]*hidepid=' /etc/fstab"


@operation()
def hide_other_users_processes():
    """
    Mount /proc with ``hidepid=invisible`` now and at boot (/etc/fstab), so a local user sees only their
    own processes: Triton's command line (which carries the repository secret) is then visible to root
    only.

    **Example:**

    .. code:: python

        system.hide_other_users_processes(
            name="Other users' processes hidden (/proc hidepid)",
        )
    """
    if host.get_fact(CommandSucceeds, command=f"{_PROC_HIDDEN} && {_FSTAB_HIDDEN}"):
        host.noop("/proc is mounted with hidepid")
        return
    yield StringCommand(
        f"{_FSTAB_HIDDEN} || {{ sed -i '/^proc[[:space:]]\\+\\/proc[[:space:]]/d' /etc/fstab; "
        "echo 'proc /proc proc defaults,hidepid=invisible 0 0' >> /etc/fstab; }")
    yield StringCommand(f"{_PROC_HIDDEN} || mount -o remount,hidepid=invisible /proc")
