"""``tritonfleet status``: a row per host and Triton server (image, devices, cores, state, uptime, ready
models, endpoint), read from each host's Docker engine (Docker API over SSH) and from Triton itself
(its repository index, asked on the host with the restricted-API header), plus what a rollback would
return to (the host record's ``previous``)."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tritonfleet import hostcontract as hc
from tritonfleet.access.inventory import load_inventory
from tritonfleet.access.ssh import HostUnreachable, Session, connect

COLUMNS = ["host", "server", "image", "devices", "cores", "state", "uptime", "ready_models", "endpoint"]


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


def _ready_models(session: Session, port: str, header: str) -> list[str] | None:
    """READY models from the server's repository index (None: the server does not answer)."""
    rc, out, _ = session.run(f"curl -fsS -m 3 -X POST -H @- http://127.0.0.1:{shlex.quote(port)}/v2/repository/index",
                             stdin=header)
    if rc != 0:
        return None
    try:
        return sorted(m["name"] for m in json.loads(out or "[]") if m.get("state") == "READY")
    except (ValueError, TypeError, KeyError):
        return None


def _previous(session: Session, name: str) -> str:
    rc, out, _ = session.run(f"cat {shlex.quote(hc.record_path(name))}", root=True)
    record = hc.ServerRecord.from_json(out) if rc == 0 else None
    if record is None or record.previous is None:
        return "-"
    return f"{record.previous.image} (spec {record.previous.spec})"


def host_status(name: str, data: dict, *, previous: bool = False) -> list[dict[str, Any]]:
    """One row per Triton container on the host, or one row saying why there is none."""
    try:
        session = connect(name, data)
    except HostUnreachable as exc:
        return [{"host": name, "error": str(exc), "serving": False}]
    try:
        header = f"{data.get('triton_repository_header', hc.REPOSITORY_HEADER)}: {data.get('triton_repository_secret') or ''}"
        try:
            client = session.docker()
            containers = [hc.container_summary(c.attrs) for c in
                          client.containers.list(all=True, filters={"label": f"{hc.LABEL_ROLE}={hc.ROLE_TRITON}"})]
        except Exception as exc:  # noqa: BLE001 - any Docker failure is shown in the table
            return [{"host": name, "error": f"docker: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                     "serving": False}]
        rows = []
        for c in containers:
            labels = c["labels"]
            port = labels.get(hc.LABEL_ENDPOINT, ":8000").rpartition(":")[2]
            ready = _ready_models(session, port, header) if c["running"] else None
            state = "restarting" if c["restarting"] else c["status"]
            if c["restart_count"]:
                state += f" ({c['restart_count']} restarts)"
            row = {
                "host": name, "server": labels.get(hc.LABEL_SERVER) or "?", "image": c["image"],
                "devices": ",".join(d.removeprefix("/dev/") for d in c["devices"]) or labels.get(hc.LABEL_DEVICES) or "-",
                "cores": labels.get(hc.LABEL_CORES) or "-", "state": state,
                "uptime": _uptime(c["started_at"], c["running"]),
                "ready_models": ", ".join(ready) if ready else ("-" if ready is not None else "not answering"),
                "endpoint": _endpoint(data, labels),
                "serving": bool(c["running"] and not c["restarting"] and ready is not None),
            }
            if previous:
                row["previous"] = _previous(session, row["server"])
            rows.append(row)
        return rows or [{"host": name, "error": "no Triton servers", "serving": False}]
    finally:
        session.close()


def fleet_status(inventory: str | Path, *, previous: bool = False) -> list[dict[str, Any]]:
    hosts = load_inventory(inventory)
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = pool.map(lambda hd: host_status(*hd, previous=previous), hosts)
    return [row for rows in results for row in rows]


def print_status(rows: list[dict[str, Any]], *, previous: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    cols = COLUMNS + (["previous"] if previous else [])
    table = Table(title="tritonfleet status")
    for col in cols:
        table.add_column(col.replace("_", " "))
    for r in rows:
        if "error" in r:
            table.add_row(r["host"], "[red]" + r["error"] + "[/red]", *[""] * (len(cols) - 2))
        else:
            table.add_row(*[str(r[c]) for c in cols])
    Console(width=None if sys.stdout.isatty() else 200).print(table)
