"""Directories tritonfleet writes on hosts: present and writable, or a one-line reason."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from roles.facts.system import CommandSucceeds


@operation()
def writable_dirs(paths: list[str]):
    """
    Make sure each directory exists and takes a new file; otherwise fail naming the path (read-only file
    system, full disk, wrong permissions) instead of failing later with an upload traceback.

    + paths: absolute directory paths
    """
    q = shlex.quote
    probe = " && ".join(f"[ -d {q(p)} ] && [ -w {q(p)} ] && [ \"$(df -P -k {q(p)} | awk 'NR==2 {{print $4}}')\" -gt 1024 ]"
                        for p in paths)
    if host.get_fact(CommandSucceeds, command=probe):
        host.noop(f"writable: {', '.join(paths)}")
        return
    checks = "; ".join(
        f"mkdir -p {q(p)} 2>/dev/null && t=$(mktemp -p {q(p)} .tf-write.XXXXXX 2>/dev/null) && rm -f \"$t\" && "
        f"[ \"$(df -P -k {q(p)} | awk 'NR==2 {{print $4}}')\" -gt 1024 ] || "
        f"{{ echo \"ERROR: {p} is not writable or is full on this host ($(df -P -h {q(p)} 2>/dev/null | awk 'NR==2 "
        f"{{print $4 \" free\"}}'); $(touch {q(p)}/.tf-write 2>&1 | sed 's/^touch: //')); nothing was changed there\" >&2; "
        "exit 1; }"
        for p in paths)
    yield StringCommand(checks)
