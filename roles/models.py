"""The model repository on the host, from one of three places (README "Model repositories"):

- **S3 sync** (``models_s3_uri``): the host agent (``tritonfleet-agent``, installed by the agent role)
  mirrors the prefix into
  ``models_dir/versions/<id>``, verified, and switches ``models_dir/current`` atomically; running servers
  (explicit model control) then load only what changed, and a model that fails to load switches back.
  Containers mount ``models_dir`` and read ``/models/current``, so a switch needs no restart.
  On a Neuron host the agent first checks each Neuron model of the new version against what the image's
  runtime loads (:func:`compat_text`, written to ``/etc/tritonfleet/model-compat.json``): a model it cannot
  load fails the sync with one line naming it, before anything changes, and the host keeps serving.
- **Pull mode** (``models_pull``, with ``models_s3_uri`` as the release root): the agent runs as
  ``tritonfleet-models-pull.service`` and watches the release pointer ``<models_s3_uri>/RELEASE`` (or
  ``RELEASE.<models_pull_group>``) with conditional requests; when it names another release it syncs
  ``<models_s3_uri>/<release>/`` the same way and reloads live (``tritonfleet/agent/pull.py``). A run of this
  role syncs to the pointed release first (``pull --once``), then keeps the service running.
- **S3 direct** (``models_s3_direct``): Triton reads ``s3://`` itself; nothing is kept on disk.
- **Controller copy** (``models_source``): a directory on the controller, copied and switched in.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
from collections.abc import Iterable, Sequence

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from roles import operations as ops
from roles.context import config_for
from roles.facts.files import FileDigests
from roles.facts.system import CommandSucceeds
from roles.triton_image import python_image_pending
from tritonfleet import compat
from tritonfleet import hostcontract as hc
from tritonfleet.config import (
    DEFAULT_IMDS,
    FieldProblem,
    HostConfig,
    Role,
    RoleSettings,
    http_url,
    matching,
)
from tritonfleet.templating import render

_S3_URI = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"
_REGION = r"^[a-z]{2}(-[a-z]+)+-\d+$"


class Settings(RoleSettings):
    source: str | None = Field(None, description=(
        "Controller-side model repository to copy to the host (None: leave models_dir as it is)."))
    dir: str = Field("/opt/tritonfleet/models", description=(
        "Model repository on the host, mounted read-only into every Triton container at /models (with S3 "
        "sync: the root of current/ and versions/)."))
    s3_uri: str | None = Field(None, description="s3://bucket/prefix of the model repository (S3 sync).")
    s3_endpoint: str | None = Field(None, description="S3 endpoint URL; None = AWS's for the region.")
    s3_region: str | None = Field(None, description="S3 region, e.g. us-east-1; None = the host's default.")
    s3_concurrency: int = Field(16, ge=1, le=256, description="Parallel GET requests of a sync.")
    s3_keep: int = Field(3, ge=2, le=100, description=(
        "Versions kept on the host, the current one included (at least 2: the previous one is what a "
        "failed reload switches back to)."))
    s3_connect_timeout: int = Field(5, ge=1, le=300, description=(
        "Seconds S3 has to accept a connection, per attempt (3 attempts per request)."))
    s3_read_timeout: int = Field(30, ge=1, le=3600, description=(
        "Seconds S3 has to answer, per attempt (3 attempts per request): a hung S3 ends the sync after "
        "3 x this, naming the endpoint and what the sync was doing."))
    s3_deadline: int = Field(1800, ge=10, le=7 * 86400, description=(
        "Seconds the S3 part of a sync (listing, downloads, checks) may take in all; then it stops, "
        "current unchanged, what was downloaded kept for the next run."))
    s3_lock_wait: int = Field(60, ge=0, le=3600, description=(
        "Seconds a sync waits for another one's lock; then an agent stuck past its own bound is ended, "
        "a live one is named (pid, age) and the run fails."))
    s3_verify: bool = Field(False, description=(
        "This run hashes every file of the current version against its manifest and repairs what differs "
        "(make models VERIFY=1); otherwise only missing, resized and modified-since-checked files are."))
    s3_verify_schedule: str | None = Field(None, description=(
        "systemd OnCalendar= of a scheduled verify on the host (e.g. weekly; a timer runs `tritonfleet-agent "
        "verify`, repairs go to the journal); None: no timer (removed if there was one)."))
    s3_direct: bool = Field(False, description=(
        "Triton reads models_s3_uri itself (no copy on disk; a full download on every start; see README)."))
    pull: bool = Field(False, description=(
        "Pull mode: a resident agent (tritonfleet-models-pull.service) watches models_s3_uri/RELEASE and serves "
        "the release it names (models_s3_uri/<release>/), reloaded live; `tritonfleet models release` moves it."))
    pull_group: str | None = Field(None, description=(
        "Pull mode: follow models_s3_uri/RELEASE.<group> while it exists (e.g. canary), else RELEASE."))
    pull_interval: float = Field(2.0, ge=0.2, le=3600, description=(
        "Pull mode: seconds between two checks of the pointer (one conditional GET each)."))
    pull_max_backoff: float = Field(300.0, ge=1, le=86400, description=(
        "Pull mode: the longest wait before a release that failed is tried again (the wait doubles from "
        "models_pull_interval); a changed pointer is tried at once."))

    @field_validator("dir")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") in ("", "/etc", "/usr", "/var"):
            raise ValueError("expected an absolute directory of its own, e.g. /opt/tritonfleet/models")
        return v.rstrip("/")

    _uri = field_validator("s3_uri")(matching(_S3_URI, "expected s3://bucket/prefix"))
    _region = field_validator("s3_region")(matching(_REGION, "expected a region name like us-east-1"))

    _endpoint = field_validator("s3_endpoint")(lambda v: http_url(v))
    _group = field_validator("pull_group")(matching(r"^[a-z0-9][a-z0-9_-]{0,62}$",
                                                    "expected a group name like canary (a-z, 0-9, _ and -)"))
    _calendar = field_validator("s3_verify_schedule")(matching(
        r"^[A-Za-z0-9*:,./~ -]{1,100}$", "expected a systemd calendar expression, e.g. weekly"))


def model_names(cfg: HostConfig) -> list[str]:
    """Model directories of the controller-side repository (those with a config.pbtxt)."""
    src = cfg.models.source
    if not src or not os.path.isdir(src):
        return []
    return sorted(d for d in os.listdir(src) if os.path.isfile(os.path.join(src, d, "config.pbtxt")))


def repository_models(cfg: HostConfig) -> list[str] | None:
    """Every model directory of the repository, when the controller knows them without the network (a
    ``models_source`` directory; a model needs no config.pbtxt when Triton completes it); None when it
    does not (S3, or a repository managed elsewhere)."""
    src = cfg.models.source
    if not src or cfg.models.s3_uri or not os.path.isdir(src):
        return None
    return sorted(d for d in os.listdir(src) if not d.startswith(".") and os.path.isdir(os.path.join(src, d)))


def sync_mode(cfg: HostConfig) -> bool:
    """Models come from S3 through the host agent."""
    return bool(cfg.models.s3_uri) and not cfg.models.s3_direct


def triton_s3_url(cfg: HostConfig) -> str:
    """``models_s3_uri`` as Triton spells it: ``s3://bucket/prefix``, or with another endpoint
    ``s3://http(s)://host:port/bucket/prefix``."""
    m = cfg.models
    if not m.s3_endpoint:
        return m.s3_uri
    return f"s3://{m.s3_endpoint.rstrip('/')}/{m.s3_uri.removeprefix('s3://')}"


def container_repository(cfg: HostConfig) -> str:
    """What Triton's ``--model-repository`` is inside the container."""
    if cfg.models.s3_uri and cfg.models.s3_direct:
        return triton_s3_url(cfg)
    return hc.S3_REPOSITORY_IN_CONTAINER if sync_mode(cfg) else "/models"


def _checks(cfg: HostConfig) -> None:
    m = cfg.models
    if m.source is not None and not os.path.isdir(m.source):
        raise FieldProblem("models_source", m.source, "no such directory on the controller")
    if m.source and m.s3_uri:
        raise FieldProblem("models_source", m.source, "set models_source or models_s3_uri, not both")
    if not m.s3_uri:
        for key in ("s3_endpoint", "s3_region", "s3_direct", "s3_verify", "s3_verify_schedule", "pull", "pull_group"):
            if getattr(m, key):
                raise FieldProblem(f"models_{key}", getattr(m, key), "has no effect without models_s3_uri")
    if m.pull_group and not m.pull:
        raise FieldProblem("models_pull_group", m.pull_group, "has no effect without models_pull: true")
    if m.pull:
        if m.s3_direct:
            raise FieldProblem("models_pull", True, "set models_pull or models_s3_direct, not both")
        for key in ("s3_verify", "s3_verify_schedule"):
            if getattr(m, key):
                raise FieldProblem(f"models_{key}", getattr(m, key), (
                    "not in pull mode yet: the resident agent checks each release it syncs; leave it unset"))


def _host_checks(h, cfg: HostConfig) -> None:
    """A controller copy (``models_source``) onto a repository the host syncs from S3 (the agent's ``current``
    link, which its servers read) is refused in preflight: the copy would take the servers' models away while
    the new server (reading the copy's layout) starts, and a rollback would find none. The host serves on."""
    m = cfg.models
    if not m.source or m.s3_uri:
        return
    if h.get_fact(CommandSucceeds, command=f"test -L {shlex.quote(m.dir.rstrip('/') + '/current')}"):
        raise FieldProblem("models_source", m.source, (
            f"{m.dir} on the host is an S3 sync (its servers read {m.dir.rstrip('/')}/current): a controller copy "
            "would take their models away while the new server starts; keep models_s3_uri, or empty "
            f"{m.dir} on the host first (it serves no model until the copy is in)"))


ROLE = Role("models", Settings, "the model repository on the host (S3 sync, S3 direct or a controller copy)",
            checks=_checks, order=60, host_checks=_host_checks)


def sync_command(cfg: HostConfig, verify: bool = False) -> list[str]:
    """The agent's command line: the source, the kept versions and the servers to reload, each with the
    models it loads (``verify``: the ``verify`` command, which hashes every file of the current version
    first)."""
    m, t = cfg.models, cfg.triton
    cmd = [hc.AGENT, "verify" if verify else "pull" if m.pull else "sync", "--source", m.s3_uri, "--dest", m.dir, "--concurrency", str(m.s3_concurrency),
           "--keep", str(m.s3_keep), "--timeout", str(t.health_timeout),
           "--connect-timeout", str(m.s3_connect_timeout), "--read-timeout", str(m.s3_read_timeout),
           "--deadline", str(m.s3_deadline), "--lock-wait", str(m.s3_lock_wait)]
    if m.s3_endpoint:
        cmd += ["--endpoint-url", m.s3_endpoint]
    if m.s3_region:
        cmd += ["--region", m.s3_region]
    if t.model_control_mode == "explicit":  # poll mode reloads by itself; none cannot reload
        for p in t.placements:
            cmd += ["--server", f"{p.name}={p.local_grpc_url}"]  # over HTTP a load holds up HTTP clients
        cmd += server_models_args((p.name, p.models) for p in t.placements)  # each reloads its own models
        if repository_header(cfg):
            cmd += ["--header-file", hc.REPOSITORY_HEADER_FILE]
    cmd += memory_args(cfg)  # in any mode: the servers load the new version, by themselves (poll) or reloaded
    if compat_limits(cfg) is not None:  # the image's runtime loads each Neuron model (the file: _s3_sync)
        cmd += ["--compat", hc.MODEL_COMPAT_FILE]
    if m.pull:  # the resident agent's own options (pull.py); the service adds nothing, a run adds --once
        cmd += ["--interval", f"{m.pull_interval:g}", "--max-backoff", f"{m.pull_max_backoff:g}",
                "--state", hc.PULL_STATE_FILE, "--textfile-dir", cfg.monitoring.textfile_dir]
        if m.pull_group:
            cmd += ["--group", m.pull_group]
    if cfg.imds_endpoint != DEFAULT_IMDS:  # credentials from the instance profile at another IMDS address
        cmd = ["/usr/bin/env", f"AWS_EC2_METADATA_SERVICE_ENDPOINT={cfg.imds_endpoint}", *cmd]
    return cmd


def compat_limits(cfg: HostConfig) -> dict | None:
    """What the host's Triton image loads (:func:`tritonfleet.compat.model_limits` of its Neuron runtime, the
    triton role's :func:`~roles.triton.container_runtime_version`, and the host's architecture), which the agent
    checks every Neuron model of a version against before it switches ``current``; None on a host without
    Neuron devices. An unknown runtime gives limits that make every neuronx-cc model a warning."""
    if not cfg.instance.is_neuron:
        return None
    from roles.triton import container_runtime_version  # here: roles.triton imports this module

    return compat.model_limits(container_runtime_version(cfg), cfg.instance.neuron_arch)


def compat_text(cfg: HostConfig) -> str | None:
    """The limits file (``/etc/tritonfleet/model-compat.json``) as the role writes it; None without Neuron."""
    limits = compat_limits(cfg)
    return None if limits is None else json.dumps(limits, indent=2, sort_keys=True) + "\n"


def server_models_args(servers: Iterable[tuple[str, Sequence[str] | None]]) -> list[str]:
    """The agent's ``--server-models NAME=MODEL,...`` (``NAME=`` for none) of each server that loads only
    some models; a server without one (``None``: it loads every model in the repository) is left out."""
    return [a for name, models in servers if models is not None
            for a in ("--server-models", f"{name}={','.join(models)}")]


def memory_args(cfg: HostConfig) -> list[str]:
    """The agent's memory check before it switches ``current`` (``triton_memory_check``, README "Serving"):
    ``--host-name`` (for its error line), ``--accelerator``, ``--memory-headroom`` and each server's
    ``--server-capacity``; none with the check off or on a host without an accelerator."""
    t = cfg.triton
    if not t.memory_check or not cfg.instance.has_accelerator or not t.placements:
        return []
    neuron = cfg.instance.is_neuron
    return ["--host-name", cfg.name, "--accelerator", "neuron" if neuron else "gpu",
            "--memory-headroom", f"{t.memory_headroom_pct:g}",
            *server_capacity_args((p.name, len(p.devices) if neuron else len(p.gpus), cfg.instance.device_memory_mib)
                                  for p in t.placements)]


def server_capacity_args(servers: Iterable[tuple[str, int, int]]) -> list[str]:
    """The agent's ``--server-capacity NAME=DEVICESxMIB`` of each ``(name, devices, MiB per device)``: the
    memory the server's devices (GPUs) hold, before the headroom."""
    return [a for name, devices, mib in servers for a in ("--server-capacity", f"{name}={devices}x{mib}")]


VERIFY_UNIT = "tritonfleet-models-verify"
VERIFY_UNIT_FILES = (f"/etc/systemd/system/{VERIFY_UNIT}.service", f"/etc/systemd/system/{VERIFY_UNIT}.timer")
PULL_UNIT = "tritonfleet-models-pull.service"
PULL_UNIT_FILE = f"/etc/systemd/system/{PULL_UNIT}"
#: the optional units' files, read with one fact when one of them is off (remove_paths reads the same fact)
UNIT_FILES = (*VERIFY_UNIT_FILES, PULL_UNIT_FILE)
PULL_TEXTFILE = "tritonfleet_models_pull.prom"  # tritonfleet/agent/pull.py's TEXTFILE


def _units_off(cfg: HostConfig) -> None:
    """The scheduled verify's timer and the pull service, each stopped and removed when it is off: one fact on a
    host that never had either."""
    m = cfg.models
    off = [*(() if m.s3_verify_schedule else VERIFY_UNIT_FILES),
           *(() if m.pull else (PULL_UNIT_FILE, hc.PULL_STATE_FILE, posixpath.join(cfg.monitoring.textfile_dir,
                                                                                 PULL_TEXTFILE)))]
    if not off:
        return
    present = host.get_fact(FileDigests, paths=tuple(off))
    if not m.s3_verify_schedule and any(p in present for p in VERIFY_UNIT_FILES):
        ops.services.units(name="Scheduled model verify stopped", units=[f"{VERIFY_UNIT}.timer"],
                           running=False, enabled=False)
    if not m.pull and PULL_UNIT_FILE in present:
        ops.services.units(name="Pull mode's agent stopped (models_pull is off)", units=[PULL_UNIT], running=False,
                           enabled=False)
    ops.qa.remove_paths(name="Model units that are off removed", paths=off)


def _pull_service(cfg: HostConfig) -> None:
    """``models_pull``: the resident agent, after this run synced to the pointed release."""
    m = cfg.models
    unit = ops.files.managed(name="Pull mode's agent: service", files={
        PULL_UNIT_FILE: render("models/tritonfleet-models-pull.service.j2", command=sync_command(cfg),
                               models_dir=m.dir, textfile_dir=cfg.monitoring.textfile_dir,
                               state_dir=posixpath.dirname(hc.PULL_STATE_FILE).removeprefix("/var/lib/"),
                               stop_timeout=90)})
    ops.qa.daemon_reload(name="systemd reads the pull service", _if=unit.did_change)
    ops.services.units(name="Pull mode's agent restarted with its new options", units=[PULL_UNIT], restarted=True,
                       _if=unit.did_change)
    ops.services.units(name="Pull mode's agent running and enabled", units=[PULL_UNIT], running=True, enabled=True)


def _verify_schedule(cfg: HostConfig) -> None:
    """``models_s3_verify_schedule``: a timer that runs ``tritonfleet-agent verify`` (repairs in the journal:
    ``journalctl -u tritonfleet-models-verify``); without it, no timer."""
    m = cfg.models
    if not m.s3_verify_schedule:
        return
    command = " ".join(shlex.quote(c) for c in sync_command(cfg, verify=True))
    units = ops.files.managed(name="Scheduled model verify: service and timer", files={
        VERIFY_UNIT_FILES[0]: render("models/tritonfleet-models-verify.service.j2", command=command,
                                         timeout=m.s3_deadline + m.s3_lock_wait + 600),
        VERIFY_UNIT_FILES[1]: render("models/tritonfleet-models-verify.timer.j2", calendar=m.s3_verify_schedule),
    })
    ops.qa.daemon_reload(name="systemd reads the changed verify units", _if=units.did_change)
    ops.services.units(name="Verify timer restarted with its new schedule", units=[f"{VERIFY_UNIT}.timer"],
                       restarted=True, _if=units.did_change)
    ops.services.units(name="Verify timer enabled and started", units=[f"{VERIFY_UNIT}.timer"], running=True,
                       enabled=True)


def repository_header(cfg: HostConfig) -> str | None:
    """The ``name: value`` line the repository API needs, when it is restricted."""
    t = cfg.triton
    if t.repository_secret and "model-repository" in t.restricted_apis:
        return f"{t.repository_header}: {t.repository_secret}\n"
    return None


def _s3_sync(cfg: HostConfig) -> None:
    """The agent (installed by the agent role) syncs; the header file lets it reload the servers, the limits
    file lets it check the Neuron models against the image before it switches."""
    header = repository_header(cfg)
    if header and cfg.triton.model_control_mode == "explicit":
        ops.files.secret(name="Triton repository API header (root only)", path=hc.REPOSITORY_HEADER_FILE,
                         content=header)
    limits = compat_text(cfg)
    if limits is not None:
        ops.files.managed(name="What the image's Neuron runtime loads (the agent's model check)",
                          files={hc.MODEL_COMPAT_FILE: limits})
    if cfg.models.pull:  # the agent's metrics go there from its first check on
        files.directory(name="node_exporter textfile directory", path=cfg.monitoring.textfile_dir, mode="755")
        ops.models.sync(name=f"Model repository: the release {cfg.models.s3_uri}/{pointer(cfg)} names",
                        command=[*sync_command(cfg), "--once"])
    else:
        ops.models.sync(name=f"Model repository from {cfg.models.s3_uri}",
                        command=sync_command(cfg, cfg.models.s3_verify))
    _units_off(cfg)
    _verify_schedule(cfg)
    if cfg.models.pull:
        _pull_service(cfg)


def pointer(cfg: HostConfig) -> str:
    """The pointer object a pull-mode host reads first (below models_s3_uri)."""
    return "RELEASE" + (f".{cfg.models.pull_group}" if cfg.models.pull_group else "")


#: hosts whose S3 sync waits until their servers run the new image with python packages (``models_after_image``)
_AFTER_IMAGE: set[str] = set()


@deploy("Models")
def models() -> None:
    cfg = config_for()
    m = cfg.models
    if m.s3_uri and m.s3_direct:
        host.noop(f"Triton reads {m.s3_uri} itself (models_s3_direct)")
        return
    files.directory(name="Model repository directory", path=m.dir, mode="755")
    if m.s3_uri:
        pending = python_image_pending(cfg)
        if pending:  # the sync waits for the new image: models_after_image, after the triton role
            _AFTER_IMAGE.add(host.name)
            host.noop(f"model repository: synced after server(s) {', '.join(pending)} run their new image "
                      "(triton_python_requirements changed)")
            return
        _s3_sync(cfg)
    elif m.source:
        # A killed upload leaves a partial file in the staging copy only; the live repository is switched
        # from a complete copy, file by file with renames.
        ops.files.sync_tree(name="Model repository (staged from the controller)", src=m.source,
                            dest=hc.MODELS_STAGING)
        # A new host's empty repository is filled now; a serving host's is switched by the triton role once
        # its containers pass their health gate, then each changed model is reloaded (and restored if it
        # fails), so a bad model never takes a server down.
        ops.models.switch_staged(name="Model repository (first fill)", staging=hc.MODELS_STAGING, live=m.dir,
                                 previous=hc.MODELS_PREVIOUS, only_if_empty=True)
    else:
        host.noop("neither models_s3_uri nor models_source is set; the model repository is managed elsewhere")


@deploy("Models (after a new serving image)")
def models_after_image() -> None:
    """The S3 sync that :func:`models` left for after the triton role, when the servers' image changed with
    ``triton_python_requirements``: a new model that needs a new package is loaded live on the new image, and
    a build that failed stopped the host's run before its repository changed. Nothing otherwise."""
    if host.name not in _AFTER_IMAGE:
        return
    _AFTER_IMAGE.discard(host.name)
    _s3_sync(config_for())
