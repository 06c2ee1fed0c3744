"""The HAProxy backend of :class:`tritonfleet.fleet.lb.LoadBalancer`: the HAProxy of every host of the inventory's
``lb`` group (``roles/lb.py``), driven over SSH (:mod:`tritonfleet.access.ssh`) through its Runtime API.

The contract with ``roles/lb.py``: backends ``triton_http`` and ``triton_grpc``, one server in each per Triton
server of the inventory, named ``<inventory host>-<triton server>`` (:func:`server_name`; a host's Triton
servers come from its validated data, :func:`tritonfleet.access.health.expected_servers`); the Runtime API on
``/run/haproxy/admin.sock``, root only, level admin.

How the socket is spoken to: ``python3 -c`` (:data:`CLIENT`), one connection per command, as root. Not ``socat``:
the haproxy package of Debian, Ubuntu and AL2023 does not pull it in, while python3 is on all three (AL2023's
dnf and every cloud-init are Python). Each command is one argument, quoted (``shlex.quote``); server names are
checked against :data:`NAME` before they reach a command.

- take out: ``set server <backend>/<server> state drain`` on both backends (no new requests, those in flight
  finish), then ``show stat`` until ``scur`` (current sessions) is 0 for those servers (bounded, the last counts
  on timeout), then ``state maint``;
- put back: ``state drain`` (out of maintenance, still no new requests, health checks run), ``health down``,
  then ``show stat`` until every one of them is ``DRAIN`` (``rise`` checks of the changed server passed), then
  ``state ready`` and ``show stat`` until ``UP`` (not ``UP 1/3``, UP with failing checks). A server leaves
  maintenance in the health it had before and HAProxy ignores a health forced in maintenance, so a plain
  ``ready`` shows a stale ``UP`` until the next check (the sandbox e2e test caught a changed server that never
  answered a check counted as back, and a request sent to it). Bounded; HAProxy's status and last check on
  timeout;
- weights: HAProxy weighs each server 0-256; :func:`canary_weights` gives the canary servers one weight and the
  others another so that the canary's share of the total is closest to ``percent`` (searching every pair in
  1-256, so the rounding error is at most a fraction of a percent; the share actually set is reported).
  :meth:`HAProxy.restore_weights` puts back each server's configured weight (``srv_iweight`` of ``show servers
  state``), not a guessed base. The share holds for ``balance roundrobin``; ``leastconn`` (roles/lb.py) honours
  weights only once servers have connections in flight, so under light load the split is approximate.
"""

from __future__ import annotations

import csv
import logging
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from tritonfleet.fleet.lb import BackendView, LoadBalancerError

logger = logging.getLogger(__name__)

SOCKET = "/run/haproxy/admin.sock"
BACKENDS = ("triton_http", "triton_grpc")
#: The inventory group of the load balancers.
GROUP = "lb"
#: Server (and backend) names that may reach a Runtime API command (roles/lb.py enforces the same).
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
MAX_WEIGHT = 256
#: roles/lb.py's ``lb_check_interval_ms`` default: how often HAProxy checks each server's health
CHECK_INTERVAL_MS = 2000
#: the least time between two looks at the Runtime API while a server drains or comes back
MIN_POLL_SECONDS = 0.5
#: The Runtime API client run on the lb host: ``python3 -c CLIENT SOCKET CMD...``; each command's reply follows a
#: line ``@@<n>``. Python 3.6+ (every supported lb platform).
CLIENT = """import socket, sys
for i, cmd in enumerate(sys.argv[2:]):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sys.argv[1])
    s.sendall(cmd.encode() + b"\\n")
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
    s.close()
    sys.stdout.write("@@%d\\n" % i + out.decode(errors="replace"))
"""


def server_name(host: str, server: str) -> str:
    """HAProxy's name of Triton server ``server`` of inventory host ``host`` (a pyinfra connector prefix such as
    ``@ssh/`` left out), as roles/lb.py names it."""
    return f"{re.sub(r'^@[a-z]+/', '', host)}-{server}"


@dataclass(frozen=True)
class Stat:
    """One server row of ``show stat``."""

    backend: str
    server: str
    status: str  # UP, DOWN, DRAIN, MAINT, NOLB, "UP 1/2", "no check", ...
    weight: int
    scur: int
    check: str  # check_status and check_desc, for messages

    @property
    def state(self) -> str:
        s = self.status.upper()
        if s.startswith("MAINT"):
            return "maint"
        if s.startswith(("DRAIN", "NOLB")):
            return "draining"
        if s.startswith("UP") or s == "NO CHECK":
            return "up"
        return "down"


def parse_stat(text: str) -> list[Stat]:
    """Server rows of ``show stat`` (CSV whose header line starts with ``# ``); frontends and backends left out."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise LoadBalancerError(f"show stat: unexpected reply: {' '.join(text.split())[:200] or 'nothing'}")
    rows = csv.DictReader([lines[0][2:], *lines[1:]])
    out = []
    for row in rows:
        if row.get("svname") in ("FRONTEND", "BACKEND") or not row.get("pxname"):
            continue
        check = " ".join(x for x in (row.get("check_status"), row.get("check_desc")) if x)
        out.append(Stat(row["pxname"], row["svname"], row.get("status") or "", _int(row.get("weight")),
                        _int(row.get("scur")), check))
    return out


def parse_servers_state(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """``show servers state``: ``{(backend, server): {column: value}}`` (format version 1: a version line, a
    ``# ``-prefixed header of space separated names, then one line per server)."""
    fields: list[str] | None = None
    out: dict[tuple[str, str], dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            fields = line.lstrip("# ").split()
            continue
        values = line.split()
        if fields is None or len(values) < len(fields):
            continue
        row = dict(zip(fields, values, strict=False))
        out[(row["be_name"], row["srv_name"])] = row
    return out


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def canary_weights(canary: int, rest: int, percent: int) -> tuple[int, int, float]:
    """``(canary server weight, other server weight, the canary's share in %)`` for ``canary`` canary servers and
    ``rest`` others, the share closest to ``percent`` with weights 1-256 (0 for a side at 0 % / 100 %)."""
    if not 0 <= percent <= 100:
        raise LoadBalancerError(f"canary weight {percent}: expected a percentage 0-100")
    if canary < 1 or rest < 1:
        raise LoadBalancerError("a traffic canary needs canary servers and other servers")
    if percent == 0:
        return 0, MAX_WEIGHT, 0.0
    if percent == 100:
        return MAX_WEIGHT, 0, 100.0
    best: tuple[float, int, int] | None = None
    for wr in range(1, MAX_WEIGHT + 1):
        wc = min(MAX_WEIGHT, max(1, round(percent * rest * wr / ((100 - percent) * canary))))
        share = 100 * canary * wc / (canary * wc + rest * wr)
        if best is None or abs(share - percent) < best[0] - 1e-12:
            best = (abs(share - percent), wc, wr)
    assert best is not None
    wc, wr = best[1], best[2]
    return wc, wr, round(100 * canary * wc / (canary * wc + rest * wr), 2)


def poll_interval(lb_hosts: list[tuple[str, dict]], ceiling: float) -> float:
    """Seconds between two looks at the Runtime API while servers drain or come back: HAProxy's own health
    check interval (``lb_check_interval_ms`` of the lb hosts, the shortest), as a look in between two checks
    sees nothing new, within [:data:`MIN_POLL_SECONDS`, ``ceiling``] (the rollout's ``lb_delay``). A put back
    then waits about one check after the server's `rise` checks passed, not a fixed ``ceiling``."""
    checks = []
    for _, data in lb_hosts:
        value = data.get("lb_check_interval_ms", CHECK_INTERVAL_MS)
        checks.append(value if isinstance(value, int) and not isinstance(value, bool) and value > 0
                      else CHECK_INTERVAL_MS)
    seconds = min(checks or [CHECK_INTERVAL_MS]) / 1000
    return max(MIN_POLL_SECONDS, min(ceiling, seconds))


class HAProxy:
    """The HAProxy of the lb hosts (see the module docstring). ``servers``: host -> its Triton servers (None:
    from each host's validated data); ``connect``, ``sleep``, ``clock``: for tests."""

    def __init__(self, lb_hosts: list[tuple[str, dict]], *, timeout: float = 600, interval: float = 2,
                 socket: str = SOCKET, servers: Callable[[str, dict], list[str]] | None = None,
                 connect: Callable | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from tritonfleet.access import ssh

        if not lb_hosts:
            raise LoadBalancerError(f"rollout_lb haproxy: the inventory's {GROUP} group has no hosts (roles/lb.py "
                                    "runs HAProxy on them)")
        self.lb_hosts = list(lb_hosts)
        self.timeout, self.interval, self.socket = timeout, interval, socket
        self._servers = servers or _placed
        self.connect = connect or ssh.connect
        self.sleep, self.clock = sleep, clock
        self.names: dict[str, str] = {}  # server name -> inventory host
        self._saved: dict[str, dict[tuple[str, str], int]] | None = None  # lb host -> configured weights
        self._canary: list[tuple[str, dict]] = []

    # -- the Runtime API --------------------------------------------------------------------------------

    def command(self, lb: tuple[str, dict], *commands: str) -> list[str]:
        """Run Runtime API commands on one lb host; their replies, in order."""
        name, data = lb
        line = " ".join(shlex.quote(x) for x in ("python3", "-c", CLIENT, self.socket, *commands))
        try:
            session = self.connect(name, data)
        except Exception as exc:
            raise LoadBalancerError(f"{name}: HAProxy Runtime API: {exc}") from None
        try:
            rc, out, err = session.run(line, root=True)
        finally:
            session.close()
        if rc != 0:
            last = (err.strip().splitlines() or [f"exit status {rc}"])[-1]
            raise LoadBalancerError(f"{name}: HAProxy Runtime API {self.socket}: {last[:200]}")
        replies = re.split(r"^@@\d+\n", out, flags=re.M)[1:]
        if len(replies) != len(commands):
            raise LoadBalancerError(f"{name}: HAProxy Runtime API: {len(replies)} replies to {len(commands)} commands")
        return replies

    def _set(self, lb: tuple[str, dict], commands: list[str]) -> None:
        for cmd, reply in zip(commands, self.command(lb, *commands), strict=True):
            if reply.strip():  # a set command that worked says nothing
                raise LoadBalancerError(f"{lb[0]}: HAProxy refused `{cmd}`: {' '.join(reply.split())[:200]}")

    def stats(self, lb: tuple[str, dict]) -> dict[tuple[str, str], Stat]:
        return {(s.backend, s.server): s for s in parse_stat(self.command(lb, "show stat")[0])}

    # -- servers ----------------------------------------------------------------------------------------

    def servers(self, name: str, data: dict) -> list[str]:
        """The HAProxy server names of a host (one per Triton server)."""
        found = [server_name(name, s) for s in self._servers(name, data)]
        if not found:
            raise LoadBalancerError(f"{name}: triton_servers: no Triton server is placed on it (instance_type "
                                    f"{data.get('instance_type') or 'unknown'}): nothing to find in HAProxy")
        for s in found:
            if not NAME.fullmatch(s):
                raise LoadBalancerError(f"{name}: HAProxy server name {s!r}: expected letters, digits and _ . : -")
            self.names[s] = name
        return found

    def check(self, hosts: list[tuple[str, dict]]) -> None:
        wanted = {s: name for name, data in hosts for s in self.servers(name, data)}
        for lb in self.lb_hosts:
            have = parse_servers_state(self.command(lb, "show servers state")[0])
            for server, host in wanted.items():
                for backend in BACKENDS:
                    if (backend, server) not in have:
                        raise LoadBalancerError(f"{host}: HAProxy on {lb[0]} has no server {backend}/{server} "
                                                "(apply deploys/lb.py after changing the inventory)")

    def _state(self, servers: list[str], state: str) -> None:
        for lb in self.lb_hosts:
            self._set(lb, [f"set server {b}/{s} state {state}" for s in servers for b in BACKENDS])

    def _wait(self, name: str, servers: list[str], done: Callable[[Stat], bool], goal: str,
              said: Callable[[Stat], str]) -> None:
        deadline = self.clock() + self.timeout
        started = self.clock()
        while True:
            pending = []
            for lb in self.lb_hosts:
                stats = self.stats(lb)
                for s in servers:
                    for b in BACKENDS:
                        st = stats.get((b, s))
                        if st is None:
                            pending.append(f"{lb[0]} {b}/{s}: gone from HAProxy")
                        elif not done(st):
                            pending.append(f"{lb[0]} {b}/{s}: {said(st)}")
            if not pending:
                logger.debug("%s: %s after %.0fs", name, goal, self.clock() - started)
                return
            if self.clock() >= deadline:
                raise LoadBalancerError(f"{name}: not {goal} after {self.timeout:.0f}s ({'; '.join(pending)[:400]})")
            logger.debug("%s: waiting until %s: %s", name, goal, "; ".join(pending)[:300])
            self.sleep(self.interval)

    def take_out(self, name: str, data: dict) -> None:
        servers = self.servers(name, data)
        logger.debug("%s: draining %s in HAProxy on %s", name, ", ".join(servers), ", ".join(h for h, _ in self.lb_hosts))
        self._state(servers, "drain")
        self._wait(name, servers, lambda st: st.scur == 0, "drained (no current sessions)",
                   lambda st: f"{st.scur} current sessions, {st.status}")
        self._state(servers, "maint")

    def put_back(self, name: str, data: dict) -> None:
        servers = self.servers(name, data)
        said = lambda st: " ".join(x for x in (st.status, st.check and f"(check: {st.check})") if x)  # noqa: E731
        # A server leaves maintenance in the health it had before (UP) until its next check runs, and HAProxy
        # ignores a health forced while in maintenance: drain first (no new requests; checks run), then force
        # the health down, so that only `rise` passing checks of the changed server make it healthy (DRAIN),
        # and only then ready.
        logger.debug("%s: %s drain and health down in HAProxy; waiting for its checks", name, ", ".join(servers))
        for lb in self.lb_hosts:
            self._set(lb, [f"set server {b}/{s} state drain" for s in servers for b in BACKENDS]
                      + [f"set server {b}/{s} health down" for s in servers for b in BACKENDS])
        try:
            self._wait(name, servers, lambda st: st.status.upper() == "DRAIN", "UP in HAProxy", said)
        except LoadBalancerError:
            # as an ELBv2 target that never turned healthy stays registered: ready, so that its health checks
            # alone decide when it gets requests again (the rollout counts the host as failed all the same)
            self._state(servers, "ready")
            raise
        self._state(servers, "ready")
        self._wait(name, servers, lambda st: st.status.upper() in ("UP", "NO CHECK"), "UP in HAProxy", said)

    # -- weights ----------------------------------------------------------------------------------------

    def set_weights(self, canary: list[tuple[str, dict]], percent: int) -> str:
        chosen = {s for name, data in canary for s in self.servers(name, data)}
        said = ""
        self._saved, self._canary = {}, list(canary)
        for lb in self.lb_hosts:
            state = parse_servers_state(self.command(lb, "show servers state")[0])
            self._saved[lb[0]] = {key: _int(row.get("srv_iweight")) for key, row in state.items()
                                  if key[0] in BACKENDS}
            commands = []
            for backend in BACKENDS:
                mine = [s for (b, s) in state if b == backend]
                rest = [s for s in mine if s not in chosen]
                wc, wr, share = canary_weights(len([s for s in mine if s in chosen]), len(rest), percent)
                commands += [f"set server {backend}/{s} weight {wc if s in chosen else wr}" for s in mine]
                said = f"HAProxy weights: canary servers {wc}, the others {wr}: {share:g}% to the canary"
            self._set(lb, commands)
        return said

    def restore_weights(self, rejoin: bool = True) -> None:
        if self._saved is None:
            return
        if not rejoin:
            for name, data in self._canary:
                self.take_out(name, data)
        for lb in self.lb_hosts:
            self._set(lb, [f"set server {b}/{s} weight {w}" for (b, s), w in self._saved.get(lb[0], {}).items()])
        self._saved, self._canary = None, []

    def view(self) -> list[BackendView]:
        out = []
        for lb in self.lb_hosts:
            for st in self.stats(lb).values():
                if st.backend in BACKENDS:
                    out.append(BackendView(lb[0], st.backend, self.names.get(st.server, ""), st.server, st.state,
                                           st.weight, st.scur, st.status))
        return out


def _placed(name: str, data: dict) -> list[str]:
    from tritonfleet.access.health import expected_servers

    return list(expected_servers(name, data))


def group_hosts(members: dict[str, list[str]], hosts: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The hosts of the inventory's ``lb`` group (``members``: each group's hosts, from
    :func:`tritonfleet.access.inventory.load_inventory_groups`), with their merged data from ``hosts``."""
    data = dict(hosts)
    return [(n, data[n]) for n in members.get(GROUP, []) if n in data]
