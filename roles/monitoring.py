"""Prometheus exporters on every host (README "Monitoring"):

- the node exporter, from the platform's package (``prometheus-node-exporter`` on Debian and Ubuntu); on a
  platform without one (Amazon Linux 2023) the upstream release tarball named by ``monitoring_node_exporter_url``
  and checked against ``monitoring_node_exporter_sha256``. Its textfile collector reads
  ``monitoring_textfile_dir``, the directory scheduled QA writes its metrics into;
- on Neuron hosts, ``neuron-monitor`` piped into AWS's ``neuron-monitor-prometheus.py`` (both from
  ``aws-neuronx-tools``) as a systemd service, with a config naming the metric groups; the exporter runs
  with the host agent's Python, which carries the ``prometheus_client`` it needs;
- on GPU hosts, NVIDIA's ``dcgm-exporter`` container with the host's GPUs (``--gpus "device=0,…"``, from the
  instance type), without CAP_SYS_ADMIN unless ``monitoring_dcgm_profiling`` asks for the DCP metrics.

Scrape targets for Prometheus come from the inventory: ``tritonfleet monitoring targets``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from typing import Literal

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server

from roles import operations as ops
from roles import platform
from roles.agent import install_for
from roles.context import config_for
from roles.preflight import PreflightError
from tritonfleet import hostcontract as hc
from tritonfleet.config import (
    MISSING,
    FieldProblem,
    HostConfig,
    Role,
    RoleSettings,
    checked,
    image_reference,
    matching,
)
from tritonfleet.placement import IPAddress
from tritonfleet.templating import render

NEURON_RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "neuron_runtime_vcpu_usage", "execution_stats")
NEURON_SYSTEM_GROUPS = ("neuron_hw_counters", "vcpu_usage", "memory_info")
NEURON_BIN = "/opt/aws/neuron/bin"


class Settings(RoleSettings):
    with_serve: bool = Field(False, description=(
        "deploys/serve.py also runs this role (otherwise: deploys/monitoring.py, make monitoring)."))
    bind_address: IPAddress = Field("0.0.0.0", description=(
        "Address the node exporter and the DCGM exporter listen on (0.0.0.0: every interface; allow the "
        "ports only from Prometheus in the security group, README \"Monitoring\")."))
    textfile_dir: str = Field("/var/lib/prometheus/node-exporter", description=(
        "node exporter textfile-collector directory (*.prom files; scheduled QA writes tritonfleet_qa.prom here)."))
    node_exporter: bool = Field(True, description="Run the node exporter.")
    node_exporter_port: int = Field(9100, ge=1, le=65535, description="Node exporter port.")
    node_exporter_url: str | None = Field(None, description=(
        "Platforms without a node exporter package (Amazon Linux 2023): the release tarball "
        "(node_exporter-<v>.linux-<arch>.tar.gz) to install; None on those platforms is a preflight error."))
    node_exporter_sha256: str | None = Field(None, description="sha256 of that tarball (checked before use).")
    neuron_exporter: bool = Field(True, description=(
        "Neuron hosts: neuron-monitor | neuron-monitor-prometheus.py as tritonfleet-neuron-monitor.service."))
    neuron_exporter_port: int = Field(9010, ge=1, le=65535, description=(
        "Port of neuron-monitor-prometheus.py (AWS's default 8000 is Triton's HTTP port; the script binds "
        "every interface, it has no address option)."))
    neuron_period: str = Field("5s", description="neuron-monitor report period.")
    neuron_runtime_metrics: list[str] = Field(list(NEURON_RUNTIME_GROUPS), description=(
        "neuron-monitor per-runtime metric groups (neuroncore_counters, memory_used, neuron_runtime_vcpu_usage, "
        "execution_stats)."))
    neuron_system_metrics: list[str] = Field(list(NEURON_SYSTEM_GROUPS), description=(
        "neuron-monitor system metric groups (neuron_hw_counters, vcpu_usage, memory_info)."))
    dcgm_exporter: bool = Field(True, description="GPU hosts: NVIDIA's dcgm-exporter container with the host's GPUs.")
    dcgm_port: int = Field(9400, ge=1, le=65535, description="dcgm-exporter port.")
    dcgm_image: str = Field("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04", description=(
        "dcgm-exporter image."))
    dcgm_image_source: Literal["pull", "archive"] = Field("pull", description=(
        '"pull" (registry) or "archive" (docker load of dcgm_image_archive).'))
    dcgm_image_archive: str | None = Field(None, description='`docker save` tarball on the host (source "archive").')
    dcgm_profiling: bool = Field(False, description=(
        "DCP profiling metrics (tensor/SM activity): the container gets CAP_SYS_ADMIN, which it needs for them."))
    scrape_address: str | None = Field(None, description=(
        "Address Prometheus reaches this host at (targets); None: ec2_private_ip when the inventory has it, else "
        "ssh_hostname, else the host name."))
    fleet: str | None = Field(None, description=(
        "fleet label of this host's scrape targets; None: the EC2 inventory's fleet, else the inventory's name."))

    _period = field_validator("neuron_period")(matching(r"^\d+(ms|s|m)$", "expected a period like 5s"))
    _dir = field_validator("textfile_dir")(matching(r"^/[\w./-]+$", "expected an absolute directory"))
    # URL characters only (RFC 3986's unreserved, "/" and "%"): nothing a shell reads as syntax
    _url = field_validator("node_exporter_url")(matching(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9._~/%+-]+\.tar\.gz$",
                                                         "expected an http(s) URL of a .tar.gz"))
    _sha = field_validator("node_exporter_sha256")(matching(r"^[0-9a-f]{64}$", "expected 64 lowercase hex digits"))
    _image = field_validator("dcgm_image")(lambda v: image_reference(v))
    _archive = field_validator("dcgm_image_archive")(matching(r"^/\S+$", "expected an absolute path"))
    _scrape = field_validator("scrape_address")(matching(r"^[\w.:-]{1,253}$", "expected a host name or address"))
    _fleet = field_validator("fleet")(matching(r"^[\w.-]{1,64}$", "expected a short name"))

    @field_validator("neuron_runtime_metrics", "neuron_system_metrics")
    @classmethod
    def _groups(cls, v: list[str], info) -> list[str]:
        known = NEURON_RUNTIME_GROUPS if info.field_name == "neuron_runtime_metrics" else NEURON_SYSTEM_GROUPS
        bad = [g for g in v if g not in known]
        if bad:
            raise ValueError(f"unknown metric group {bad[0]!r} (known: {', '.join(known)})")
        if len(set(v)) != len(v):
            raise ValueError("a metric group is named twice")
        return v


def exporter_ports(cfg: HostConfig) -> dict[str, int]:
    """``{job: port}`` of the exporters this host runs (node, neuron, dcgm)."""
    m: Settings = cfg.monitoring
    ports = {}
    if m.node_exporter:
        ports["node"] = m.node_exporter_port
    if m.neuron_exporter and cfg.instance.is_neuron:
        ports["neuron"] = m.neuron_exporter_port
    if m.dcgm_exporter and cfg.instance.is_gpu:
        ports["dcgm"] = m.dcgm_port
    return ports


def _checks(cfg: HostConfig) -> None:
    m: Settings = cfg.monitoring
    if bool(m.node_exporter_url) != bool(m.node_exporter_sha256):
        field = "monitoring_node_exporter_sha256" if m.node_exporter_url else "monitoring_node_exporter_url"
        raise FieldProblem(field, MISSING, "monitoring_node_exporter_url and _sha256 go together")
    if m.dcgm_image_source == "archive" and not m.dcgm_image_archive and m.dcgm_exporter and cfg.instance.is_gpu:
        raise FieldProblem("monitoring_dcgm_image_archive", MISSING,
                           "required when monitoring_dcgm_image_source is 'archive'")
    if m.neuron_exporter and cfg.instance.is_neuron and not cfg.neuron.install_tools:
        raise FieldProblem("monitoring_neuron_exporter", True,
                           "needs aws-neuronx-tools (neuron_install_tools: true) or monitoring_neuron_exporter: false")
    taken: dict[int, str] = {}
    for p in cfg.triton.placements:
        for key, port in p.ports.items():
            taken[port] = f"Triton server {p.name}'s {key} port"
    seen: dict[int, str] = {}
    for job, port in exporter_ports(cfg).items():
        field = {"node": "monitoring_node_exporter_port", "neuron": "monitoring_neuron_exporter_port",
                 "dcgm": "monitoring_dcgm_port"}[job]
        clash = taken.get(port) or seen.get(port)
        if clash:
            raise FieldProblem(field, port, f"is already {clash}")
        seen[port] = field


def _platform_problem(cfg: HostConfig) -> FieldProblem | None:
    """What this host's platform cannot do as configured (checked when the role's deploy is built: for all
    hosts before any operation runs, and only in the runs that include the role)."""
    m: Settings = cfg.monitoring
    if m.node_exporter and cfg.platform and not cfg.platform.packaged("node-exporter") and not m.node_exporter_url:
        return FieldProblem("monitoring_node_exporter_url", MISSING,
                            f"{cfg.platform.name} has no node exporter package: set monitoring_node_exporter_url and "
                            "monitoring_node_exporter_sha256 (a release tarball) or monitoring_node_exporter: false")
    return None


ROLE = Role("monitoring", Settings, "Prometheus exporters: node exporter, Neuron monitor, DCGM exporter",
            checks=_checks, order=85)

NODE_UNIT = "prometheus-node-exporter.service"
NODE_DROPIN = f"/etc/systemd/system/{NODE_UNIT}.d/tritonfleet.conf"
NODE_UNIT_FILE = f"/etc/systemd/system/{NODE_UNIT}"  # platforms without the package
NODE_BINARY = "/usr/local/bin/node_exporter"
NEURON_UNIT = "tritonfleet-neuron-monitor.service"
NEURON_UNIT_FILE = f"/etc/systemd/system/{NEURON_UNIT}"
NEURON_CONFIG = "/etc/tritonfleet/neuron-monitor.json"
DCGM_CONTAINER = "tritonfleet-dcgm-exporter"


def neuron_monitor_config(m: Settings) -> dict:
    """neuron-monitor's config (its documented format: runtimes filtered by tag, then system metrics)."""
    return {
        "period": m.neuron_period,
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in m.neuron_runtime_metrics]}],
        "system_metrics": [{"type": g} for g in m.neuron_system_metrics],
    }


def dcgm_run_args(cfg: HostConfig) -> list[str]:
    """``docker run`` arguments of the DCGM exporter (everything but the image)."""
    m: Settings = cfg.monitoring
    address = f"[{m.bind_address}]" if ":" in m.bind_address else m.bind_address
    gpus = ",".join(str(i) for i in range(cfg.instance.device_count))  # the GPUs the instance type has
    args = ["--restart", "unless-stopped", "--gpus", f'"device={gpus}"', "-p", f"{address}:{m.dcgm_port}:9400",
            "--label", f"{hc.LABEL_ROLE}=dcgm-exporter"]
    if m.dcgm_profiling:
        args += ["--cap-add", "SYS_ADMIN"]
    return args


def _node_exporter(cfg: HostConfig) -> None:
    m: Settings = cfg.monitoring
    address = f"[{m.bind_address}]" if ":" in m.bind_address else m.bind_address
    args = [f"--web.listen-address={address}:{m.node_exporter_port}", f"--collector.textfile.directory={m.textfile_dir}"]
    files.directory(name="node exporter textfile directory", path=m.textfile_dir, mode="755")
    if platform.current().packaged("node-exporter"):
        platform.install("node exporter package", ["node-exporter"])
        binary = "/usr/bin/prometheus-node-exporter"
        unit = ops.files.managed(name="node exporter listen address and textfile directory", files={
            NODE_DROPIN: render("monitoring/node-exporter-dropin.conf.j2", binary=binary, args=args)})
    else:
        url = checked(m.node_exporter_url, "monitoring_node_exporter_url")
        tarball = posixpath.join(hc.OPT_DIR, posixpath.basename(url))
        fetched = files.download(name="node exporter release (sha256 checked)", src=url,
                                 dest=tarball, sha256sum=m.node_exporter_sha256)
        extracted = server.shell(name="node exporter binary from the release", _if=fetched.did_change, commands=[
            f"tar -xzf {shlex.quote(tarball)} -C /usr/local/bin --strip-components=1 --wildcards '*/node_exporter'"])
        unit = ops.files.managed(name="node exporter unit", files={
            NODE_UNIT_FILE: render("monitoring/node-exporter.service.j2", binary=NODE_BINARY, args=args)})
        _running("node exporter", NODE_UNIT, unit, extracted)
        return
    _running("node exporter", NODE_UNIT, unit)


def _running(what: str, unit_name: str, unit, *more) -> None:
    """The unit re-read and restarted when its file (``unit``) or anything in ``more`` changed, then running and
    enabled."""
    changed = [unit, *more]
    ops.qa.daemon_reload(name=f"systemd reads the {what}'s unit", _if=unit.did_change)
    ops.services.units(name=f"{what} restarted with its new settings", units=[unit_name], restarted=True,
                       _if=lambda: any(op.did_change() for op in changed))
    ops.services.units(name=f"{what} running and enabled", units=[unit_name], running=True, enabled=True)


def _neuron_exporter(cfg: HostConfig) -> None:
    m: Settings = cfg.monitoring
    install_for(cfg, "monitoring_neuron_exporter", True)  # its Python runs neuron-monitor-prometheus.py
    unit = ops.files.managed(name="neuron-monitor config and service", files={
        NEURON_CONFIG: json.dumps(neuron_monitor_config(m), indent=2) + "\n",
        NEURON_UNIT_FILE: render("monitoring/neuron-monitor.service.j2", bin=NEURON_BIN, config=NEURON_CONFIG,
                                     python=f"{hc.AGENT_VENV}/bin/python", port=m.neuron_exporter_port),
    })
    _running("Neuron monitor", NEURON_UNIT, unit)


def _dcgm_exporter(cfg: HostConfig) -> None:
    m: Settings = cfg.monitoring
    ops.docker.image(name=f"DCGM exporter image {m.dcgm_image}", image=m.dcgm_image,
                     source=m.dcgm_image_source, archive=m.dcgm_image_archive)
    args = dcgm_run_args(cfg)
    spec = hashlib.sha256(json.dumps([m.dcgm_image, args]).encode()).hexdigest()[:16]
    ops.monitoring.exporter_container(name="DCGM exporter container", container=DCGM_CONTAINER,
                                      image=m.dcgm_image, run_args=args, spec_hash=spec)


@deploy("Monitoring")
def monitoring() -> None:
    cfg = config_for()
    problem = _platform_problem(cfg)
    if problem is not None:  # operations are collected for every host before any runs: nothing changed yet
        raise PreflightError(f"preflight failed, nothing was changed:\n  {host.name}: {problem.field}: "
                             f"{problem.message}")
    m: Settings = cfg.monitoring
    wanted = exporter_ports(cfg)
    if m.node_exporter:
        _node_exporter(cfg)
    if "neuron" in wanted:
        _neuron_exporter(cfg)
    elif cfg.instance.is_neuron:
        ops.services.units(name="Neuron monitor stopped (monitoring_neuron_exporter is off)",
                           units=[NEURON_UNIT], running=False, enabled=False)
        ops.qa.remove_paths(name="Neuron monitor unit and config removed",
                            paths=[NEURON_UNIT_FILE, NEURON_CONFIG])
    if "dcgm" in wanted:
        _dcgm_exporter(cfg)
    elif cfg.instance.is_gpu:
        ops.monitoring.exporter_container(
            name="DCGM exporter container removed (monitoring_dcgm_exporter is off)", container=DCGM_CONTAINER,
            present=False)
    if not wanted:
        host.noop("no exporter is enabled for this host")


@deploy("Monitoring (with serve)")
def monitoring_with_serve() -> None:
    """The role inside deploys/serve.py, when ``monitoring_with_serve`` is set."""
    if config_for().monitoring.with_serve:
        monitoring()
    else:
        host.noop("monitoring_with_serve is off (deploys/monitoring.py installs the exporters)")
