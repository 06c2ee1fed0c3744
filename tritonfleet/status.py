"""``tritonfleet status``: a table per host and Triton server (image, devices, cores, state, uptime,
ready models, endpoint), read over SSH (paramiko, strict host keys) from the hosts of an inventory."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import runpy
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import paramiko

_PROBE = r"""
ids=$(docker ps -aq --filter label=com.tritonfleet.role=triton 2>/dev/null)
echo '@inspect'; [ -z "$ids" ] && echo '[]' || docker inspect $ids
for c in $(docker ps --filter label=com.tritonfleet.role=triton --format '{{.Names}}' 2>/dev/null); do
  port=$(docker inspect -f '{{(index (index .NetworkSettings.Ports "8000/tcp") 0).HostPort}}' $c 2>/dev/null)
  echo "@index $c"; curl -fsS -m 3 -X POST -H @- http://127.0.0.1:${port:-8000}/v2/repository/index <<<"$HDR" || echo '[]'
  echo
done
"""


def _group_data(path: Path, group: str) -> dict:
    f = path.parent / "group_data" / f"{group}.py"
    if not f.exists():
        return {}
    return {k: v for k, v in runpy.run_path(str(f)).items() if not k.startswith("_")}


def load_inventory(path: str | Path) -> list[tuple[str, dict]]:
    """Hosts and their data from a pyinfra inventory file, merged as pyinfra does: group_data/all.py <
    group_data/<group>.py (the file's stem and each module-level list are groups) < host data.

    (pyinfra_cli's own loader would monkey-patch the whole process with gevent on import.)
    """
    path = Path(path)
    groups: dict[str, tuple[list, dict]] = {}
    for name, value in runpy.run_path(str(path)).items():
        if name.startswith("_") or not isinstance(value, (list, tuple)):
            continue
        members, data = value, {}
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
            members, data = value
        groups[name] = (list(members), data)
    hosts: dict[str, dict] = {}
    member_of: dict[str, list[str]] = {}
    for group, (members, _data) in groups.items():
        for entry in members:
            if isinstance(entry, str):
                hname, hdata = entry, {}
            elif isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], dict):
                hname, hdata = entry
            else:
                continue
            hosts.setdefault(hname, {}).update(hdata)
            member_of.setdefault(hname, []).append(group)
    out = []
    for hname, hdata in hosts.items():
        merged = _group_data(path, "all")
        for group in [path.stem, *member_of[hname]]:
            merged.update(_group_data(path, group))
            merged.update(groups.get(group, ([], {}))[1])
        out.append((hname, {**merged, **hdata}))
    return out


def _connect(name: str, data: dict) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_system_host_keys()
    if data.get("ssh_known_hosts_file"):
        client.load_host_keys(data["ssh_known_hosts_file"])
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(data.get("ssh_hostname", name), port=int(data.get("ssh_port", 22)),
                   username=data.get("ssh_user") or getpass.getuser(), key_filename=data.get("ssh_key"),
                   timeout=10, look_for_keys=not data.get("ssh_key"), allow_agent=True)
    return client


def _uptime(started: str, running: bool) -> str:
    if not running or not started or started.startswith("0001"):
        return "-"
    when = dt.datetime.fromisoformat(started[:26].rstrip("Z") + "+00:00" if "." in started else
                                     started.replace("Z", "+00:00"))
    secs = int((dt.datetime.now(dt.timezone.utc) - when).total_seconds())
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def host_status(name: str, data: dict) -> list[dict[str, Any]]:
    """One row per Triton container on the host (or one error row)."""
    try:
        client = _connect(name, data)
    except Exception as exc:  # noqa: BLE001 - shown in the table
        return [{"host": name, "error": f"ssh: {exc}"}]
    try:
        header = f"{data.get('triton_repository_header', 'x-tritonfleet-repository-key')}: " \
                 f"{data.get('triton_repository_secret') or ''}"
        sudo = "sudo -n --preserve-env=HDR " if data.get("_sudo") else ""  # docker.sock is root's
        stdin, stdout, _ = client.exec_command(f'export HDR="$(cat)"; {sudo}bash -c ' + shlex.quote(_PROBE),
                                               timeout=30)
        stdin.write(header)
        stdin.channel.shutdown_write()
        out = stdout.read().decode()
    finally:
        client.close()
    sections: dict[str, str] = {}
    key = ""
    for line in out.splitlines():
        if line.startswith("@"):
            key = line[1:].strip()
            sections[key] = ""
        else:
            sections[key] = sections.get(key, "") + line + "\n"
    rows = []
    try:
        containers = json.loads(sections.get("inspect", "[]") or "[]")
    except ValueError:
        return [{"host": name, "error": "docker inspect failed (is Docker installed?)"}]
    for c in containers:
        labels = c["Config"].get("Labels") or {}
        cname = c["Name"].lstrip("/")
        try:
            index = json.loads(sections.get(f"index {cname}", "[]") or "[]")
        except ValueError:
            index = []
        ready = sorted(m["name"] for m in index if m.get("state") == "READY")
        devices = [d["PathOnHost"].removeprefix("/dev/") for d in c["HostConfig"].get("Devices") or []]
        rows.append({
            "host": name, "server": cname, "image": c["Config"]["Image"],
            "devices": ",".join(devices) or labels.get("com.tritonfleet.devices", "") or "-",
            "cores": labels.get("com.tritonfleet.cores") or "-",
            "state": c["State"]["Status"], "uptime": _uptime(c["State"].get("StartedAt", ""), c["State"]["Running"]),
            "ready_models": ", ".join(ready) or "-",
            "endpoint": _endpoint(data, labels),
        })
    return rows or [{"host": name, "error": "no Triton servers"}]


def _endpoint(data: dict, labels: dict) -> str:
    ep = labels.get("com.tritonfleet.endpoint", "")
    addr, _, port = ep.rpartition(":")
    if addr in ("0.0.0.0", "::", ""):
        addr = data.get("ssh_hostname", "?")
    return f"http://{addr}:{port}" if port else "-"


def fleet_status(inventory: str | Path) -> list[dict[str, Any]]:
    hosts = load_inventory(inventory)
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = pool.map(lambda hd: host_status(*hd), hosts)
    return [row for rows in results for row in rows]


def print_status(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tritonfleet status")
    cols = ["host", "server", "image", "devices", "cores", "state", "uptime", "ready_models", "endpoint"]
    for col in cols:
        table.add_column(col.replace("_", " "))
    for r in rows:
        if "error" in r:
            table.add_row(r["host"], "[red]" + r["error"] + "[/red]", *[""] * (len(cols) - 2))
        else:
            table.add_row(*[str(r[c]) for c in cols])
    Console(width=None if sys.stdout.isatty() else 200).print(table)
