"""NVIDIA GPU hosts: driver branch, nvidia-container-toolkit (signed repo) and the Docker runtime
entry (``nvidia-ctk runtime configure``); verified with ``nvidia-smi``. Does nothing on other hosts."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import apt, dnf, files, server, systemd

from roles import operations
from roles.facts import CommandSucceeds, PackageFamily
from roles.preflight import config_for
from tritonfleet.templating import template_path

DEFAULTS = {
    # NVIDIA driver branch.
    "nvidia_driver_branch": "550",
    # Driver package on apt hosts ({branch} is substituted).
    "nvidia_driver_package_apt": "nvidia-driver-{branch}-server",
    # Driver package on dnf hosts; None: the AMI provides the driver (AL2023 GPU DLAMIs) — NVIDIA's
    # CUDA repository for Amazon Linux is not managed by tritonfleet.
    "nvidia_driver_package_dnf": None,
    # nvidia-container-toolkit flat apt repository.
    "nvidia_toolkit_apt_url": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
    # nvidia-container-toolkit rpm repository.
    "nvidia_toolkit_yum_url": "https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64",
    # Repository key URL; None = https://nvidia.github.io/libnvidia-container/gpgkey.
    "nvidia_key_url": None,
    # Expected key fingerprint (required on GPU hosts).
    "nvidia_key_fingerprint": None,
    # Optional nvidia-container-toolkit version pattern, e.g. "1.17.*".
    "nvidia_toolkit_version": None,
}

DAEMON_JSON = "/etc/docker/daemon.json"


@deploy("NVIDIA", data_defaults=DEFAULTS)
def nvidia() -> None:
    cfg = config_for()
    if not cfg.is_gpu:
        host.noop(f"{cfg.instance.name} has no NVIDIA GPUs")
        return
    family = host.get_fact(PackageFamily)
    toolkit = "nvidia-container-toolkit"
    pins = {toolkit: cfg.nvidia.toolkit_version} if cfg.nvidia.toolkit_version else {}
    if family == "apt":
        key = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
        files.directory(name="apt keyrings dir", path="/etc/apt/keyrings", mode="755")
        operations.keyring(name="nvidia-container-toolkit key (fingerprint checked)",
                           src=cfg.nvidia.effective_key_url(), dest=key, fingerprint=cfg.nvidia.key_fingerprint)
        # The whole file: a line from NVIDIA's instructions with another signed-by would conflict.
        repo = files.put(name="nvidia-container-toolkit repository", mode="644",
                         dest="/etc/apt/sources.list.d/nvidia-container-toolkit.list",
                         src=StringIO(f"deb [signed-by={key}] {cfg.nvidia.toolkit_apt_url} /\n"))
        apt.update(name="apt-get update (NVIDIA repository changed)", _if=[repo.did_change])
        apt.packages(name="NVIDIA driver", packages=[cfg.nvidia.driver_package("apt")], no_recommends=True)
        if pins:
            operations.pinned_packages(name="nvidia-container-toolkit (pinned)", pins=pins, family="apt")
        else:
            apt.packages(name="nvidia-container-toolkit", packages=[toolkit], no_recommends=True)
    else:
        key = "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit"
        operations.keyring(name="nvidia-container-toolkit key (fingerprint checked)",
                           src=cfg.nvidia.effective_key_url(), dest=key, fingerprint=cfg.nvidia.key_fingerprint,
                           armored=True)
        files.template(name="nvidia-container-toolkit repository",
                       src=str(template_path("nvidia/nvidia-container-toolkit.repo.j2")),
                       dest="/etc/yum.repos.d/nvidia-container-toolkit.repo", mode="644",
                       url=cfg.nvidia.toolkit_yum_url, key_path=key)
        driver = cfg.nvidia.driver_package("dnf")
        if driver:
            dnf.packages(name="NVIDIA driver", packages=[driver])
        if pins:
            operations.pinned_packages(name="nvidia-container-toolkit (pinned)", pins=pins, family="dnf")
        else:
            dnf.packages(name="nvidia-container-toolkit", packages=[toolkit])
    configured = host.get_fact(CommandSucceeds, command=f"grep -q '\"nvidia\"' {DAEMON_JSON}")
    ctk = server.shell(name="nvidia-ctk runtime configure --runtime=docker",
                       commands=["nvidia-ctk runtime configure --runtime=docker"],
                       _if=lambda: not configured)
    systemd.service(name="Restart Docker (runtime added)", service="docker.service", running=None, restarted=True,
                    _if=ctk.did_change)
    operations.verify_gpus(name="GPUs match the instance type", instance_type=cfg.instance.name,
                           expected=cfg.instance.device_count)
