"""HAProxy in front of the fleet's Triton servers, on the hosts of the inventory's ``lb`` group (README "Load
balancing and canaries"):

- HAProxy from the platform's package, in master-worker mode under systemd (the package's unit);
- ``/etc/haproxy/haproxy.cfg`` rendered from the inventory (``templates/lb/haproxy.cfg.j2``): an HTTP frontend
  and a gRPC (h2) frontend, backends ``triton_http`` and ``triton_grpc`` with one server per Triton server of the
  inventory (each server's own ports, named ``<host>-<server>``), health checks on ``/v2/health/ready``, the
  Runtime API on a root-only socket and HAProxy's Prometheus exporter;
- a changed configuration is checked with ``haproxy -c`` before it replaces the old one, then HAProxy reloads
  (new workers take new connections, old ones finish theirs: no connection is dropped).

The Triton servers come from every inventory host's validated data (the triton role's placement), also for hosts
a ``--limit`` leaves out of the run. ``rollout_lb: haproxy`` (roles/rollout.py) makes the rollout drain servers
through the Runtime API socket.
"""

from __future__ import annotations

import hashlib
import ipaddress
import posixpath
import re
from dataclasses import dataclass

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import NoGroupError

from roles import all_roles, platform
from roles import operations as ops
from roles.context import config_for, stored
from roles.preflight import LB_GROUP, PreflightError
from tritonfleet.config import (
    ConfigError,
    FieldProblem,
    HostConfig,
    Role,
    RoleSettings,
    Version,
    load_host_config,
    matching,
)
from tritonfleet.fleet.haproxy import CHECK_INTERVAL_MS
from tritonfleet.placement import IPAddress
from tritonfleet.templating import render

#: The inventory group whose hosts run HAProxy.
GROUP = LB_GROUP
CONFIG = "/etc/haproxy/haproxy.cfg"
UNIT = "haproxy.service"
DROPIN = f"/etc/systemd/system/{UNIT}.d/tritonfleet.conf"
#: HAProxy's Runtime API: root only (mode 600), level admin; the rollout drives servers through it.
SOCKET = "/run/haproxy/admin.sock"
METRICS_PATH = "/metrics"
HEALTH_PATH = "/v2/health/ready"
#: Backend names (the rollout's contract): one server per Triton server in each.
BACKEND_HTTP = "triton_http"
BACKEND_GRPC = "triton_grpc"
_ADDRESS = r"[A-Za-z0-9_.:-]{1,253}"
_SERVER_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


class Settings(RoleSettings):
    frontend_http_port: int = Field(8000, ge=1, le=65535, description=(
        "Port of the HTTP frontend (clients use the load balancer like one Triton server: 8000)."))
    frontend_grpc_port: int = Field(8001, ge=1, le=65535, description="Port of the gRPC (HTTP/2) frontend.")
    bind_address: IPAddress = Field("0.0.0.0", description=(
        "Address the frontends and the Prometheus endpoint listen on (0.0.0.0: every interface)."))
    prometheus_port: int = Field(8405, ge=1, le=65535, description=(
        "Port of HAProxy's built-in Prometheus exporter (path /metrics, on lb_bind_address)."))
    check_interval_ms: int = Field(CHECK_INTERVAL_MS, ge=100, le=60000, description=(
        "Health check interval per server (GET /v2/health/ready on its HTTP port, 200 expected)."))
    fall: int = Field(3, ge=1, le=100, description="Failed checks in a row that take a server out.")
    rise: int = Field(2, ge=1, le=100, description="Passed checks in a row that put a server back.")
    connect_timeout_ms: int = Field(5000, ge=100, le=60000, description="timeout connect (and timeout check).")
    client_timeout_s: int = Field(300, ge=1, le=86400, description="timeout client: a client's inactivity.")
    server_timeout_s: int = Field(300, ge=1, le=86400, description=(
        "timeout server: a server's inactivity (an inference may take long)."))
    hard_stop_after_s: int = Field(600, ge=1, le=86400, description=(
        "hard-stop-after: how long the old workers of a reload may finish their connections."))
    maxconn: int = Field(4096, ge=1, le=1000000, description=(
        "Global maxconn: connections at once (HAProxy needs 2 file descriptors each; raise the unit's "
        "LimitNOFILE with it)."))
    haproxy_version: Version | None = Field(None, description=(
        "HAProxy package version or pattern (e.g. 2.6.*); None: the platform's current package."))
    backend_address: str | None = Field(None, description=(
        "Triton hosts: the address the load balancers reach this host's servers at; None: a server's own "
        "bind address when it names one, else ec2_private_ip, else ssh_hostname, else the host name."))
    target_id: str | None = Field(None, description=(
        "ELBv2 rollouts (rollout_lb: elbv2): this host's target id; None: ec2_instance_id for an instance "
        "target group, ec2_private_ip for an ip one."))

    _address = field_validator("backend_address")(matching(_ADDRESS, "expected a host name or an IP address"))
    _target = field_validator("target_id")(matching(r"[A-Za-z0-9:/._-]{1,256}",
                                                    "expected a target id (an instance id, an IP address, an ARN)"))


def _ports(s: Settings) -> dict[str, int]:
    return {"lb_frontend_http_port": s.frontend_http_port, "lb_frontend_grpc_port": s.frontend_grpc_port,
            "lb_prometheus_port": s.prometheus_port}


def _checks(cfg: HostConfig) -> None:
    seen: dict[int, str] = {}
    for field, port in _ports(cfg.lb).items():
        if port in seen:
            raise FieldProblem(field, port, f"same port as {seen[port]}")
        seen[port] = field


def _overlap(a: str, b: str) -> bool:
    return a == b or ipaddress.ip_address(a).is_unspecified or ipaddress.ip_address(b).is_unspecified


def _host_checks(h, cfg: HostConfig) -> None:
    """A load balancer that also serves Triton: no frontend on one of its Triton servers' ports."""
    if GROUP not in h.groups:
        return
    s: Settings = cfg.lb
    for field, port in _ports(s).items():
        for p in cfg.triton.placements:
            for key, taken in p.ports.items():
                if taken == port and _overlap(s.bind_address, p.bind_address):
                    raise FieldProblem(field, port, f"clashes with Triton server {p.name}'s {key} on this host "
                                                    "(choose another port for one of them)")


ROLE = Role("lb", Settings, "HAProxy in front of the Triton servers, on the hosts of the lb group",
            checks=_checks, host_checks=_host_checks, order=90)


@dataclass(frozen=True)
class Backend:
    """One Triton server as a server line of both backends."""

    name: str  # <host>-<server>
    host: str
    server: str
    address: str
    http_port: int
    grpc_port: int

    def endpoint(self, port: int) -> str:
        return f"[{self.address}]:{port}" if ":" in self.address else f"{self.address}:{port}"


def server_name(host_name: str, server: str) -> str:
    """The HAProxy server name of Triton server ``server`` on inventory host ``host_name``: ``<host>-<server>``
    (a pyinfra connector prefix such as ``@ssh/`` is left out). The rollout addresses servers by it."""
    return f"{re.sub(r'^@[a-z]+/', '', host_name)}-{server}"


def _address(h, cfg: HostConfig, bind: str) -> str:
    if not ipaddress.ip_address(bind).is_unspecified:
        return bind
    data = h.data
    for value in (cfg.lb.backend_address, data.get("ec2_private_ip"), data.get("ssh_hostname")):
        if value:
            return str(value)
    return re.sub(r"^@[a-z]+/", "", h.name)


def lb_hosts(inventory) -> list:
    try:
        return sorted(inventory.get_group(GROUP), key=lambda h: h.name)
    except NoGroupError:
        return []


def backends(state) -> list[Backend]:
    """Every Triton server of the inventory (every host, whether this run targets it or not), in host order.
    Raises :class:`PreflightError` (one line per problem) when a host's data is bad or a name is unusable."""
    configs = stored(state) or {}
    roles = all_roles()
    out: list[Backend] = []
    problems: list[str] = []
    names: dict[str, str] = {}
    for h in sorted(state.inventory, key=lambda x: x.name):
        cfg = configs.get(h.name)
        if cfg is None:  # left out of this run (--limit): its data still says where its servers are
            try:
                cfg = load_host_config(h.name, h.data.dict(), roles)
            except ConfigError as exc:
                problems.append(str(exc))
                continue
        for p in cfg.triton.placements:
            name = server_name(h.name, p.name)
            address = _address(h, cfg, p.bind_address)
            if not _SERVER_NAME.fullmatch(name):
                problems.append(f"{h.name}: HAProxy server name {name!r}: expected letters, digits and _ . : - "
                                "(host name and Triton server name)")
            elif name in names:
                problems.append(f"{h.name}: HAProxy server name {name!r}: also the name of a server of {names[name]}")
            elif not re.fullmatch(_ADDRESS, address):
                problems.append(f"{h.name}: backend address {address!r}: expected a host name or an IP address "
                                "(set lb_backend_address)")
            else:
                names[name] = h.name
                out.append(Backend(name, h.name, p.name, address, p.http_port, p.grpc_port))
    if problems:
        raise PreflightError("preflight failed, nothing was changed:\n  " + "\n  ".join(problems))
    return out


def haproxy_cfg(cfg: HostConfig, servers: list[Backend]) -> tuple[str, str]:
    """``(haproxy.cfg, its id)``: the id (a digest of the rest of the file) is its ``description``, which the
    running HAProxy reports, so a reload is checked to have taken effect."""
    s: Settings = cfg.lb
    bind = f"[{s.bind_address}]" if ":" in s.bind_address else s.bind_address
    context = dict(s=s, bind=bind, backends=servers, socket=SOCKET, metrics_path=METRICS_PATH,
                   health_path=HEALTH_PATH)
    config_id = hashlib.sha256(render("lb/haproxy.cfg.j2", config_id="", **context).encode()).hexdigest()[:16]
    return render("lb/haproxy.cfg.j2", config_id=config_id, **context), config_id


@deploy("Load balancer")
def lb() -> None:
    state = host.state
    if not lb_hosts(state.inventory):
        raise PreflightError(f"preflight failed, nothing was changed:\n  inventory: group {GROUP}: has no hosts "
                             f"(put the load balancers in a group named {GROUP})")
    servers = backends(state)
    if not servers:
        raise PreflightError("preflight failed, nothing was changed:\n  inventory: triton_servers: no Triton "
                             "server is placed on any host (the load balancers would have no backend)")
    if GROUP not in host.groups:
        host.noop(f"not in the {GROUP} group")
        return
    cfg = config_for()
    s: Settings = cfg.lb
    # socat: the Runtime API's client (the reload check here, the rollout's drains)
    platform.install("HAProxy", {"haproxy": s.haproxy_version, "socat": None})
    dropin = ops.files.managed(name="haproxy.service drop-in: the Runtime API socket's directory", files={
        DROPIN: render("lb/haproxy-dropin.conf.j2", socket=SOCKET, directory=posixpath.basename(
            posixpath.dirname(SOCKET)))})
    ops.qa.daemon_reload(name="systemd reads the haproxy.service drop-in", _if=dropin.did_change)
    content, config_id = haproxy_cfg(cfg, servers)
    ops.haproxy.config(name=f"{CONFIG}: {len(servers)} Triton server(s) (checked, reloaded, running)",
                       path=CONFIG, content=content, config_id=config_id, socket=SOCKET, unit=UNIT)
    ops.services.units(name="HAProxy running and enabled", units=[UNIT], running=True, enabled=True)
