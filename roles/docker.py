"""Docker engine: package, ``/etc/docker/daemon.json`` and the service (restarted only on config change)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from roles import operations as ops
from roles import platform
from roles.context import config_for
from roles.facts.packages import InstalledPackages
from tritonfleet.config import HostConfig, Limit, Role, RoleSettings, absolute_path, matching, package_name
from tritonfleet.templating import render

#: Engines from Docker's own repositories: left as they are.
DOCKER_CE = "docker-ce"
DOCKER_UNIT = "docker.service"


class Settings(RoleSettings):
    package: str | None = Field(None, description=(
        "Engine package; None = the platform's (docker.io on Ubuntu/Debian, docker on Amazon Linux 2023)."))
    data_root: str | None = Field(None, description=(
        "Optional data-root (e.g. an instance-store or EBS mount); None keeps /var/lib/docker."))
    log_max_size: str = Field("100m", description="json-file log rotation: size of one log file.")
    log_max_file: int = Field(5, ge=1, le=100, description="json-file log rotation: files kept per container.")
    live_restore: bool = Field(True, description="Keep containers running while dockerd restarts (config changes, upgrades).")
    ulimit_memlock: Limit = Field(-1, description=(
        "memlock limit of every container, default-ulimits and Triton's --ulimit (-1 = unlimited; Neuron needs it)."))
    ulimit_stack: Limit = Field(67108864, description=(
        "stack limit of every container, default-ulimits and Triton's --ulimit (64 MiB)."))

    _abs = field_validator("data_root")(lambda v: absolute_path(v))
    _package = field_validator("package")(lambda v: package_name(v))

    _size = field_validator("log_max_size")(matching(r"^\d+[kmg]$", "expected a size like 100m"))


ROLE = Role("docker", Settings, "Docker engine, daemon.json (log rotation, live-restore, ulimits, nvidia runtime)",
            order=40)


def daemon_config(cfg: HostConfig) -> dict:
    """The daemon.json content for a host (the only writer of the nvidia runtime entry)."""
    d: Settings = cfg.docker
    config: dict = {
        "log-driver": "json-file",
        "log-opts": {"max-size": d.log_max_size, "max-file": str(d.log_max_file)},
        "live-restore": d.live_restore,
        "default-ulimits": {
            "memlock": {"Name": "memlock", "Soft": d.ulimit_memlock, "Hard": d.ulimit_memlock},
            "stack": {"Name": "stack", "Soft": d.ulimit_stack, "Hard": d.ulimit_stack},
        },
    }
    if d.data_root:
        config["data-root"] = d.data_root
    if cfg.instance.is_gpu:
        # The entry `nvidia-ctk runtime configure --runtime=docker` would write.
        config["runtimes"] = {"nvidia": {"path": "nvidia-container-runtime", "args": []}}
    return config


@deploy("Docker engine")
def docker() -> None:
    cfg = config_for()
    if DOCKER_CE in host.get_fact(InstalledPackages):
        host.noop("docker-ce (Docker's own packages) is installed; the engine is left as it is")
    else:
        platform.install("Docker engine package", [cfg.docker.package or "docker"])
    if cfg.docker.data_root:
        files.directory(name="Docker data-root", path=cfg.docker.data_root, mode="711")
    daemon_json = ops.files.managed(name="daemon.json", files={
        "/etc/docker/daemon.json": render("docker/daemon.json.j2", config=daemon_config(cfg))})
    ops.services.units(name="Docker running and enabled", units=[DOCKER_UNIT], running=True, enabled=True)
    ops.services.units(name="Restart Docker for the new daemon.json", units=[DOCKER_UNIT], restarted=True,
                       _if=daemon_json.did_change)
