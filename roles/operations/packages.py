"""Packages at version patterns, installed or removed through one script per package manager."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping

from pyinfra import host
from pyinfra.api import OperationError, operation

from roles.facts.packages import InstalledPackages
from roles.operations.common import script

logger = logging.getLogger(__name__)

#: Seconds to wait for another apt/dpkg process to release its lock.
LOCK_TIMEOUT = 300


def matches(installed: list[str], pattern: str | None) -> bool:
    """Whether any installed version satisfies ``pattern`` (None: any version)."""
    if not installed:
        return False
    if pattern is None:
        return True
    return any(fnmatch.fnmatch(v, pattern) or v == pattern for v in installed)


def spec(family: str, name: str, pattern: str | None) -> str:
    if pattern is None:
        return name
    return f"{name}={pattern}" if family == "apt" else f"{name}-{pattern}"


@operation()
def install(pins: Mapping[str, str | None], family: str, present: bool = True,
            lock_timeout: int = LOCK_TIMEOUT):
    """
    Install packages (at version patterns such as ``2.30.2.0*``, downgrading if needed) or remove them.

    + pins: package name -> version pattern, or None for any version
    + family: ``apt`` or ``dnf``
    + present: install (True) or remove (False)
    + lock_timeout: seconds to wait for the dpkg lock

    **Examples:**

    .. code:: python

        # Pinned versions (downgraded if a newer one is installed), and any version of curl
        packages.install(
            name="Neuron driver and tools (pinned)",
            pins={"aws-neuronx-dkms": "2.30.2.0*", "aws-neuronx-tools": "2.32.28.0*", "curl": None},
            family="apt",
        )

        # Remove packages where installed
        packages.install(
            name="Remove legacy Neuron packages",
            pins={"aws-neuron-runtime": None, "aws-neuron-dkms": None, "aws-neuron-tools": None},
            family="apt",
            present=False,
        )
    """
    if family not in ("apt", "dnf"):
        raise OperationError(f"no package manager support for {family!r}")
    installed = host.get_fact(InstalledPackages)
    if present:
        todo = [spec(family, n, p) for n, p in pins.items() if not matches(installed.get(n, []), p)]
    else:
        todo = [n for n in pins if installed.get(n)]
    if not todo:
        host.noop(("installed: " if present else "absent: ") + ", ".join(
            f"{n} {p}" if p else n for n, p in pins.items()))
        return
    logger.debug("%s: %s %s", host.name, "install" if present else "remove", " ".join(todo))
    yield script("packages.sh", family, "install" if present else "remove", lock_timeout, *todo)
