"""Triton in Docker: one container per placed server with exactly its devices, cores, limits and ports.

Image: built on the host from ``templates/triton/Dockerfile.neuron.j2`` (tag = content hash, frameworks
pinned, so an unchanged Dockerfile never rebuilds and one tag is one image), pulled from a registry, or
``docker load``-ed from an archive; with ``triton_python_requirements`` the containers run a layer built on
it with those packages (:mod:`tritonfleet.pyreqs`, tag = content hash). Before a Neuron container starts,
the image's runtime is checked against the host driver. Containers are recreated only when their spec
changes, run with a Docker restart policy (``unless-stopped``, with ``live-restore`` in daemon.json), and
are gated on ``/v2/health/ready`` plus every model's ready state. The model-repository API is restricted to callers presenting the
per-fleet secret header.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pyinfra import host, logger
from pyinfra.api import deploy

from roles import models as models_role
from roles import operations as ops
from roles import platform
from roles.context import config_for
from roles.neuron import REPO_ID as NEURON_REPO
from roles.neuron import dkms_pin

# the serving image (base, python layer, build, pull, load): roles/triton_image.py; its names stay importable here
from roles.triton_image import (  # noqa: E402,F401
    ECR_REGISTRY,
    _image,
    _python_layer,
    dockerfile,
    frameworks,
    image_ref,
    image_source,
    python_image_pending,
    python_requirements,
    serving_image,
)
from tritonfleet import compat, footprint, imagespec
from tritonfleet import hostcontract as hc
from tritonfleet.config import (
    DEFAULT_IMDS,
    MISSING,
    FieldProblem,
    HostConfig,
    Role,
    RoleSettings,
    Version,
    absolute_path,
    http_url,
    image_reference,
    matching,
)
from tritonfleet.placement import IPAddress, Placement, PlacementError, ServerSpec, check_model_names, place

#: tritonserver flags the role manages; triton_extra_args may not set them.
MANAGED_FLAGS = ("--model-repository", "--model-store", "--model-control-mode", "--load-model",
                 "--http-restricted-api", "--grpc-restricted-protocol", "--http-port", "--grpc-port",
                 "--metrics-port", "--allow-metrics")


class Settings(RoleSettings):
    image: str | None = Field(None, description=(
        'Image reference; None with source "build" means tritonfleet/tritonserver-neuron:<content hash>.'))
    image_source: Literal["build", "pull", "archive"] = Field("build", description=(
        '"build" (on the host, from triton_base_image), "pull" (registry/ECR) or "archive" (docker load).'))
    ecr_credential_helper: bool = Field(True, description=(
        "ECR pulls authenticate with the instance profile through amazon-ecr-credential-helper "
        "(root's docker config.json is managed then)."))
    base_image: str = Field("nvcr.io/nvidia/tritonserver:24.10-py3", description=(
        "NGC Triton image the Neuron image is built from (24.10 = Triton 2.51)."))
    image_archive: str | None = Field(None, description='`docker save` tarball on the host (source "archive").')
    image_archive_src: str | None = Field(None, description="... or on the controller, uploaded to the host first.")
    neuron_frameworks: list[str] | None = Field(None, description=(
        "pip packages baked into the image, each pinned with ==; None = per family (compat.FRAMEWORK_PINS)."))
    neuron_pip_index: str = Field("https://pip.repos.neuron.amazonaws.com", description="Neuron pip index used by the image build.")
    servers: list[ServerSpec] = Field([], description=(
        'Servers on this host, each with its devices, ports and models (see README "Serving"); [] = one server with '
        "every device."))
    python_requirements: str | list[str] | None = Field(None, description=(
        "Extra python packages for python-backend models, built into the serving image on the host: a requirements "
        "file on the controller (relative to the directory pyinfra runs in) or a list of lines; every line pins "
        "one version (name==version), with --hash on every line or on none (then --require-hashes: list every "
        'dependency). None = the image as it is (see README "Python packages in the image").'))
    pip_index: str | None = Field(None, description=(
        "http(s) URL of the package index (PEP 503 simple) the python_requirements build installs from, without "
        "credentials (they would stay in the image history); None = PyPI."))
    shm_size: str = Field("1g", description="--shm-size of each container.")
    bind_address: IPAddress = Field("0.0.0.0", description=(
        "Address the published ports bind to (0.0.0.0: every interface; keep them behind a security group "
        "that admits only your load balancer or clients)."))
    models: list[str] = Field([], description=(
        "Models to load (explicit mode) on every server without its own triton_servers[].models; [] = every model "
        "in the repository."))
    model_control_mode: Literal["explicit", "none", "poll"] = Field("explicit", description="tritonserver --model-control-mode.")
    memory_check: bool = Field(True, description=(
        "Refuse a plan whose models do not fit a server's accelerator memory: in preflight with models_source, "
        'in the agent before it switches current with S3 sync (see README "Serving").'))
    memory_headroom_pct: float = Field(footprint.DEFAULT_HEADROOM_PCT, ge=0, lt=100, description=(
        "Percent of each server's device memory the memory check and `tritonfleet plan` keep free."))
    repository_header: str = Field(hc.REPOSITORY_HEADER, description=(
        "Header the model-repository API (load/unload/index) requires; lowercase (gRPC metadata keys are)."))
    repository_secret: str | None = Field(None, description="Per-fleet secret value of that header (required; keep it out of git).")
    python_shm_default_byte_size: int = Field(16777216, ge=1 << 20, le=64 << 30, description=(
        "python backend shm-default-byte-size (1 MiB to 64 GiB)."))
    extra_args: list[str] = Field([], description="Extra tritonserver arguments (not the flags tritonfleet manages).")
    health_timeout: int = Field(180, ge=1, le=3600, description="Seconds to wait for server and models to become ready.")
    neuron_rt_log_level: Literal["TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL"] = Field(
        "ERROR", description="NEURON_RT_LOG_LEVEL in the containers.")
    neuron_runtime_version: Version | None = Field(None, description=(
        "aws-neuronx-runtime-lib in the image when the image does not label it (None: from the release)."))
    restart_policy: Literal["no", "always", "unless-stopped", "on-failure"] = Field("unless-stopped", description=(
        'Docker restart policy of the containers (Docker owns their lifecycle; see "Serving").'))
    host_network: bool = Field(False, description="Host networking (off: ports are published per server).")
    udev_mount: bool = Field(True, description="Mount /lib/udev read-only at /mylib/udev, where the Neuron Triton scripts expect it.")
    metrics: bool = Field(True, description="Metrics endpoint (port 8002 of each server).")

    restricted_apis: list[Literal["model-repository", "logging", "trace", "shared-memory", "statistics",
                                  "model-config", "metadata", "health", "inference"]] = Field(
        ["model-repository", "logging", "trace", "shared-memory"], description=(
            "Triton APIs that answer only with the repository header (HTTP and gRPC); metrics and inference stay "
            "open. Remove an entry to open that API."))

    _placements: tuple[Placement, ...] = PrivateAttr(default=())
    _index = field_validator("neuron_pip_index")(lambda v: http_url(v))
    _refs = field_validator("image", "base_image")(lambda v: image_reference(v))
    _paths = field_validator("image_archive")(lambda v: absolute_path(v))

    _shm = field_validator("shm_size")(matching(r"^\d+[kmg]?$", "expected a size like 1g or 512m"))

    @field_validator("repository_header")
    @classmethod
    def _header(cls, v: str) -> str:
        if not re.match(r"^[a-z0-9-]+$", v):
            raise ValueError("expected a lowercase header name (a-z, 0-9, '-'): gRPC metadata keys are lowercase "
                             "and Triton compares them exactly")
        return v

    @field_validator("repository_secret")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        if v is not None and (len(v) < 16 or not re.match(r"^[A-Za-z0-9._~+/-]+$", v)):
            raise ValueError("expected at least 16 characters of [A-Za-z0-9._~+/-]")
        return v

    @field_validator("models")
    @classmethod
    def _models(cls, v: list[str]) -> list[str]:
        return list(check_model_names(v))

    @field_validator("neuron_frameworks")
    @classmethod
    def _pinned(cls, v: list[str] | None) -> list[str] | None:
        for req in v or []:
            if "==" not in req:
                raise ValueError(f"{req!r} is not pinned: give each package a version (name==version), so one "
                                 "image tag is always one image")
        return v

    @field_validator("extra_args")
    @classmethod
    def _unmanaged(cls, v: list[str]) -> list[str]:
        for arg in v:
            flag = arg.split("=", 1)[0]
            if flag in MANAGED_FLAGS:
                raise ValueError(f"{flag} is managed by tritonfleet (set the triton_* keys instead)")
        return v

    @field_validator("neuron_runtime_version")
    @classmethod
    def _runtime(cls, v: str | None) -> str | None:
        if v is not None:
            compat.parse_version(v)
        return v

    @model_validator(mode="after")
    def _place(self, info: ValidationInfo) -> Settings:
        instance = (info.context or {}).get("instance")
        # a general-purpose host (no accelerator, e.g. a load balancer of the lb group) has no Triton server
        if instance is not None and instance.has_accelerator:
            try:
                self._placements = tuple(place(instance, self.servers, bind_address=self.bind_address,
                                               models=self.models))
            except PlacementError as exc:
                raise FieldProblem(exc.field, exc.value, exc.message) from None
        return self

    @property
    def placements(self) -> tuple[Placement, ...]:
        """Where each server runs (computed from ``servers`` and the instance type during validation)."""
        return self._placements


def container_runtime_version(cfg: HostConfig) -> str | None:
    """aws-neuronx-runtime-lib version inside the Triton image (data, or the SDK release's)."""
    return imagespec.runtime_version(cfg)


def _checks(cfg: HostConfig) -> None:
    t: Settings = cfg.triton
    if t.image_source == "archive" and not (t.image_archive or t.image_archive_src):
        raise FieldProblem("triton_image_archive", MISSING,
                           "required when triton_image_source is 'archive' (path of a `docker save` tarball)")
    if t.image_source in ("archive", "pull") and not t.image:
        raise FieldProblem("triton_image", MISSING, f"required when triton_image_source is '{t.image_source}'")
    if (t.model_control_mode == "explicit" or t.restricted_apis) and not t.repository_secret:
        raise FieldProblem("triton_repository_secret", MISSING,
                           "required: a per-fleet secret that guards Triton's model-repository API")
    if t.image_archive_src is not None and not os.path.isfile(t.image_archive_src):
        raise FieldProblem("triton_image_archive_src", t.image_archive_src, "no such file on the controller")
    python_requirements(cfg)
    _model_checks(cfg)
    _memory_checks(cfg)
    runtime = container_runtime_version(cfg)
    if cfg.instance.is_neuron and runtime:
        # the driver the neuron role pins against the runtime the data declares: both ways (a runtime that needs
        # a newer driver, a driver that needs a newer runtime), before the driver or anything else changes
        found = compat.check_driver_runtime_finding(dkms_pin(cfg), runtime, cfg.instance.neuron_arch,
                                                    subject=f"host {cfg.name}")
        message = f"{found.link}: {found.line}" + (f": {found.fix}" if found.fix else "")
        if found.verdict == compat.FAIL:
            raise FieldProblem("triton_neuron_runtime_version", runtime, message)
        if found.verdict == compat.WARN:
            logger.warning(f"{cfg.name}: compatibility warning: {message}")


def _model_checks(cfg: HostConfig) -> None:
    """Each server's ``models`` (and the host's ``triton_models``): explicit model control only, not an empty
    list on a host that has models, and, where the controller knows the repository, models it has."""
    t: Settings = cfg.triton
    names = [p.name for p in t.placements] or [f"triton-{i}" for i in range(len(t.servers))]
    known = models_role.repository_models(cfg)
    lists: list[tuple[str, str, list[str]]] = [("triton_models", "", list(t.models))]
    for i, spec in enumerate(t.servers):
        if spec.models is None:
            continue
        field, server = f"triton_servers[{i}].models", f"server {names[i] if i < len(names) else i}: "
        if t.model_control_mode != "explicit":
            raise FieldProblem(field, spec.models, f"{server}has no effect with triton_model_control_mode "
                               f"'{t.model_control_mode}', where every server loads every model (use 'explicit')")
        if not spec.models and (t.models or known is None or known):
            raise FieldProblem(field, spec.models, f"{server}an empty list loads no model, and this host has "
                               "models: remove the server or give it models")
        lists.append((field, server, spec.models))
    if known is None:
        return
    for field, server, models in lists:
        missing = [m for m in models if m not in known]
        if missing:
            raise FieldProblem(field, models, f"{server}{'model' if len(missing) == 1 else 'models'} "
                               f"{', '.join(missing)} not in the repository (models_source {cfg.models.source} "
                               f"has {', '.join(known) or 'no model'})")


def accelerator(cfg: HostConfig) -> Literal["neuron", "gpu"]:
    return "neuron" if cfg.instance.is_neuron else "gpu"


def loaded_models(cfg: HostConfig, p: Placement) -> tuple[str, ...] | None:
    """The models server ``p`` loads, None for every model of the repository (any mode but explicit)."""
    return p.models if cfg.triton.model_control_mode == "explicit" else None


def _memory_checks(cfg: HostConfig) -> None:
    """Where the repository is on the controller (``models_source``), each server's models fit its devices'
    memory less ``triton_memory_headroom_pct`` (:mod:`tritonfleet.footprint`); with S3 sync the agent checks
    each new version before it switches to it (:func:`roles.models.memory_args`)."""
    t: Settings = cfg.triton
    src = cfg.models.source
    if not t.memory_check or not cfg.instance.has_accelerator or not src or cfg.models.s3_uri \
            or not os.path.isdir(src):
        return
    for p in t.placements:
        models = loaded_models(cfg, p)
        spec = t.servers[p.index] if p.index < len(t.servers) else None
        if models is not None and spec is not None and spec.models is not None:
            field, value = f"triton_servers[{p.index}].models", spec.models
        elif models is not None:
            field, value = "triton_models", t.models
        else:
            field, value = "models_source", src
        try:
            prints = footprint.server_footprints(src, models, accelerator(cfg), gpus=len(p.gpus) or 1)
        except footprint.FootprintError as exc:
            raise FieldProblem("models_source", src, f"server {p.name}: cannot tell its models' memory: "
                               f"{exc}") from None
        problem = footprint.does_not_fit(p.name, prints, footprint.server_capacity(cfg.instance, p,
                                                                                    t.memory_headroom_pct))
        if problem:
            raise FieldProblem(field, value, f"{problem}; give it more devices or fewer models "
                               "(triton_memory_check: false skips this check)")


ROLE = Role("triton", Settings, "Triton containers: image, compatibility gate, devices, limits, health gate",
            checks=_checks, order=70)


def model_names(cfg: HostConfig) -> list[str]:
    """Models the health gate of a server without its own ``models`` waits for: the host's list, else the
    repository's model directories (:func:`server_models` is each server's)."""
    return list(cfg.triton.models) or models_role.model_names(cfg)


def server_models(cfg: HostConfig, p: Placement) -> list[str]:
    """Models the health gate of server ``p`` waits for: the ones it loads (its own ``models``, else the
    host's), or, when it loads every model, the repository's model directories."""
    return list(p.models) if p.models is not None else models_role.model_names(cfg)


def run_args(cfg: HostConfig, p: Placement) -> list[str]:
    """``docker run`` options for one placed server (no --privileged, only its own devices)."""
    t: Settings = cfg.triton
    args = ["--restart", t.restart_policy]
    for dev in p.device_paths:
        args += ["--device", dev]
    if p.gpus_flag:
        args += ["--gpus", f'"{p.gpus_flag}"']
    args += ["--ulimit", f"memlock={cfg.docker.ulimit_memlock}", "--ulimit", f"stack={cfg.docker.ulimit_stack}",
             "--shm-size", t.shm_size]
    if cfg.instance.is_neuron and t.udev_mount:
        args += ["-v", "/lib/udev:/mylib/udev:ro"]
    if cfg.models.s3_uri and cfg.models.s3_direct:  # Triton reads S3 itself: a region, credentials from IMDS
        if cfg.models.s3_region:
            args += ["-e", f"AWS_DEFAULT_REGION={cfg.models.s3_region}"]
        if cfg.imds_endpoint != DEFAULT_IMDS:
            args += ["-e", f"AWS_EC2_METADATA_SERVICE_ENDPOINT={cfg.imds_endpoint}"]
    else:  # with S3 sync the root of current/ and versions/: a mount of the link itself would pin its target
        args += ["-v", f"{cfg.models.dir}:/models:ro"]
    if p.visible_cores is not None:
        args += ["-e", f"NEURON_RT_VISIBLE_CORES={p.visible_cores}"]
    if cfg.instance.is_neuron:
        args += ["-e", f"NEURON_RT_LOG_LEVEL={t.neuron_rt_log_level}"]
    if t.host_network:
        args += ["--network", "host"]
    else:
        for key, inner in hc.CONTAINER_PORTS.items():
            args += ["-p", f"{p.bind_address}:{p.ports[key]}:{inner}"]
    labels = hc.container_labels(p.name, ",".join(map(str, p.devices or p.gpus)), p.visible_cores or "",
                                 f"{p.bind_address}:{p.http_port}")
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    return args


def server_command(cfg: HostConfig, p: Placement) -> list[str]:
    t: Settings = cfg.triton
    cmd = ["tritonserver", f"--model-repository={models_role.container_repository(cfg)}",
           f"--model-control-mode={t.model_control_mode}"]
    if t.model_control_mode == "explicit":
        cmd += [f"--load-model={m}" for m in (p.models if p.models is not None else ["*"])]
    if t.repository_secret and t.restricted_apis:
        restriction = f"{','.join(t.restricted_apis)}:{t.repository_header}={t.repository_secret}"
        cmd += [f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}"]
    if t.host_network:
        cmd += [f"--http-port={p.http_port}", f"--grpc-port={p.grpc_port}", f"--metrics-port={p.metrics_port}"]
    cmd += [f"--allow-metrics={'true' if t.metrics else 'false'}",
            f"--backend-config=python,shm-default-byte-size={t.python_shm_default_byte_size}",
            *t.extra_args]
    return cmd


def spec_hash(image: str, args: list[str], cmd: list[str]) -> str:
    return hashlib.sha256(json.dumps([image, args, cmd]).encode()).hexdigest()[:16]


@deploy("Triton")
def triton() -> None:
    cfg = config_for()
    base = image_ref(cfg, platform.keyring_file_name(NEURON_REPO))
    _image(cfg, base)
    image = serving_image(cfg, base)
    if image != base:  # the python layer inherits the base's labels (the Neuron runtime's among them)
        _python_layer(cfg, base, image)
    if cfg.instance.is_neuron:
        ops.triton.neuron_compat_gate(name="Neuron runtime in the image vs host driver", image=image,
                                      runtime_from_data=container_runtime_version(cfg),
                                      neuron_arch=cfg.instance.neuron_arch)
    placements = cfg.triton.placements
    ops.triton.prune(name="Remove Triton servers no longer placed here", keep=[p.name for p in placements])
    t: Settings = cfg.triton
    for p in host.loop(placements):
        args, cmd = run_args(cfg, p), server_command(cfg, p)
        digest = spec_hash(image, args, cmd)
        ops.triton.container(name=f"Triton server {p.name}", container=p.name, image=image, spec_hash=digest,
                             run_args=args + ["--label", f"{hc.LABEL_SPEC}={digest}"], command=cmd,
                             # server readiness covers the models it loads at start (strict readiness); models
                             # that are new in this run are loaded by the model gate after the switch
                             url=p.local_url, models=[], timeout=t.health_timeout,
                             secret=t.repository_secret)
    if cfg.models.source:
        ops.models.switch_staged(name="Model repository (switched in)", staging=hc.MODELS_STAGING,
                                 live=cfg.models.dir, previous=hc.MODELS_PREVIOUS)
    for p in host.loop(placements):
        models = server_models(cfg, p)  # each server waits for its own models only
        # with S3 the agent (models role) loads what changed and switches back when a model fails
        if t.model_control_mode == "explicit" and not cfg.models.s3_uri:  # waits for the server first
            ops.triton.models(name=f"Triton server {p.name} models", container=p.name, url=p.local_url,
                              models_dir=cfg.models.dir, previous=hc.MODELS_PREVIOUS, models=models,
                              header=t.repository_header, secret=t.repository_secret,
                              timeout=t.health_timeout,
                              python_requirements=[pin.render() for pin in python_requirements(cfg).pins])
        else:
            ops.triton.ready(name=f"Triton server {p.name} models ready", container=p.name, url=p.local_url,
                             models=models, timeout=t.health_timeout)
