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


def _triton(session: Session, addr: str, port: str, header: str) -> tuple[bool, list[str] | None]:
    """Ask the server itself, from its host, at the address clients use (not loopback: that goes through
    docker-proxy, which is gone while the Docker daemon is down): is it ready, which models are READY."""
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


def _previous(session: Session, name: str) -> str:
    rc, out, _ = session.run(f"cat {shlex.quote(hc.record_path(name))}", root=True)
    record = hc.ServerRecord.from_json(out) if rc == 0 else None
    if record is None or record.previous is None:
        return "-"
    return f"{record.previous.image} (spec {record.previous.spec})"


def _expected(name: str, data: dict) -> dict[str, int]:
    """Servers the inventory places on the host: name -> HTTP port (empty when the data does not say)."""
    from roles import all_roles
    from tritonfleet.config import ConfigError, load_host_config

    if not data.get("instance_type"):
        return {}
    try:
        cfg = load_host_config(name, data, all_roles())
    except ConfigError:
        return {}
    return {p.name: p.http_port for p in cfg.triton.placements}


def server_row(name: str, data: dict, server: str, c: dict | None, docker_error: str | None, port: str,
               serving: bool, ready: list[str] | None) -> dict[str, Any]:
    """A table row from what Docker says of the container (``c``, :func:`hostcontract.container_summary`;
    None when Docker has none or does not answer) and what Triton answered."""
    labels = c["labels"] if c else {}
    if c is not None:
        state = "restarting" if c["restarting"] else c["status"]
        if c["restart_count"]:
            state += f" ({c['restart_count']} restarts)"
    elif docker_error:
        state = f"docker not answering ({docker_error[:60]})"
    else:
        state = f"missing (expected {server})"
    return {
        "host": name, "server": server, "image": c["image"] if c else "?",
        "devices": (",".join(d.removeprefix("/dev/") for d in c["devices"]) or labels.get(hc.LABEL_DEVICES)
                    or "-") if c else "?",
        "cores": labels.get(hc.LABEL_CORES) or "-", "state": state,
        "uptime": _uptime(c["started_at"], c["running"]) if c else "-",
        "ready_models": ", ".join(ready) if ready else ("-" if serving else "not answering"),
        "endpoint": _endpoint(data, labels) if labels else f"http://{data.get('ssh_hostname', name)}:{port}",
        "serving": serving and (c is None or not c["restarting"]),
    }


def host_status(name: str, data: dict, *, previous: bool = False) -> list[dict[str, Any]]:
    """One row per Triton server on the host (the ones Docker runs and the ones the inventory places
    there), or one row saying why there is none. Docker and Triton are both asked: a server can serve
    while the Docker daemon is down (live-restore), or run without serving."""
    expected = _expected(name, data)
    try:
        session = connect(name, data)
    except HostUnreachable as exc:
        return [{"host": name, "error": str(exc), "serving": False}]
    try:
        header = f"{data.get('triton_repository_header', hc.REPOSITORY_HEADER)}: {data.get('triton_repository_secret') or ''}"
        docker_error = None
        try:
            client = session.docker()
            containers = {hc.container_summary(c.attrs)["labels"].get(hc.LABEL_SERVER) or c.name:
                          hc.container_summary(c.attrs) for c in
                          client.containers.list(all=True, filters={"label": f"{hc.LABEL_ROLE}={hc.ROLE_TRITON}"})}
        except Exception as exc:  # noqa: BLE001 - any Docker failure is shown in the table
            containers = {}
            docker_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        rows = []
        for server in dict.fromkeys([*expected, *containers]):
            c = containers.get(server)
            labels = c["labels"] if c else {}
            bind, _, port = labels.get(hc.LABEL_ENDPOINT, "").rpartition(":")
            port = port or str(expected.get(server, 8000))
            addr = bind if bind not in ("", "0.0.0.0", "::") else data.get("ssh_hostname", "127.0.0.1")
            serving, ready = _triton(session, addr, port, header)
            row = server_row(name, data, server, c, docker_error, port, serving, ready)
            if previous:
                row["previous"] = _previous(session, server)
            rows.append(row)
        return rows or [{"host": name, "error": f"no Triton servers{' (docker: ' + docker_error + ')' if docker_error else ''}",
                         "serving": False}]
    finally:
        session.close()


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

        try:
            state = exporters_status(inventory, prometheus)
        except (OSError, ValueError) as exc:  # Prometheus not answering: said in every row
            state, failed = {}, f"prometheus: {str(exc).splitlines()[0][:60]}"
        else:
            failed = None
        for r in rows:
            r["exporters"] = failed or exporters_cell(state.get(r["host"], {}))
    return rows


def print_status(rows: list[dict[str, Any]], *, previous: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    cols = COLUMNS + (["previous"] if previous else []) + (["exporters"] if rows and "exporters" in rows[0] else [])
    table = Table(title="tritonfleet status")
    for col in cols:
        table.add_column(col.replace("_", " "))
    for r in rows:
        if "error" in r:
            table.add_row(r["host"], "[red]" + r["error"] + "[/red]", *[""] * (len(cols) - 2))
        else:
            table.add_row(*[str(r[c]) for c in cols])
    Console(width=None if sys.stdout.isatty() else 200).print(table)
