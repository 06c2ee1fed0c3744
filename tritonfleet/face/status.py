"""``tritonfleet status``: a row per host and Triton server (image, devices, cores, state, uptime, the
models it loads, ready models, endpoint), rendered from what :func:`tritonfleet.access.health.read_host` reads of each host (its
Docker engine, ``docker inspect`` over SSH, and Triton itself), plus what a rollback would return to (the host
record's ``previous``). This module only turns that into rows and a table."""

from __future__ import annotations

import datetime as dt
import logging
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tritonfleet import hostcontract as hc
from tritonfleet.access.health import HostHealth, ServerHealth, is_balancer, read_host
from tritonfleet.access.inventory import load_inventory
from tritonfleet.access.ssh import HostUnreachable

logger = logging.getLogger(__name__)

COLUMNS = ["host", "server", "image", "devices", "cores", "state", "uptime", "models", "ready_models", "endpoint"]


def _uptime(started: str, running: bool) -> str:
    if not running or not started or started.startswith("0001"):
        return "-"
    when = dt.datetime.fromisoformat(started[:26].rstrip("Z") + "+00:00" if "." in started else
                                     started.replace("Z", "+00:00"))
    secs = int((dt.datetime.now(dt.timezone.utc) - when).total_seconds())
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _endpoint(data: dict, labels: dict) -> str:
    ep = labels.get(hc.LABEL_ENDPOINT, "")
    addr, _, port = ep.rpartition(":")
    if addr in ("0.0.0.0", "::", ""):
        addr = data.get("ssh_hostname", "?")
    return f"http://{addr}:{port}" if port else "-"


def _models(s: ServerHealth) -> str:
    """The models the inventory gives the server: their names (with those not READY), ``all`` (every model
    of the repository), ``none``, or ``?`` (a server the inventory does not place here)."""
    if not s.placed:
        return "?"
    if s.loads is None:
        return "all"
    text = ", ".join(s.loads) or "none"
    return text + (f" (not ready: {', '.join(s.not_ready)})" if s.not_ready else "")


def _previous(record: hc.ServerRecord | None) -> str:
    """What a rollback returns to: the image and spec and, when that spec loads a list, its models."""
    if record is None:
        return "-"
    models = record.models
    loads = "" if models is None else f", models {', '.join(models) or 'none'}"
    return f"{record.image} (spec {record.spec}{loads})"


def server_row(data: dict, s: ServerHealth) -> dict[str, Any]:
    """A table row of one server (``data``: its host's inventory data, for the address clients use)."""
    c, labels = s.container, s.labels
    return {
        "host": s.host, "server": s.server, "image": c["image"] if c else "?",
        "devices": (",".join(d.removeprefix("/dev/") for d in c["devices"]) or labels.get(hc.LABEL_DEVICES)
                    or "-") if c else "?",
        "cores": labels.get(hc.LABEL_CORES) or "-", "state": s.state,
        "uptime": _uptime(c["started_at"], c["running"]) if c else "-",
        "models": _models(s),
        "ready_models": s.ready,
        "endpoint": _endpoint(data, labels) if labels else f"http://{data.get('ssh_hostname', s.host)}:{s.port}",
        "serving": s.serving,
    }


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def watchdog_cell(state: dict | None, server: str, now: float) -> str:
    """The watchdog column of a server: ``-`` (no watchdog on the host), ``stale`` when its last pass is more
    than three intervals old (the service is not running), else its actions of the last hour about this
    server or its host (``watching`` when there were none), the newest first, failed ones said."""
    if not state:
        return "-"
    at, interval = float(state.get("at") or 0), float(state.get("interval") or 30)
    if now - at > 3 * interval + 30:
        return f"stale: last look {_ago(now - at)} ago"
    mine = [a for a in state.get("actions") or [] if isinstance(a, dict) and a.get("server") in (server, None, "")
            and now - float(a.get("at") or 0) <= 3600]
    if not mine:
        return "watching"
    last = mine[-1]
    failed = " (failed)" if str(last.get("outcome", "")).startswith("failed") else ""
    return (f"{len(mine)} in 1h, last: {last.get('kind')} for {last.get('reason')}{failed} "
            f"{_ago(now - float(last.get('at') or 0))} ago")


#: A pull state whose last check is older than this many intervals (and at least :data:`STALE_PULL_SECONDS`)
#: is stale: the agent stopped checking.
STALE_PULL_INTERVALS = 10
STALE_PULL_SECONDS = 60.0
#: The last error in the release column, at most this many characters of its first line.
PULL_ERROR_WIDTH = 60


def _number(value: Any, default: float | None) -> float | None:
    """``value`` as a finite number, else ``default`` (a state file is the host's: nothing in it may stop the
    table)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _short(text: Any, width: int) -> str:
    lines = str(text).strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line if len(line) <= width else line[:width - 3] + "..."


def release_cell(state: dict | None, now: float) -> str:
    """The release column of a host, from its pull state (:data:`tritonfleet.hostcontract.PULL_STATE_FILE`,
    the format of ``tritonfleet-agent pull``): ``-`` (the host does not pull); ``stale (last check 10m00s
    ago; serving v2)`` when the last check is older than max(60 s, 10 intervals) (the agent stopped); else the
    release it serves (``none yet`` before the first), then ``-> v3 failing x4: <last error>`` or ``-> v3
    syncing`` when the pointer names another one, ``(failing x4: <last error>)`` when the pointer could not be
    read, ``(checked 3s ago)`` when all is well."""
    if not state:
        return "-"
    release, pointed = state.get("release") or None, state.get("pointed") or None
    last = _number(state.get("last_check"), None)
    interval = _number(state.get("interval"), None) or 0.0  # unsaid: the minute (the agent's 2 s give 20 s)
    if last is None or now - last > max(STALE_PULL_SECONDS, STALE_PULL_INTERVALS * interval):
        when = f"last check {_ago(now - last)} ago" if last is not None else "no check yet"
        return f"stale ({when}; serving {release})" if release else f"stale ({when})"
    served = str(release) if release else "none yet"
    failures = int(_number(state.get("failures"), 0) or 0)
    failing = f"failing x{failures}: {_short(state.get('last_error') or '?', PULL_ERROR_WIDTH)}"
    if pointed is not None and pointed != release:
        return f"{served} -> {pointed} " + (failing if failures > 0 else "syncing")
    if failures > 0:
        return f"{served} ({failing})"
    return served if release is None else f"{served} (checked {_ago(now - last)} ago)"


def host_rows(data: dict, health: HostHealth, *, previous: bool = False) -> list[dict[str, Any]]:
    """One row per server of the host, or one row saying why there is none; with the watchdog's column when the
    host has a watchdog, the release column when it pulls its models (:func:`release_cell`)."""
    if health.error is not None:
        return [{"host": health.host, "error": health.error, "serving": False}]
    rows = []
    now = time.time()
    for s in health.servers:
        row = server_row(data, s)
        if previous:
            row["previous"] = _previous(s.previous)
        if health.watchdog is not None:
            row["watchdog"] = watchdog_cell(health.watchdog, s.server, now)
        if health.pull is not None:
            row["release"] = release_cell(health.pull, now)
        rows.append(row)
    return rows


def balancer_rows(name: str, data: dict, **haproxy: Any) -> list[dict[str, Any]]:
    """The balancer's view, one row per backend server: state (up, draining, down, maint), weight and current
    sessions, read over its Runtime API (:class:`tritonfleet.fleet.haproxy.HAProxy`; ``haproxy``: its
    keyword arguments, for tests)."""
    from tritonfleet.fleet.haproxy import HAProxy
    from tritonfleet.fleet.lb import LoadBalancerError

    try:
        views = HAProxy([(name, data)], **{"timeout": 30, **haproxy}).view()
    except (LoadBalancerError, HostUnreachable, OSError, RuntimeError) as exc:
        return [{"host": name, "error": f"load balancer: {str(exc).splitlines()[0][:200]}", "serving": False}]
    if not views:
        return [{"host": name, "error": "load balancer: HAProxy has no triton backends (run deploys/lb.py)",
                 "serving": False}]
    return [{"host": name, "server": f"{v.pool}/{v.server}", "image": "haproxy", "devices": "-", "cores": "-",
             "state": f"{v.state} (weight {v.weight}, {v.sessions} sessions)", "uptime": "-", "models": "-",
             "ready_models": [], "endpoint": v.said or "-", "serving": True} for v in views]


def host_status(name: str, data: dict, *, previous: bool = False) -> list[dict[str, Any]]:
    """The rows of one host (:func:`host_rows` of :func:`tritonfleet.access.health.read_host`); a load
    balancer's are its view of the backends (:func:`balancer_rows`)."""
    if is_balancer(data):
        return balancer_rows(name, data)
    return host_rows(data, read_host(name, data, previous=previous, watchdog=True, pull=True), previous=previous)


def fleet_status(inventory: str | Path, *, previous: bool = False, exporters: bool = False,
                 prometheus: str | None = None) -> list[dict[str, Any]]:
    """Rows of :func:`host_status` for every host; with ``exporters`` each row also has ``exporters`` (the
    host's exporters up or not, :func:`tritonfleet.face.monitoring.exporters_status`)."""
    hosts = load_inventory(inventory)
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = pool.map(lambda hd: host_status(*hd, previous=previous), hosts)
    rows = [row for rows in results for row in rows]
    if exporters:
        from tritonfleet.face.monitoring import exporters_cell, exporters_status

        failed: str | None = None
        try:
            state = exporters_status(inventory, prometheus)
        except (OSError, ValueError) as exc:  # Prometheus not answering: said in every row
            logger.debug("exporters: %s: %s", prometheus or "probing from here", exc)
            state, failed = {}, f"prometheus: {str(exc).splitlines()[0][:60]}"
        for r in rows:
            r["exporters"] = failed or exporters_cell(state.get(r["host"], {}))
    return rows


def print_status(rows: list[dict[str, Any]], *, previous: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    cols = COLUMNS + (["previous"] if previous else []) + (["watchdog"] if any("watchdog" in r for r in rows) else []) \
        + (["release"] if any("release" in r for r in rows) else []) \
        + (["exporters"] if rows and "exporters" in rows[0] else [])
    table = Table(title="tritonfleet status")
    for col in cols:
        table.add_column(col.replace("_", " "))
    for r in rows:
        if "error" in r:
            table.add_row(r["host"], "[red]" + r["error"] + "[/red]", *[""] * (len(cols) - 2))
        else:
            table.add_row(*[str(r.get(c, "-")) for c in cols])
    Console(width=None if sys.stdout.isatty() else 200).print(table)
