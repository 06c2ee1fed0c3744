"""The host watchdog: ``tritonfleet-watchdog.service``, the host agent's
``watchdog`` command (``tritonfleet/agent/watchrun.py``), on every Triton host where ``watchdog_enabled`` is set.

Every ``watchdog_interval_seconds`` it reads each Triton server (readiness, restart count, memory, models) and
the host (Neuron error counters, NeuronCores held by other processes, GPU Xid and ECC errors) and acts by
``watchdog_policy`` (the conditions and their chains of report, restart, replace, free-cores, with their bounds:
``tritonfleet/agent/watchpolicy.py``). The policy is checked here, in preflight, with the same code the service
reads it with, so a bad one is a one-line error naming its field before anything runs.

What the role writes: the policy (and the drain hook) as ``/etc/tritonfleet/watchdog.json`` (0644, root's), the
unit (hardened, low CPU and I/O priority, ``MemoryMax``), the repository-API header the service reads the
servers' model index with (when the API is restricted), and the textfile directory; then the service is
(re)started and enabled. Off (the default), the role stops the service and removes what it wrote, which on a
host that never had it is one look and changes nothing.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from roles import operations as ops
from roles.agent import install_for
from roles.context import config_for
from roles.facts.files import FileDigests
from roles.models import repository_header
from tritonfleet import hostcontract as hc
from tritonfleet.agent import watchrun
from tritonfleet.agent.watchpolicy import Policy, PolicyError
from tritonfleet.config import DEFAULT_IMDS, HostConfig, Role, RoleSettings, http_url, matching
from tritonfleet.templating import render


class Settings(RoleSettings):
    enabled: bool = Field(False, description=(
        "Run the host watchdog (tritonfleet-watchdog.service) on the Triton hosts; off: stopped and removed."))
    interval_seconds: int = Field(30, ge=5, le=3600, description=(
        "Seconds from one look at the host to the next (each condition's own time thresholds are in the policy)."))
    policy: dict[str, Any] = Field({}, description=(
        "The watchdog policy: conditions -> chains of actions (report, restart, replace, free-cores) and the "
        "thresholds and bounds (tritonfleet/agent/watchpolicy.py); {} = the defaults."))
    drain_command: list[str] | None = Field(None, description=(
        "Load-balancer drain hook run before each restart: an absolute command and its arguments, {server}, "
        "{container} and {port} replaced; None: servers are restarted without a drain."))
    drain_timeout_seconds: int = Field(60, ge=1, le=3600, description="Seconds the drain hook may take.")
    memory_max_mib: int = Field(256, ge=64, le=4096, description="MemoryMax= of the service, in MiB.")
    textfile_dir: str | None = Field(None, description=(
        "node_exporter textfile directory for tritonfleet_watchdog.prom; None: monitoring_textfile_dir."))
    asg_endpoint: str | None = Field(None, description=(
        "Auto Scaling endpoint URL for the replace action's SetInstanceHealth; None = AWS's."))
    asg_region: str | None = Field(None, description=(
        "Region of the host's Auto Scaling group; None: the instance's own (from IMDS)."))
    queue_time_fleet: str | None = Field(None, description=(
        "Publish each Triton server's queue time per request to CloudWatch every minute, dimension fleet=this "
        "(the metric `tritonfleet fleet autoscale` tracks); None: not published."))

    _dir = field_validator("textfile_dir")(matching(r"^/[\w./-]+$", "expected an absolute directory"))
    _endpoint = field_validator("asg_endpoint")(lambda v: http_url(v))
    _region = field_validator("asg_region")(matching(r"^[a-z]{2,}(-[a-z0-9]+)+$", "expected a region name"))
    _fleet = field_validator("queue_time_fleet")(matching(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
                                                          "expected a fleet name (letters, digits, _ . -)"))

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in watchrun.RUNTIME_KEYS:
            if key in v:
                raise ValueError(f"{key}: a setting of its own (watchdog_{key}), not a policy field")
        try:
            Policy.from_data(v)
        except PolicyError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("drain_command")
    @classmethod
    def _drain(cls, v: list[str] | None) -> list[str] | None:
        try:
            watchrun.read_config({"drain_command": v})
        except PolicyError as exc:
            raise ValueError(str(exc).removeprefix("watchdog policy: drain_command: ")) from None
        return v


ROLE = Role("watchdog", Settings, "the host watchdog: restarts, replaces or reports failing servers and hardware",
            order=90)

UNIT = "tritonfleet-watchdog.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
POLICY_FILE = watchrun.POLICY_FILE
STATE_FILE = watchrun.STATE_FILE


def textfile_dir(cfg: HostConfig) -> str:
    return cfg.watchdog.textfile_dir or cfg.monitoring.textfile_dir


def config_data(cfg: HostConfig) -> dict[str, Any]:
    """The config file the service reads (``--policy``): the policy, and the drain hook when there is one."""
    w: Settings = cfg.watchdog
    data: dict[str, Any] = dict(w.policy)
    if w.drain_command:
        data.update(drain_command=list(w.drain_command), drain_timeout_seconds=w.drain_timeout_seconds)
    return data


def config_text(cfg: HostConfig) -> str:
    return json.dumps(config_data(cfg), indent=2, sort_keys=True) + "\n"


def command(cfg: HostConfig) -> list[str]:
    """The service's command line."""
    w: Settings = cfg.watchdog
    cmd = [hc.AGENT, "watchdog", "--policy", POLICY_FILE, "--interval", str(w.interval_seconds),
           "--textfile-dir", textfile_dir(cfg), "--state", STATE_FILE]
    if repository_header(cfg):
        cmd += ["--header-file", hc.REPOSITORY_HEADER_FILE]
    if cfg.instance.is_neuron and cfg.monitoring.neuron_exporter:  # read its counters, start no second monitor
        cmd += ["--neuron-exporter", f"http://127.0.0.1:{cfg.monitoring.neuron_exporter_port}/metrics"]
    if w.asg_endpoint:
        cmd += ["--endpoint-url", w.asg_endpoint]
    if w.asg_region:
        cmd += ["--region", w.asg_region]
    if w.queue_time_fleet:
        cmd += ["--queue-time-fleet", w.queue_time_fleet, "--queue-time-family", cfg.instance.family]
        for p in cfg.triton.placements:  # each server's metrics port, where it listens
            host = "127.0.0.1" if p.bind_address in ("0.0.0.0", "::") else p.bind_address
            host = f"[{host}]" if ":" in host else host
            cmd += ["--queue-time-url", f"http://{host}:{p.metrics_port}/metrics"]
    return cmd


def unit_text(cfg: HostConfig) -> str:
    environment = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": cfg.imds_endpoint} if cfg.imds_endpoint != DEFAULT_IMDS else {}
    return render("watchdog/tritonfleet-watchdog.service.j2", command=command(cfg),
                  memory_max=cfg.watchdog.memory_max_mib, textfile_dir=textfile_dir(cfg),
                  state_dir=posixpath.dirname(STATE_FILE).removeprefix("/var/lib/"), environment=environment)


@deploy("Watchdog")
def watchdog() -> None:
    cfg = config_for()
    if not cfg.watchdog.enabled:
        paths = [UNIT_FILE, POLICY_FILE, STATE_FILE, posixpath.join(textfile_dir(cfg), watchrun.TEXTFILE)]
        # one look (the fact remove_paths reads too, cached): a host that never had the watchdog costs a no-op
        # run one remote command, not a systemd query as well
        if not host.get_fact(FileDigests, paths=tuple(paths)):
            host.noop("the watchdog is off and was never installed here")
            return
        ops.services.units(name="Watchdog stopped (watchdog_enabled is off)", units=[UNIT], running=False,
                           enabled=False)
        ops.qa.remove_paths(name="Watchdog unit, policy, state and metrics removed", paths=paths)
        return
    install_for(cfg, "watchdog_enabled", True)
    header = repository_header(cfg)
    if header:  # the service reads the servers' model index with it (the models role writes the same file)
        ops.files.secret(name="Triton repository API header (root only)", path=hc.REPOSITORY_HEADER_FILE,
                         content=header)
    files.directory(name="node_exporter textfile directory", path=textfile_dir(cfg), mode="755")
    written = ops.files.managed(name="Watchdog policy and service", files={
        POLICY_FILE: config_text(cfg), UNIT_FILE: unit_text(cfg)})
    ops.qa.daemon_reload(name="systemd reads the watchdog's unit", _if=written.did_change)
    ops.services.units(name="Watchdog restarted with its new policy", units=[UNIT], restarted=True,
                       _if=written.did_change)
    ops.services.units(name="Watchdog running and enabled", units=[UNIT], running=True, enabled=True)
