"""NVIDIA GPU hosts: driver branch and nvidia-container-toolkit (signed repository), verified with
``nvidia-smi``. The Docker ``nvidia`` runtime entry has one writer, the docker role's daemon.json.
Does nothing on other hosts."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy

from roles import operations as ops
from roles import platform
from roles.context import config_for
from tritonfleet.config import (
    MISSING,
    FieldProblem,
    HostConfig,
    Role,
    RoleSettings,
    Version,
    checked,
    http_url,
)
from tritonfleet.config import package_name as _package_name
from tritonfleet.fingerprints import fingerprint

REPO_ID = "nvidia-container-toolkit"
TOOLKIT = "nvidia-container-toolkit"


class Settings(RoleSettings):
    driver_branch: Version = Field("550", description="NVIDIA driver branch (e.g. 550).")
    driver_package: str | None = Field(None, description=(
        "Driver package ({branch} is substituted); None = the platform's (nvidia-driver-{branch}-server on "
        "Ubuntu/Debian; none on Amazon Linux 2023, whose GPU DLAMIs ship the driver)."))
    toolkit_apt_url: str = Field("https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
                                 description="nvidia-container-toolkit flat apt repository.")
    toolkit_yum_url: str = Field("https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64",
                                 description="nvidia-container-toolkit rpm repository.")
    key_url: str | None = Field(None, description="Repository key URL; None = https://nvidia.github.io/libnvidia-container/gpgkey.")
    key_fingerprint: str | None = Field(None, description="Expected key fingerprint (required on GPU hosts).")
    toolkit_version: Version | None = Field(None, description='Optional nvidia-container-toolkit version pattern, e.g. "1.17.*".')

    _urls = field_validator("toolkit_apt_url", "toolkit_yum_url", "key_url")(lambda v: http_url(v))
    _fpr = field_validator("key_fingerprint")(lambda v: fingerprint(v))
    _package = field_validator("driver_package")(lambda v: _package_name(v, ("branch",)))

    @field_validator("driver_branch", mode="before")
    @classmethod
    def _branch(cls, v: object) -> str:
        if isinstance(v, bool) or not re.match(r"^\d{3}$", str(v)):
            raise ValueError("expected a driver branch like '550'")
        return str(v)

    def effective_key_url(self) -> str:
        return self.key_url or "https://nvidia.github.io/libnvidia-container/gpgkey"


def _checks(cfg: HostConfig) -> None:
    if cfg.instance.is_gpu and not cfg.nvidia.key_fingerprint:
        raise FieldProblem("nvidia_key_fingerprint", MISSING,
                           "required on GPU hosts: the expected fingerprint of the nvidia-container-toolkit key")


ROLE = Role("nvidia", Settings, "NVIDIA driver and container toolkit (signed repository), GPU check",
            checks=_checks, order=30)


@deploy("NVIDIA")
def nvidia() -> None:
    cfg = config_for()
    if not cfg.instance.is_gpu:
        host.noop(f"{cfg.instance.name} has no NVIDIA GPUs")
        return
    n: Settings = cfg.nvidia
    platform.signed_repo("nvidia-container-toolkit", REPO_ID, key_url=n.effective_key_url(),
                         fingerprint=checked(n.key_fingerprint, "nvidia_key_fingerprint"), apt_url=n.toolkit_apt_url, apt_suite="/",
                         yum_url=n.toolkit_yum_url, gpgcheck=False, repo_gpgcheck=True)
    driver = n.driver_package.format(branch=n.driver_branch) if n.driver_package else "nvidia-driver"
    platform.install("NVIDIA driver", [driver], branch=n.driver_branch)
    platform.install("nvidia-container-toolkit", {TOOLKIT: n.toolkit_version})
    ops.accelerators.verify_gpus(name="GPUs match the instance type", instance_type=cfg.instance.name,
                                 expected=cfg.instance.device_count)
