"""Docker engine: package, ``/etc/docker/daemon.json`` and the service (restarted only on config change)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt, dnf, files, systemd

from roles.facts import PackageFamily
from roles.operations import apt_update_needed
from roles.preflight import config_for
from tritonfleet.config import HostConfig
from tritonfleet.templating import template_path

DEFAULTS = {
    # Engine package on apt hosts (Debian/Ubuntu archive).
    "docker_package_apt": "docker.io",
    # Engine package on dnf hosts (Amazon Linux 2023).
    "docker_package_dnf": "docker",
    # Optional data-root (e.g. an instance-store or EBS mount); None keeps /var/lib/docker.
    "docker_data_root": None,
    # json-file log rotation: size of one log file.
    "docker_log_max_size": "100m",
    # json-file log rotation: files kept per container.
    "docker_log_max_file": 5,
    # Keep containers running while dockerd restarts (config changes, upgrades).
    "docker_live_restore": True,
    # default-ulimits memlock for every container (-1 = unlimited; Neuron needs it).
    "docker_ulimit_memlock": -1,
    # default-ulimits stack for every container (64 MiB).
    "docker_ulimit_stack": 67108864,
}


def daemon_config(cfg: HostConfig) -> dict:
    """The daemon.json content for a host."""
    d = cfg.docker
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
    if cfg.is_gpu:
        # The same entry `nvidia-ctk runtime configure --runtime=docker` writes.
        config["runtimes"] = {"nvidia": {"path": "nvidia-container-runtime", "args": []}}
    return config


@deploy("Docker engine", data_defaults=DEFAULTS)
def docker() -> None:
    cfg = config_for()
    family = host.get_fact(PackageFamily)
    if family == "apt":
        if "docker-ce" in host.get_fact(DebPackages):
            host.noop("docker-ce (Docker's own packages) is installed; the engine is left as it is")
        else:
            apt.packages(name="Docker engine package", packages=[cfg.docker.package_apt], no_recommends=True,
                         update=apt_update_needed([cfg.docker.package_apt]), cache_time=3600)
    else:
        dnf.packages(name="Docker engine package", packages=[cfg.docker.package_dnf])
    if cfg.docker.data_root:
        files.directory(name="Docker data-root", path=cfg.docker.data_root, mode="711")
    daemon_json = files.template(name="daemon.json", src=str(template_path("docker/daemon.json.j2")),
                                 dest="/etc/docker/daemon.json", mode="644", config=daemon_config(cfg))
    systemd.service(name="Docker running and enabled", service="docker.service", running=True, enabled=True)
    systemd.service(name="Restart Docker for the new daemon.json", service="docker.service", running=None, restarted=True,
                    _if=daemon_json.did_change)
