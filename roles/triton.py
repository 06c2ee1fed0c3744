"""Triton in Docker: one container per placed server with exactly its devices, cores, limits and ports.

Image: built on the host from ``templates/triton/Dockerfile.neuron.j2`` (tag = content hash, so an
unchanged Dockerfile never rebuilds), pulled from a registry, or ``docker load``-ed from an archive.
Before a Neuron container starts, the image's runtime is checked against the host driver. Containers
are recreated only when their spec changes, run with a Docker restart policy (``unless-stopped``,
with ``live-restore`` in daemon.json), and are gated on ``/v2/health/ready`` plus every model's ready
state. The model-repository API is restricted to callers presenting the per-fleet secret header.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import apt, dnf, files

from roles import operations
from roles.facts import PackageFamily
from roles.preflight import config_for
from tritonfleet.config import HostConfig
from tritonfleet.placement import Placement
from tritonfleet.templating import render

DEFAULTS = {
    # Image reference; None with source "build" means tritonfleet/tritonserver-neuron:<content hash>.
    "triton_image": None,
    # "build" (on the host, from triton_base_image), "pull" (registry/ECR) or "archive" (docker load).
    "triton_image_source": "build",
    # Pulls from ECR (<account>.dkr.ecr.<region>.amazonaws.com/...) authenticate with the instance
    # profile through amazon-ecr-credential-helper (root's docker config.json is managed then).
    "triton_ecr_credential_helper": True,
    # NGC Triton image the Neuron image is built from (24.10 = Triton 2.51).
    "triton_base_image": "nvcr.io/nvidia/tritonserver:24.10-py3",
    # `docker save` tarball on the host (source "archive").
    "triton_image_archive": None,
    # ... or on the controller, uploaded to the host first.
    "triton_image_archive_src": None,
    # pip packages baked into the image; None = per family (inf1: torch-neuron + neuron-cc, inf2/trn: torch-neuronx + neuronx-cc).
    "triton_neuron_frameworks": None,
    # Neuron pip index used by the image build.
    "triton_neuron_pip_index": "https://pip.repos.neuron.amazonaws.com",
    # Servers on this host (see README "Serving"); [] = one server with every device.
    "triton_servers": [],
    # --shm-size of each container.
    "triton_shm_size": "1g",
    # Address the published ports bind to.
    "triton_bind_address": "0.0.0.0",
    # Models to load (explicit mode); [] = every model in the repository.
    "triton_models": [],
    # tritonserver --model-control-mode.
    "triton_model_control_mode": "explicit",
    # Header the model-repository API (load/unload/index) requires. Lowercase: gRPC metadata keys are
    # lowercase and Triton compares them exactly (gRPC clients send "triton-grpc-protocol-<header>").
    "triton_repository_header": "x-tritonfleet-repository-key",
    # Per-fleet secret value of that header (required; keep it out of git).
    "triton_repository_secret": None,
    # python backend shm-default-byte-size.
    "triton_python_shm_default_byte_size": 16777216,
    # Extra tritonserver arguments.
    "triton_extra_args": [],
    # Seconds to wait for server and models to become ready.
    "triton_health_timeout": 180,
    # NEURON_RT_LOG_LEVEL in the containers.
    "triton_neuron_rt_log_level": "ERROR",
    # aws-neuronx-runtime-lib in the image when the image does not label it (None: from the release).
    "triton_neuron_runtime_version": None,
    # Docker restart policy of the containers (Docker owns their lifecycle; see "Serving").
    "triton_restart_policy": "unless-stopped",
    # Host networking (off: ports are published per server).
    "triton_host_network": False,
    # Mount /lib/udev read-only at /mylib/udev, where the Neuron Triton scripts expect it.
    "triton_udev_mount": True,
    # Metrics endpoint (port 8002 of each server).
    "triton_metrics": True,
}

STATE_DIR = "/var/lib/tritonfleet"
ECR_REGISTRY = re.compile(r"^(\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?)/")
CONTAINER_PORTS = {"http_port": 8000, "grpc_port": 8001, "metrics_port": 8002}


def default_frameworks(cfg: HostConfig) -> list[str]:
    if cfg.instance.family == "inf1":
        return ["torch-neuron", "neuron-cc[tensorflow]"]
    return ["torch-neuronx", "neuronx-cc"]


NEURON_KEYS = {  # where the neuron role put the repository key, by package family
    "apt": ("/etc/apt/keyrings/neuron.gpg", "neuron-archive-keyring.gpg"),
    "dnf": ("/etc/pki/rpm-gpg/RPM-GPG-KEY-AMAZON-AWS-NEURON", "neuron-archive-keyring.asc"),  # armored
}


def dockerfile(cfg: HostConfig, key_file: str = NEURON_KEYS["apt"][1]) -> str:
    versions = cfg.neuron.versions()
    runtime_packages = []
    if cfg.instance.family != "inf1":
        for pkg in ("aws-neuronx-runtime-lib", "aws-neuronx-collectives"):
            if pkg in versions:
                runtime_packages.append(f"{pkg}={versions[pkg]}*")
    return render(
        "triton/Dockerfile.neuron.j2", base_image=cfg.triton.base_image, apt_url=cfg.neuron.apt_url,
        runtime_packages=runtime_packages, pip_index=cfg.triton.neuron_pip_index,
        frameworks=cfg.triton.neuron_frameworks or default_frameworks(cfg),
        # the label states what the image really installs (the release pin), never a data override
        runtime_version=versions.get("aws-neuronx-runtime-lib") if runtime_packages else None,
        sdk_release=cfg.neuron.sdk_release,
        family=cfg.instance.neuron_arch or cfg.instance.family, key_file=key_file,
    )


def image_source(cfg: HostConfig) -> str:
    """GPU hosts have nothing to build: "build" means pulling the NGC base image there."""
    if cfg.triton.image_source == "build" and not cfg.is_neuron:
        return "pull"
    return cfg.triton.image_source


def image_ref(cfg: HostConfig, key_file: str = NEURON_KEYS["apt"][1]) -> str:
    if cfg.triton.image:
        return cfg.triton.image
    if not cfg.is_neuron:
        return cfg.triton.base_image
    digest = hashlib.sha256(dockerfile(cfg, key_file).encode()).hexdigest()[:16]
    return f"tritonfleet/tritonserver-neuron:{digest}"


def model_names(cfg: HostConfig) -> list[str]:
    """Models the health gate waits for: the configured list, else the repository's model directories."""
    if cfg.triton.models:
        return list(cfg.triton.models)
    if cfg.models.source and os.path.isdir(cfg.models.source):
        return sorted(d for d in os.listdir(cfg.models.source)
                      if os.path.isfile(os.path.join(cfg.models.source, d, "config.pbtxt")))
    return []


def run_args(cfg: HostConfig, p: Placement) -> list[str]:
    """``docker run`` options for one placed server (no --privileged, only its own devices)."""
    t = cfg.triton
    args = ["--restart", t.restart_policy]
    for dev in p.device_paths:
        args += ["--device", dev]
    if p.gpus_flag:
        args += ["--gpus", f'"{p.gpus_flag}"']
    args += ["--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--shm-size", t.shm_size]
    if cfg.is_neuron and t.udev_mount:
        args += ["-v", "/lib/udev:/mylib/udev:ro"]
    args += ["-v", f"{cfg.models.dir}:/models:ro"]
    if p.visible_cores is not None:
        args += ["-e", f"NEURON_RT_VISIBLE_CORES={p.visible_cores}"]
    if cfg.is_neuron:
        args += ["-e", f"NEURON_RT_LOG_LEVEL={t.neuron_rt_log_level}"]
    if t.host_network:
        args += ["--network", "host"]
    else:
        for key, inner in CONTAINER_PORTS.items():
            args += ["-p", f"{p.bind_address}:{p.ports[key]}:{inner}"]
    args += ["--label", "com.tritonfleet.role=triton", "--label", f"com.tritonfleet.server={p.name}",
             "--label", f"com.tritonfleet.devices={','.join(map(str, p.devices or p.gpus))}",
             "--label", f"com.tritonfleet.cores={p.visible_cores or ''}",
             "--label", f"com.tritonfleet.endpoint={p.bind_address}:{p.http_port}"]
    return args


def server_command(cfg: HostConfig, p: Placement) -> list[str]:
    t = cfg.triton
    cmd = ["tritonserver", "--model-repository=/models", f"--model-control-mode={t.model_control_mode}"]
    if t.model_control_mode == "explicit":
        cmd += [f"--load-model={m}" for m in (t.models or ["*"])]
    if t.repository_secret:
        restriction = f"model-repository:{t.repository_header}={t.repository_secret}"
        cmd += [f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}"]
    if t.host_network:
        cmd += [f"--http-port={p.http_port}", f"--grpc-port={p.grpc_port}", f"--metrics-port={p.metrics_port}"]
    cmd += [f"--allow-metrics={'true' if t.metrics else 'false'}",
            f"--backend-config=python,shm-default-byte-size={t.python_shm_default_byte_size}",
            *t.extra_args]
    return cmd


def spec_hash(image: str, args: list[str], cmd: list[str]) -> str:
    return hashlib.sha256(json.dumps([image, args, cmd]).encode()).hexdigest()[:16]


def _image(cfg: HostConfig, image: str, family: str) -> None:
    t = cfg.triton
    source = image_source(cfg)
    if source == "build":
        key_src, key_file = NEURON_KEYS["apt" if family == "apt" else "dnf"]
        build_dir = posixpath.join(STATE_DIR, "build", image.rsplit(":", 1)[-1])
        files.put(name="Neuron Triton Dockerfile", src=StringIO(dockerfile(cfg, key_file)),
                  dest=f"{build_dir}/Dockerfile", mode="644")
        operations.docker_image(name=f"Triton image {image} (build)", image=image, source="build",
                                build_dir=build_dir, context_files={key_file: key_src})
    elif source == "archive":
        archive = t.image_archive
        if t.image_archive_src:
            archive = archive or posixpath.join(STATE_DIR, "images", os.path.basename(t.image_archive_src))
            files.put(name="Triton image archive upload", src=t.image_archive_src, dest=archive, mode="644")
        operations.docker_image(name=f"Triton image {image} (docker load)", image=image, source="archive",
                                archive=archive)
    else:
        ecr = ECR_REGISTRY.match(image)
        if ecr and t.ecr_credential_helper:
            _ecr_login(ecr.group(1))
        operations.docker_image(name=f"Triton image {image} (pull)", image=image, source="pull")


def _ecr_login(registry: str) -> None:
    """ECR pulls with the instance profile: no AWS keys on the host, no expiring `docker login`."""
    if host.get_fact(PackageFamily) == "apt":
        apt.packages(name="amazon-ecr-credential-helper", packages=["amazon-ecr-credential-helper"],
                     no_recommends=True)
    else:
        dnf.packages(name="amazon-ecr-credential-helper", packages=["amazon-ecr-credential-helper"])
    files.put(name=f"Docker credential helper for {registry}", dest="/root/.docker/config.json", mode="600",
              src=StringIO(json.dumps({"credHelpers": {registry: "ecr-login"}}, indent=2) + "\n"))


@deploy("Triton", data_defaults=DEFAULTS)
def triton() -> None:
    cfg = config_for()
    family = host.get_fact(PackageFamily)
    image = image_ref(cfg, NEURON_KEYS["apt" if family == "apt" else "dnf"][1])
    _image(cfg, image, family)
    if cfg.is_neuron:
        operations.neuron_compat_gate(name="Neuron runtime in the image vs host driver", image=image,
                                      runtime_from_data=cfg.container_runtime_version(),
                                      neuron_arch=cfg.instance.neuron_arch)
    models = model_names(cfg)
    operations.triton_prune(name="Remove Triton servers no longer placed here",
                            keep=[p.name for p in cfg.placements])
    for p in host.loop(cfg.placements):
        args, cmd = run_args(cfg, p), server_command(cfg, p)
        digest = spec_hash(image, args, cmd)
        operations.triton_container(name=f"Triton server {p.name}", container=p.name, image=image,
                                    spec_hash=digest,
                                    run_args=args + ["--label", f"com.tritonfleet.spec={digest}"],
                                    command=cmd, state_dir=STATE_DIR, secret=cfg.triton.repository_secret)
    for p in host.loop(cfg.placements):
        addr = "127.0.0.1" if p.bind_address in ("0.0.0.0", "::") else p.bind_address
        operations.triton_ready(name=f"Triton server {p.name} ready", container=p.name,
                                url=f"http://{addr}:{p.http_port}", models=models,
                                timeout=cfg.triton.health_timeout)
