"""The validated configuration of the host a deploy is running for (written by preflight)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api.exceptions import PyinfraError

from tritonfleet.config import HostConfig

_ATTR = "_tritonfleet_configs"
_INSTALLS_DRIVER = "_tritonfleet_installs_driver"


def store(state, configs: dict[str, HostConfig]) -> None:
    setattr(state, _ATTR, configs)


def stored(state) -> dict[str, HostConfig] | None:
    return getattr(state, _ATTR, None)


def config_for(h=None) -> HostConfig:
    """The validated config of ``h`` (default: the current host). Deploys call ``preflight()`` first."""
    h = h or host
    configs = stored(h.state)
    if configs is None or h.name not in configs:
        raise PyinfraError("no validated config for this host: call roles.preflight.preflight() first in the deploy")
    return configs[h.name]


def set_installs_driver(state, installs: bool) -> None:
    """Whether the deploy of this run installs the neuron role's pinned driver (``preflight(installs_driver=...)``):
    preflight's kernel gate judges that driver then, else the one the host has."""
    setattr(state, _INSTALLS_DRIVER, installs)


def installs_driver(state) -> bool:
    """:func:`set_installs_driver`'s value (False when preflight was not told)."""
    return bool(getattr(state, _INSTALLS_DRIVER, False))
