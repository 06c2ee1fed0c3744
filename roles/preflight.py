"""Preflight: validate every host's data into a typed :class:`~tritonfleet.config.HostConfig` once,
before any operation is queued. Roles read :func:`config_for`, never ``host.data`` directly."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from roles.facts import ImdsInstanceType
from tritonfleet.config import ConfigError, HostConfig, load_host_config


class PreflightError(PyinfraError):
    """Bad host data; raised before any host is changed."""


def role_defaults() -> dict:
    """Every role's ``DEFAULTS`` merged (host and group data override them)."""
    from roles import base, docker, models, neuron, nvidia, triton

    merged: dict = {}
    for role in (base, docker, neuron, nvidia, triton, models):
        merged.update(role.DEFAULTS)
    return merged


def _validate(h) -> HostConfig:
    data = h.data.dict()
    endpoint = data.get("imds_endpoint") or "http://169.254.169.254"
    return load_host_config(
        h.name, data, role_defaults(),
        instance_type_lookup=lambda: h.get_fact(ImdsInstanceType, endpoint=endpoint),
    )


def validate_all() -> dict[str, HostConfig]:
    """Validate every host of the inventory (once per run); raise with one line per bad host."""
    state = host.state
    cached = getattr(state, "_tritonfleet_configs", None)
    if cached is not None:
        return cached
    errors = []
    configs = {}
    hosts = list(state.inventory.iter_activated_hosts()) or list(state.inventory)
    for h in sorted(hosts, key=lambda x: x.name):
        try:
            configs[h.name] = _validate(h)
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise PreflightError("preflight failed, nothing was changed:\n  " + "\n  ".join(errors))
    state._tritonfleet_configs = configs
    return configs


def config_for(h=None) -> HostConfig:
    """The validated config of ``h`` (default: the current host)."""
    h = h or host
    return validate_all()[h.name]


@deploy("Preflight")
def preflight() -> None:
    """Validate all hosts' data (instance type, placement, versions, keys) before anything changes."""
    cfg = config_for()
    host.noop(f"{cfg.instance.name}: {len(cfg.placements)} Triton server(s) placed")
