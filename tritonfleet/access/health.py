"""What a host serves, read over one SSH session: the Triton containers its Docker engine has (``docker
inspect``, :mod:`tritonfleet.access.dockerinspect`), whether each server is ready and which models are READY
(Triton itself, asked on the host with the restricted-API header), which models each server loads (the
inventory's ``triton_servers[].models``, else ``triton_models``), and what a rollback would return to (the
host record's ``previous``).

:func:`read_host` is the one reader: ``tritonfleet status`` renders it (:mod:`tritonfleet.face.status`) and
the rollout waits on it (:func:`tritonfleet.fleet.rollout.serving`). Docker and Triton are both asked: a
server can serve while the Docker daemon is down (live-restore), or run without serving.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from tritonfleet import hostcontract as hc
from tritonfleet.access import dockerinspect
from tritonfleet.access.ssh import HostUnreachable, Session, connect
from tritonfleet.placement import Placement

logger = logging.getLogger(__name__)

#: Triton's HTTP port in its container, and where a server the inventory does not place is asked.
DEFAULT_HTTP_PORT = 8000


@dataclass(frozen=True)
class ServerHealth:
    """One Triton server of a host: what Docker says of its container and what Triton answered."""

    host: str
    server: str
    #: the HTTP port Triton was asked on (its endpoint label's, else the inventory's, else 8000)
    port: str
    #: :func:`tritonfleet.hostcontract.container_summary` of its container; None when Docker has none for it
    #: or does not answer (``docker_error``)
    container: dict[str, Any] | None
    #: why Docker did not answer (its first line), None when it did
    docker_error: str | None
    #: Triton answered ``/v2/health/ready``
    triton_ready: bool
    #: the models READY in its repository index, sorted; None when the index could not be read
    models: list[str] | None
    #: the record of the spec a rollback would return to; only read when asked (:func:`read_host`)
    previous: hc.ServerRecord | None = None
    #: the inventory places this server on the host (then ``loads`` says which models it loads)
    placed: bool = False
    #: the models the inventory gives it (``triton_servers[].models``, else ``triton_models``); None: every
    #: model of the repository (or, not ``placed``, unknown)
    loads: tuple[str, ...] | None = None

    @property
    def labels(self) -> dict[str, str]:
        return self.container["labels"] if self.container else {}

    @property
    def restarting(self) -> bool:
        return bool(self.container and self.container["restarting"])

    @property
    def serving(self) -> bool:
        """Triton is ready and its container is not crash-looping (a container Docker does not show, with the
        daemon down, may still serve)."""
        return self.triton_ready and not self.restarting

    @property
    def state(self) -> str:
        """The container's state in words: ``running``, ``restarting (3 restarts)``, ``docker not answering
        (...)``, ``missing (expected <server>)``."""
        c = self.container
        if c is not None:
            text = "restarting" if c["restarting"] else c["status"]
            return text + (f" ({c['restart_count']} restarts)" if c["restart_count"] else "")
        if self.docker_error:
            return f"docker not answering ({self.docker_error[:60]})"
        return f"missing (expected {self.server})"

    @property
    def not_ready(self) -> list[str]:
        """The models it loads that are not READY (none when the index could not be read, or it loads every
        model: then the index is the list)."""
        if self.loads is None or self.models is None:
            return []
        return [m for m in self.loads if m not in self.models]

    @property
    def ready(self) -> str:
        """The READY models in words: their names, ``-`` (none, Triton ready) or ``not answering``."""
        return ", ".join(self.models) if self.models else ("-" if self.triton_ready else "not answering")


@dataclass(frozen=True)
class HostHealth:
    """One host: its servers, or why it has none (out of reach, no Triton server)."""

    host: str
    servers: list[ServerHealth] = field(default_factory=list)
    #: ``ssh: ...`` when the host could not be reached
    unreachable: str | None = None
    #: why Docker did not answer, None when it did
    docker_error: str | None = None
    #: the watchdog's state file (tritonfleet/agent/watchrun.py), when asked for and the host has one
    watchdog: dict | None = None
    #: pull mode's state file (:data:`tritonfleet.hostcontract.PULL_STATE_FILE`, written by ``tritonfleet-agent
    #: pull``), when asked for and the host has one
    pull: dict | None = None

    @property
    def error(self) -> str | None:
        """Why the host has no servers to show: out of reach, or no Triton server that Docker or the inventory
        knows of (with Docker's error when it did not answer); None when it has servers."""
        if self.unreachable:
            return self.unreachable
        if not self.servers:
            return "no Triton servers" + (f" (docker: {self.docker_error})" if self.docker_error else "")
        return None

    @property
    def serving(self) -> bool:
        """Every server of the host serves (a host without servers does not)."""
        return self.error is None and all(s.serving for s in self.servers)

    def seen(self) -> str:
        """What this look saw, in one line: the error, or ``<server>: <state>, ready: <models>`` per server."""
        return self.error or "; ".join(f"{s.server}: {s.state}, ready: {s.ready}" for s in self.servers)


def read_host(name: str, data: dict, *, previous: bool = False, watchdog: bool = False,
              pull: bool = False) -> HostHealth:
    """Connect to the host and read every Triton server on it: the ones Docker has and the ones the inventory
    places there. ``previous``: also read each server's rollback target from its host record; ``watchdog``:
    also the watchdog's state file (:func:`watchdog_state`); ``pull``: also pull mode's (:func:`pull_state`).
    The state files asked for are read in one command (:func:`state_files`)."""
    placed = placements(name, data)
    expected = {p.name: p.http_port for p in placed.values()}
    started = time.monotonic()
    try:
        session = connect(name, data)
    except HostUnreachable as exc:
        return HostHealth(name, unreachable=str(exc))
    try:
        header = f"{data.get('triton_repository_header', hc.REPOSITORY_HEADER)}: {data.get('triton_repository_secret') or ''}"
        try:
            containers, docker_error = triton_containers(session), None
        except DockerNotAnswering as exc:
            containers, docker_error = {}, str(exc)
        servers = []
        for server in dict.fromkeys([*expected, *containers]):
            c = containers.get(server)
            labels = c["labels"] if c else {}
            bind, _, port = labels.get(hc.LABEL_ENDPOINT, "").rpartition(":")
            port = port or str(expected.get(server, DEFAULT_HTTP_PORT))
            addr = bind if bind not in ("", "0.0.0.0", "::") else data.get("ssh_hostname", "127.0.0.1")
            ready, models = ask_triton(session, addr, port, header)
            logger.debug("%s: %s at %s:%s: %s, models %s", name, server, addr, port,
                         "ready" if ready else "not ready", models)
            p = placed.get(server)
            servers.append(ServerHealth(name, server, port, c, docker_error, ready, models,
                                        previous_record(session, server) if previous else None,
                                        placed=p is not None, loads=p.models if p is not None else None))
        states = iter(state_files(session, *([_watchdog_file()] if watchdog else []),
                                  *([hc.PULL_STATE_FILE] if pull else [])))
        health = HostHealth(name, servers, docker_error=docker_error, watchdog=next(states) if watchdog else None,
                            pull=next(states) if pull else None)
        logger.debug("%s: %s in %.1fs", name, "serving" if health.serving else health.seen(),
                     time.monotonic() - started)
        return health
    finally:
        session.close()


class DockerNotAnswering(RuntimeError):
    """The host's Docker engine did not list its containers; the message is its first line of error."""


def triton_containers(session: Session) -> dict[str, dict[str, Any]]:
    """``{server: container summary}`` of tritonfleet's Triton containers on the host, stopped ones included,
    keyed by their server label (the container's name where it has none). Docker runs as root (``sudo -n``
    where the host uses sudo); :class:`DockerNotAnswering` when it does not answer."""
    try:
        rc, out, err = session.run(dockerinspect.containers_command(hc.TRITON_FILTER), root=True)
    except Exception as exc:  # noqa: BLE001 - the session failing (a timeout) is Docker not answering too
        raise DockerNotAnswering(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    lines = out.splitlines()
    if rc != 0 or dockerinspect.LISTED not in lines:
        first = err.strip().splitlines()[0] if err.strip() else f"docker exited with status {rc}"
        logger.debug("%s: docker not answering (rc %d): %s", session.name, rc, err.strip()[:300])
        raise DockerNotAnswering(first)
    found = dockerinspect.parse_containers(lines)
    logger.debug("%s: docker has %d Triton container(s): %s", session.name, len(found), ", ".join(found) or "-")
    return {c["labels"].get(hc.LABEL_SERVER) or cname: c for cname, c in found.items()}


def ask_triton(session: Session, addr: str, port: str, header: str) -> tuple[bool, list[str] | None]:
    """Ask the server itself, from its host, at the address clients use (not loopback: that goes through
    docker-proxy, which is gone while the Docker daemon is down): is it ready, which models are READY.
    The header (it carries the secret) goes on stdin, never on the command line."""
    hosts = " ".join(shlex.quote(f"[{a}]" if ":" in a else a) for a in dict.fromkeys([addr, "127.0.0.1"]))
    rc, out, _ = session.run(
        f"hdr=$(cat); for a in {hosts}; do b=http://$a:{shlex.quote(port)}/v2; "
        "curl -fsS -m 3 -o /dev/null $b/health/ready || continue; echo @ready; "
        "printf '%s' \"$hdr\" | curl -fsS -m 3 -X POST -H @- $b/repository/index; break; done", stdin=header)
    ready = out.startswith("@ready")
    try:
        index = json.loads(out.removeprefix("@ready").strip() or "null")
        return ready, sorted(m["name"] for m in index if m.get("state") == "READY")
    except (ValueError, TypeError, KeyError):
        return ready, None


def _watchdog_file() -> str:
    from tritonfleet.agent.watchrun import STATE_FILE

    return STATE_FILE


def watchdog_state(session: Session) -> dict | None:
    """The watchdog's last pass and recent actions (its state file, read as root); None when the host has no
    watchdog, or the file cannot be read as the JSON object it writes."""
    (state,) = state_files(session, _watchdog_file())
    return state


def pull_state(session: Session) -> dict | None:
    """Pull mode's view of the host (:data:`tritonfleet.hostcontract.PULL_STATE_FILE`: the release it serves,
    the one its pointer names, the last check, the last error), read as root; None when the host does not pull,
    or the file cannot be read as the JSON object the agent writes."""
    (state,) = state_files(session, hc.PULL_STATE_FILE)
    return state


#: The line :func:`state_files` puts before each file (no line of a JSON file is this: a string holds no newline).
_FILE_MARK = "@@file"


def state_files(session: Session, *paths: str) -> list[dict | None]:
    """The JSON-object state files at ``paths``, in their order, read as root in one command (none for no
    path): one ``cat`` for one path, else each after a line of its own, so that a host without one of them
    still gives the others. None for a file the host does not have, that could not be read, or that is not
    a JSON object (a half-written one); all None when the command failed (sudo refused) or its output is not
    that of the files in turn."""
    if not paths:
        return []
    if len(paths) == 1:
        rc, out, _ = session.run(f"cat {shlex.quote(paths[0])}", root=True)
        return [_json_object(out) if rc == 0 else None]
    rc, out, _ = session.run("; ".join(
        f"printf '\\n{_FILE_MARK}\\n'; cat {shlex.quote(p)} 2>/dev/null || true" for p in paths),
        root=True)
    parts = out.split(f"\n{_FILE_MARK}\n")
    if rc != 0 or len(parts) != len(paths) + 1 or parts[0]:
        logger.debug("%s: state files not read (rc %d, %d part(s))", session.name, rc, len(parts))
        return [None] * len(paths)
    return [_json_object(part) for part in parts[1:]]


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def previous_record(session: Session, server: str) -> hc.ServerRecord | None:
    """The record a rollback of ``server`` would return to (its host record's ``previous``), read as root;
    None when there is none or the record cannot be read."""
    rc, out, _ = session.run(f"cat {shlex.quote(hc.record_path(server))}", root=True)
    record = hc.ServerRecord.from_json(out) if rc == 0 else None
    return record.previous if record is not None else None


def expected_servers(name: str, data: dict) -> dict[str, int]:
    """Servers the inventory places on the host: name -> HTTP port (empty when the data does not say)."""
    return {p.name: p.http_port for p in placements(name, data).values()}


def placements(name: str, data: dict) -> dict[str, Placement]:
    """The servers the inventory places on the host by name: ports, models (empty when the data does not say)."""
    from roles import all_roles
    from tritonfleet.config import ConfigError, load_host_config

    if not data.get("instance_type"):
        return {}
    try:
        cfg = load_host_config(name, data, all_roles())
    except ConfigError:
        return {}
    return {p.name: p for p in cfg.triton.placements}


def is_balancer(data: dict) -> bool:
    """A host of a general-purpose instance type (no accelerator) runs no Triton: preflight accepts it only
    in the lb group, where roles/lb.py runs HAProxy on it."""
    from tritonfleet import catalog

    try:
        return not catalog.get(str(data.get("instance_type", ""))).has_accelerator
    except (KeyError, ValueError):
        return False


def read_pull_state(name: str, data: dict) -> dict | None:
    """One host's pull state (:func:`pull_state`): one SSH session, one command; None when the host cannot be
    reached, does not pull or its file cannot be read."""
    try:
        session = connect(name, data)
    except HostUnreachable as exc:
        logger.debug("%s: no pull state: %s", name, exc)
        return None
    try:
        return pull_state(session)
    finally:
        session.close()


def served_releases(inventory: str) -> dict[str, dict | None]:
    """Host name -> its pull state (``release`` served, ``pointed``, ``last_check``, ``failures``,
    ``last_error``...) for every host of the inventory but the load balancers, 16 at a time: what a release
    rollout polls (one command per host). None for a host that does not pull, cannot be reached or whose file
    cannot be read."""
    from concurrent.futures import ThreadPoolExecutor

    from tritonfleet.access.inventory import load_inventory

    hosts = [(name, data) for name, data in load_inventory(inventory) if not is_balancer(data)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        states = list(pool.map(lambda hd: read_pull_state(*hd), hosts))
    return {name: state for (name, _), state in zip(hosts, states, strict=True)}
