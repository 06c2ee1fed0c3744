"""Prometheus scrape targets from an inventory, and whether each host's exporters are up.

    tritonfleet monitoring targets --inventory inventories/inf2.py --out monitoring/ [--scrape-config]

``targets`` writes one ``file_sd_configs`` file per exporter kind (``<out>/<job>.json``: ``triton``, ``node``,
``neuron``, ``dcgm``, and ``haproxy`` for the load balancers of the ``lb`` group: HAProxy's built-in exporter on
``lb_prometheus_port``), one target group per host (per server for Triton), labelled ``host``,
``instance_type``, ``family``, ``fleet`` (and ``server`` for Triton). Prometheus re-reads the files when
they change, so re-running after an inventory change is enough. ``--scrape-config`` also writes a
``prometheus.yml`` whose jobs read those files (for a Prometheus on the controller side).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import click

JOBS = ("triton", "node", "neuron", "dcgm", "haproxy")

logger = logging.getLogger(__name__)


class TargetsError(ValueError):
    """Bad inventory data for targets (one line naming host and field)."""


@dataclass(frozen=True)
class Target:
    job: str
    address: str  # host:port
    labels: dict[str, str]


#: Exporter jobs that listen on ``monitoring_bind_address`` (and are scraped there when it is one address).
BOUND_JOBS = ("node", "dcgm")


def _host_address(name: str, data: dict, cfg) -> str:
    return cfg.monitoring.scrape_address or data.get("ec2_private_ip") or data.get("ssh_hostname") or name


def _join(address: str, port: int) -> str:
    try:
        if ipaddress.ip_address(address).version == 6:
            return f"[{address}]:{port}"
    except ValueError:
        pass
    return f"{address}:{port}"


def host_targets(name: str, data: dict, *, default_fleet: str, balancer: bool = False) -> list[Target]:
    """The scrape targets of one host, from its validated data (no connection to the host); ``balancer``: the
    host is in the ``lb`` group (HAProxy's exporter is scraped there)."""
    from roles import all_roles
    from roles.monitoring import exporter_ports
    from tritonfleet.config import ConfigError, load_host_config

    if not data.get("instance_type"):
        raise TargetsError(f"{name}: instance_type: needed for scrape targets (the inventory does not say it)")
    try:
        cfg = load_host_config(name, data, all_roles())
    except ConfigError as exc:
        raise TargetsError(str(exc)) from None
    address = _host_address(name, data, cfg)
    base = {"host": name, "instance_type": cfg.instance.name, "family": cfg.instance.family,
            "fleet": cfg.monitoring.fleet or data.get("ec2_fleet") or default_fleet}
    out = []
    if cfg.triton.metrics:
        for p in cfg.triton.placements:
            bind = p.bind_address
            where = address if ipaddress.ip_address(bind).is_unspecified else bind
            out.append(Target("triton", _join(where, p.metrics_port), {**base, "server": p.name}))
    bound = cfg.monitoring.bind_address
    for job, port in exporter_ports(cfg).items():
        # node and DCGM exporters listen on monitoring_bind_address; AWS's Neuron exporter on every address
        where = bound if job in BOUND_JOBS and not ipaddress.ip_address(bound).is_unspecified else address
        out.append(Target(job, _join(where, port), dict(base)))
    if balancer:  # HAProxy's exporter listens on lb_bind_address
        lb_bind = cfg.lb.bind_address
        where = address if ipaddress.ip_address(lb_bind).is_unspecified else lb_bind
        out.append(Target("haproxy", _join(where, cfg.lb.prometheus_port), dict(base)))
    return out


def inventory_targets(inventory: str | Path) -> list[Target]:
    from roles.preflight import LB_GROUP
    from tritonfleet.access.inventory import load_inventory_groups

    hosts, members = load_inventory_groups(inventory)
    balancers = set(members.get(LB_GROUP, []))
    fleet = Path(inventory).stem
    return [t for name, data in sorted(hosts)
            for t in host_targets(name, data, default_fleet=fleet, balancer=name in balancers)]


def file_sd(targets: list[Target], job: str) -> list[dict]:
    """Prometheus ``file_sd_configs`` content for one job: a target group per host (per server)."""
    return [{"targets": [t.address], "labels": t.labels} for t in targets if t.job == job]


def _write(path: Path, text: str) -> bool:
    """Write atomically (Prometheus may read at any time); False when the content is unchanged."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True


def scrape_config(out: Path, *, interval: str = "15s") -> str:
    """A ``prometheus.yml`` whose jobs read the target files in ``out``."""
    import yaml

    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{"job_name": job, "file_sd_configs": [{"files": [str(out.resolve() / f"{job}.json")],
                                                                  "refresh_interval": "30s"}]}
                           for job in JOBS],
    }
    return "# Written by `tritonfleet monitoring targets --scrape-config` (re-run it after inventory changes).\n" \
        + yaml.safe_dump(config, sort_keys=False)


def write_targets(inventory: str | Path, out: str | Path, *, with_config: bool = False,
                  interval: str = "15s") -> dict[str, int]:
    """Write ``<out>/<job>.json`` for every job (empty lists included, so Prometheus drops stale hosts) and,
    with ``with_config``, ``<out>/prometheus.yml``. Returns ``{job: target count}``."""
    targets = inventory_targets(inventory)
    out = Path(out)
    counts = {}
    for job in JOBS:
        groups = file_sd(targets, job)
        _write(out / f"{job}.json", json.dumps(groups, indent=2, sort_keys=True) + "\n")
        counts[job] = len(groups)
    if with_config:
        _write(out / "prometheus.yml", scrape_config(out, interval=interval))
    return counts


# -- exporters up? ------------------------------------------------------------------------------------------------


def _probe(address: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError, ValueError) as exc:
        logger.debug("http://%s/metrics: %s", address, exc)
        return False


def prometheus_up(prometheus: str, timeout: float = 5.0) -> dict[tuple[str, str], bool]:
    """``{(host, job): up}`` from Prometheus' ``up`` series (a job with several targets on a host, e.g.
    Triton servers, is up when all are)."""
    url = prometheus.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": "up"})
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = json.load(resp)
    out: dict[tuple[str, str], bool] = {}
    for r in body.get("data", {}).get("result", []):
        labels = r.get("metric", {})
        key = (labels.get("host", ""), labels.get("job", ""))
        out[key] = out.get(key, True) and r["value"][1] == "1"
    logger.debug("%s: %d host and job pairs, %d down", prometheus, len(out), sum(not up for up in out.values()))
    return out


def exporters_status(inventory: str | Path, prometheus: str | None = None,
                     timeout: float = 3.0) -> dict[str, dict[str, bool | None]]:
    """``{host: {job: up}}`` for the exporters the inventory gives each host: read from Prometheus when one is
    named (None: Prometheus has no such target), else probed from here (GET /metrics)."""
    from concurrent.futures import ThreadPoolExecutor

    try:
        targets = inventory_targets(inventory)
    except TargetsError:
        return {}
    out: dict[str, dict[str, bool | None]] = {}
    if prometheus:
        up = prometheus_up(prometheus, timeout=timeout)
        for t in targets:
            out.setdefault(t.labels["host"], {})[t.job] = up.get((t.labels["host"], t.job))
        return out
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda t: _probe(t.address, timeout), targets))
    for t, ok in zip(targets, results, strict=True):
        host = out.setdefault(t.labels["host"], {})
        host[t.job] = host.get(t.job, True) and ok
    return out


def exporters_cell(status: dict[str, bool | None]) -> str:
    """``node ✓ neuron ✗ triton ✓`` style text for a status table (``?``: Prometheus does not scrape it)."""
    marks = {True: "up", False: "DOWN", None: "?"}
    return " ".join(f"{job} {marks[status[job]]}" for job in JOBS if job in status) or "-"


# -- CLI ----------------------------------------------------------------------------------------------------------


@click.group()
def monitoring() -> None:
    """Prometheus: scrape targets from an inventory (README "Monitoring")."""


@monitoring.command()
@click.option("--inventory", "-i", envvar="TRITONFLEET_INVENTORY", required=True, help="pyinfra inventory file.")
@click.option("--out", "-o", default="monitoring", show_default=True, type=click.Path(file_okay=False),
              help="Directory for <job>.json (file_sd_configs).")
@click.option("--scrape-config", is_flag=True, help="Also write <out>/prometheus.yml with one job per exporter kind.")
@click.option("--interval", default="15s", show_default=True, help="scrape_interval of that prometheus.yml.")
def targets(inventory: str, out: str, scrape_config: bool, interval: str) -> None:
    """Write Prometheus file_sd_configs targets (triton, node, neuron, dcgm) for every host of INVENTORY."""
    try:
        counts = write_targets(inventory, out, with_config=scrape_config, interval=interval)
    except TargetsError as exc:
        raise click.ClickException(str(exc)) from None
    except SystemExit as exc:  # an inventory that refuses to load (e.g. sandbox not up)
        raise click.ClickException(str(exc)) from None
    except (OSError, SyntaxError) as exc:
        raise click.ClickException(f"cannot read inventory {inventory}: {exc}") from None
    shown = ", ".join(f"{n} {job}" for job, n in counts.items())
    click.echo(f"{out}: {shown} target(s)" + (f"; scrape config {Path(out) / 'prometheus.yml'}" if scrape_config else ""))
