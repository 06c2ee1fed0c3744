"""Preflight: validate every host's data into a typed :class:`~tritonfleet.config.HostConfig` once,
before any operation is queued. Roles read :func:`roles.context.config_for`, never ``host.data``.

Per host it reads two facts: the OS (``LinuxDistribution``, mapped to one supported
:class:`~tritonfleet.platforms.Platform`) and, only when ``instance_type`` is not in the data, the
instance type from IMDS; then the roles' ``host_checks`` (e.g. the host Python the S3 agent needs). Once the
data is good, every fact the last run of the same deploy read is read in one command per host, all hosts at
once (``roles/facts/cache.py``), so building the operations host after host costs no round trips. Every bad host is reported, one line each, and nothing runs on any host.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import click
from gevent import GreenletExit
from gevent.lock import Semaphore
from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from roles import all_roles, context
from roles.context import config_for
from roles.facts import cache as fact_cache
from roles.facts.system import ImdsInstanceType, LinuxDistribution
from tritonfleet.config import DEFAULT_IMDS, MISSING, ConfigError, FieldProblem, HostConfig, load_host_config
from tritonfleet.platforms import UnsupportedPlatform, from_distribution

__all__ = ["PreflightError", "config_for", "preflight", "validate_all"]


class PreflightError(PyinfraError):
    """Bad host data; raised before any host is changed."""


#: The inventory group of the load balancers (roles/lb.py): the only hosts that may have no accelerator.
LB_GROUP = "lb"


def _validate(h, roles) -> HostConfig:
    data = h.data.dict()
    endpoint = data.get("imds_endpoint") or DEFAULT_IMDS
    cfg = load_host_config(h.name, data, roles,
                           instance_type_lookup=lambda: h.get_fact(ImdsInstanceType, endpoint=endpoint))
    if not cfg.instance.has_accelerator and LB_GROUP not in h.groups:
        raise ConfigError(h.name, "instance_type", cfg.instance.name,
                          "has no accelerator (no Neuron device, no GPU), so no Triton server can run on it; "
                          f"general-purpose instance types are for the hosts of the {LB_GROUP} group")
    return cfg


def _platform(h, cfg: HostConfig) -> HostConfig:
    try:
        return replace(cfg, platform=from_distribution(h.get_fact(LinuxDistribution)))
    except UnsupportedPlatform as exc:
        raise ConfigError(h.name, "platform", MISSING, str(exc)) from None


def _host_checks(h, cfg: HostConfig, roles) -> HostConfig:
    for role in roles:
        if role.host_checks is not None:
            try:
                role.host_checks(h, cfg)
            except FieldProblem as exc:
                raise ConfigError(h.name, exc.field, exc.value, exc.message) from None
    return cfg


class _Causes(logging.Handler):
    """What pyinfra logged about each host while preflight read its facts (the cause of a lost host)."""

    def __init__(self, hosts) -> None:
        super().__init__(logging.WARNING)
        self.prefixes = {h.name: h.print_prefix for h in hosts}
        self.said: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = click.unstyle(record.getMessage())
        for name, prefix in self.prefixes.items():
            plain = click.unstyle(prefix)
            if text.startswith(plain) and name not in self.said:
                self.said[name] = " ".join(text[len(plain):].split())


def _each(state, hosts, check, lost: dict[str, str]) -> tuple[dict, list[str]]:
    """``check`` each host; a host pyinfra failed meanwhile (its fact read failed on the connection: it is
    unreachable) goes to ``lost`` instead of ``errors``: it is left out, the way pyinfra leaves out a host it
    cannot connect to, and the others go on. Bad data still stops every host."""
    done, errors = {}, []
    for h in hosts:
        if h.name in lost:
            continue
        try:
            value = check(h)
        except ConfigError as exc:
            if h in state.failed_hosts:
                lost[h.name] = ""
            else:
                errors.append(str(exc))
            continue
        if h in state.failed_hosts:
            lost[h.name] = ""
        else:
            done[h.name] = value
    return done, errors


def validate_all(state=None) -> dict[str, HostConfig]:
    """Validate every host of the inventory (once per run); raise with one line per bad host.

    The data is checked first, with no remote command (except IMDS for a missing instance type); only
    when every host's data is good are the roles' ``on_connect`` hooks called (the connection role sets
    keepalives there) and the hosts asked which OS they run."""
    state = state or host.state
    # pyinfra builds every host's operations in a greenlet of its own, so the first hosts all arrive here
    # before any has finished: one validates (and reads the facts) for all, the others wait for its result
    lock = state.__dict__.setdefault("_tritonfleet_preflight_lock", Semaphore())
    with lock:
        return _validate_all(state)


def _validate_all(state) -> dict[str, HostConfig]:
    cached = context.stored(state)
    if cached is not None:
        return cached
    fact_cache.install(state)
    roles = all_roles()
    hosts = sorted(list(state.inventory.iter_activated_hosts()) or list(state.inventory), key=lambda x: x.name)
    lost: dict[str, str] = {h.name: "" for h in hosts if h in state.failed_hosts}
    causes = _Causes(hosts)
    logger.addHandler(causes)
    try:
        configs, errors = _each(state, hosts, lambda h: _validate(h, roles), lost)
        if not errors:
            for h in hosts:
                if h.name in configs:
                    for role in roles:
                        if role.on_connect is not None:
                            role.on_connect(h, configs[h.name])
            # what the last run of this deploy read: one command per host, at once
            fact_cache.prefetch(state, [h for h in hosts if h.name in configs])
            configs, errors = _each(state, hosts, lambda h: _platform(h, configs[h.name]), lost)
        if not errors:
            configs, errors = _each(state, hosts, lambda h: _host_checks(h, configs[h.name], roles), lost)
    finally:
        logger.removeHandler(causes)
    if errors:
        raise PreflightError("preflight failed, nothing was changed:\n  " + "\n  ".join(errors))
    for name in sorted(lost):
        cause = causes.said.get(name) or "the connection failed"
        logger.error(f"{name}: unreachable during preflight ({cause}); left out of this run, the other hosts go on")
    state.__dict__["_tritonfleet_lost_hosts"] = set(lost)
    context.store(state, configs)
    return configs


@deploy("Preflight")
def preflight(needs_accelerator: bool = True, installs_driver: bool = False) -> None:
    """Validate all hosts' data (OS, instance type, placement, versions, keys) before anything changes.

    ``needs_accelerator``: the deploy's roles serve Triton (every deploy but deploys/lb.py); a load balancer
    without an accelerator (a general-purpose host of the lb group) is left out of such a deploy, said once.
    ``installs_driver``: the deploy runs the neuron role, which installs the pinned aws-neuronx-dkms (deploys/neuron.py,
    deploys/serve.py): the Neuron kernel gate (roles/neuron.py) judges that driver where it is not the installed
    one, else the installed one."""
    context.set_installs_driver(host.state, installs_driver)
    configs = validate_all()
    if host.name not in configs and host.name in host.state.__dict__.get("_tritonfleet_lost_hosts", ()):
        # lost during preflight (said once, above): its deploy file ends here; pyinfra runs nothing on a
        # failed host, and a GreenletExit is how a host's loading greenlet ends without failing the others
        raise GreenletExit
    cfg = configs[host.name]
    if needs_accelerator and not cfg.instance.has_accelerator:
        logger.info(f"{host.name}: {cfg.instance.name} has no accelerator: a load balancer, left out of this deploy "
                    "(deploys/lb.py configures it)")
        raise GreenletExit
    host.noop(f"{cfg.platform.name if cfg.platform else '?'}, {cfg.instance.name}: "
              f"{len(cfg.triton.placements)} Triton server(s) placed")
