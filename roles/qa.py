"""Accuracy QA on the hosts (README "Quality assurance"): the suites (``qa_suites``, a directory on the
controller) run by the host agent's QA runner against the host's own Triton servers.

- ``qa``: run now (``deploys/qa.py``, ``make qa``): every host in parallel; the reports are fetched to
  ``<qa_reports_dir>/<host>/<UTC stamp>.{json,xml}`` and one fleet table is printed; the run fails when
  any host has a failing case.
- ``qa_schedule`` / ``qa_unschedule`` (``make qa-schedule`` / ``qa-unschedule``): a systemd timer
  (``qa_schedule``, ``qa_schedule_random_delay``) whose service runs the same suites, keeps the reports
  on the host, uploads them to ``<qa_reports_s3_uri>/qa/<host>/`` and writes a Prometheus textfile for
  node_exporter (``tritonfleet_qa_last_run_timestamp_seconds``, ``tritonfleet_qa_failures``).
"""

from __future__ import annotations

import functools
import os
import posixpath
import time
from typing import Literal

from pydantic import Field, field_validator
from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import files, python

from roles import models as models_role
from roles import operations as ops
from roles.context import config_for
from tritonfleet import hostcontract as hc
from tritonfleet.config import DEFAULT_IMDS, FieldProblem, HostConfig, Role, RoleSettings, http_url, matching
from tritonfleet.face.qa import QAFailed, fleet_table
from tritonfleet.templating import render

_S3_URI = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"


class Settings(RoleSettings):
    suites: str | None = Field(None, description=(
        "Controller directory of QA suites (qa/<model>.yaml; see README \"Quality assurance\"); None: no QA."))
    protocol: Literal["grpc", "http"] = Field("grpc", description="Protocol the runner talks to Triton with.")
    reports_dir: str = Field("reports", description=(
        "Controller directory the reports of `make qa` are fetched to (<dir>/<host>/<UTC stamp>.{json,xml})."))
    timeout: int = Field(900, ge=30, le=86400, description="Seconds a QA run may take on a host.")
    server_wait: int = Field(60, ge=1, le=3600, description=(
        "Seconds the runner waits for each Triton server to be ready before that server's suites fail."))
    schedule: str = Field("hourly", description="systemd OnCalendar= of the scheduled QA (make qa-schedule).")
    schedule_random_delay: int = Field(600, ge=0, le=86400, description=(
        "RandomizedDelaySec= of the timer, so a fleet does not run QA all at once."))
    reports_s3_uri: str | None = Field(None, description=(
        "s3://bucket/prefix scheduled runs upload their reports to (<uri>/qa/<host>/); None: kept on the host."))
    reports_s3_endpoint: str | None = Field(None, description="S3 endpoint URL for the reports; None = AWS's.")
    reports_s3_region: str | None = Field(None, description="S3 region of the reports bucket.")
    textfile_dir: str | None = Field(None, description=(
        "node_exporter textfile-collector directory the scheduled run writes tritonfleet_qa.prom into; "
        "None: monitoring_textfile_dir (the one the monitoring role's node exporter reads)."))

    _uri = field_validator("reports_s3_uri")(matching(_S3_URI, "expected s3://bucket/prefix"))
    _endpoint = field_validator("reports_s3_endpoint")(lambda v: http_url(v))
    _calendar = field_validator("schedule")(matching(r"^[A-Za-z0-9*:,./~ -]{1,100}$",
                                                     "expected a systemd calendar expression, e.g. hourly"))
    _dir = field_validator("textfile_dir")(matching(r"^/[\w./-]+$", "expected an absolute directory"))


def suite_models(suites: str) -> dict[str, list[str]]:
    """``{model: [suite file, ...]}`` of the suite files of the directory ``suites`` (as the runner finds
    them: a ``model`` key, else the file name); a file that cannot be read is left to the runner to report."""
    from tritonfleet.agent.qa.suites import SuiteError, discover, read_document

    out: dict[str, list[str]] = {}
    try:
        found = discover([suites])
    except SuiteError:
        return out
    for path, display in found:
        try:
            doc = read_document(path, display)
        except SuiteError:
            continue
        model = doc.get("model") if isinstance(doc, dict) else None
        out.setdefault(model if isinstance(model, str) else path.stem, []).append(path.name)
    return out


def _served_by_none(cfg: HostConfig) -> None:
    """A suite for a model that no server of the host loads (known on the controller: the servers' lists,
    or the repository of a ``models_source``) would have nothing to run against."""
    placements = cfg.triton.placements
    if not cfg.qa.suites or not placements:
        return
    known = models_role.repository_models(cfg)
    if any(p.models is None for p in placements) and known is None:
        return  # a server loads every model of a repository the controller does not know
    served = {m for p in placements for m in (p.models if p.models is not None else known or [])}
    for model, paths in sorted(suite_models(cfg.qa.suites).items()):
        if model not in served:
            loads = "; ".join(f"{p.name}: {', '.join(p.models if p.models is not None else known or []) or 'none'}"
                              for p in placements)
            raise FieldProblem("qa_suites", cfg.qa.suites, f"{', '.join(paths)}: model {model} is loaded by no "
                               f"Triton server of this host ({loads}); give a server that model "
                               "(triton_servers[].models) or remove the suite")


def _checks(cfg: HostConfig) -> None:
    q = cfg.qa
    if q.suites is not None and not os.path.isdir(q.suites):
        raise FieldProblem("qa_suites", q.suites, "no such directory on the controller")
    _served_by_none(cfg)
    if not q.reports_s3_uri:
        for key in ("reports_s3_endpoint", "reports_s3_region"):
            if getattr(q, key):
                raise FieldProblem(f"qa_{key}", getattr(q, key), "has no effect without qa_reports_s3_uri")


ROLE = Role("qa", Settings, "accuracy QA: suites run on the hosts, now or on a schedule", checks=_checks, order=80)

SUITES_DIR = f"{hc.OPT_DIR}/qa/suites"
REPORTS_DIR = f"{hc.STATE_DIR}/qa/reports"
SCHEDULED_SCRIPT = f"{hc.OPT_DIR}/qa/qa-scheduled.sh"
UNIT = "tritonfleet-qa"
UNIT_FILES = (f"/etc/systemd/system/{UNIT}.service", f"/etc/systemd/system/{UNIT}.timer")
TEXTFILE = "tritonfleet_qa.prom"


@functools.cache
def run_stamp() -> str:
    """One UTC stamp for every host of a run (the report names)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def run_command(cfg: HostConfig, stamp: str | None) -> list[str]:
    """The runner's command line against this host's servers, each with the models it loads (``stamp``
    None: the runner picks one)."""
    cmd = [hc.AGENT, "qa", "run", "--suites", SUITES_DIR, "--protocol", cfg.qa.protocol, "--out", REPORTS_DIR,
           "--wait", str(cfg.qa.server_wait)]
    for p in cfg.triton.placements:
        address = f"[{p.local_address}]" if ":" in p.local_address else p.local_address
        cmd += ["--server", f"{p.name}=grpc://{address}:{p.grpc_port},http://{address}:{p.http_port}"]
    # a suite runs on the servers that load its model
    cmd += models_role.server_models_args((p.name, p.models) for p in cfg.triton.placements)
    if cfg.instance.is_neuron:  # suites needing more NeuronCores than the host has are skipped
        cmd += ["--neuron-cores", str(cfg.instance.core_count)]
    if stamp:
        cmd += ["--stamp", stamp]
    return cmd


def _suites(cfg: HostConfig) -> bool:
    if not cfg.qa.suites:
        host.noop("qa_suites is not set: no QA suites for this host")
        return False
    ops.files.sync_tree(name="QA suites", src=cfg.qa.suites, dest=SUITES_DIR)
    return True


@deploy("QA run")
def qa() -> None:
    cfg = config_for()
    if not _suites(cfg):
        return
    stamp = run_stamp()
    ops.qa.run(name=f"QA suites on {len(cfg.triton.placements)} server(s)", command=run_command(cfg, stamp),
               timeout=cfg.qa.timeout)
    local = os.path.join(cfg.qa.reports_dir, host.name)
    for ext in ("json", "xml"):
        files.get(name=f"QA report ({ext})", src=f"{REPORTS_DIR}/{stamp}.{ext}",
                  dest=os.path.join(local, f"{stamp}.{ext}"), create_local_dir=True)
    ran = sorted(h.name for h in host.state.inventory.iter_activated_hosts())  # this run's hosts (--limit)
    python.call(name="QA fleet table", function=_fleet_gate, reports_dir=cfg.qa.reports_dir, stamp=stamp,
                hosts=ran, _run_once=True)


def _fleet_gate(state, host, reports_dir: str, stamp: str, hosts: list[str]) -> bool:
    """The fleet table; a failed gate is one line and a failed operation, not a Python traceback (pyinfra
    prints one for any exception a callback raises; a callback taking ``state, host`` returns its status)."""
    try:
        fleet_table(reports_dir, stamp, hosts)
    except QAFailed as exc:
        host.log_styled(str(exc), fg="red", log_func=logger.error)
        return False
    return True


def textfile_dir(cfg: HostConfig) -> str:
    return cfg.qa.textfile_dir or cfg.monitoring.textfile_dir


def _environment(cfg: HostConfig) -> dict[str, str]:
    if cfg.imds_endpoint != DEFAULT_IMDS:
        return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": cfg.imds_endpoint}
    return {}


@deploy("QA schedule")
def qa_schedule() -> None:
    cfg = config_for()
    if not _suites(cfg):
        return
    q = cfg.qa
    s3 = posixpath.join(q.reports_s3_uri, "qa", host.name) if q.reports_s3_uri else None
    script = render("qa/qa-scheduled.sh.j2", run=run_command(cfg, None), agent=hc.AGENT, reports=REPORTS_DIR,
                    s3=s3, endpoint=q.reports_s3_endpoint, region=q.reports_s3_region,
                    textfile=posixpath.join(textfile_dir(cfg), TEXTFILE))
    units = ops.files.managed(name="QA service, timer and script", files={
        SCHEDULED_SCRIPT: script,
        UNIT_FILES[0]: render("qa/tritonfleet-qa.service.j2", script=SCHEDULED_SCRIPT, timeout=q.timeout,
                                  environment=_environment(cfg)),
        UNIT_FILES[1]: render("qa/tritonfleet-qa.timer.j2", calendar=q.schedule, delay=q.schedule_random_delay),
    })
    files.directory(name="node_exporter textfile directory", path=textfile_dir(cfg), mode="755")
    ops.qa.daemon_reload(name="systemd reads the changed QA units", _if=units.did_change)
    ops.services.units(name="QA timer restarted with its new schedule", units=[f"{UNIT}.timer"],
                       restarted=True, _if=units.did_change)
    ops.services.units(name="QA timer enabled and started", units=[f"{UNIT}.timer"], running=True,
                       enabled=True)


@deploy("QA unschedule")
def qa_unschedule() -> None:
    cfg = config_for()
    ops.services.units(name="QA timer stopped and disabled", units=[f"{UNIT}.timer", f"{UNIT}.service"],
                       running=False, enabled=False)
    ops.qa.remove_paths(name="QA units, script and metrics removed",
                        paths=[*UNIT_FILES, SCHEDULED_SCRIPT, posixpath.join(textfile_dir(cfg), TEXTFILE)])
