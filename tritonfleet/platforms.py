"""The host operating systems tritonfleet supports, chosen once per host (pure data, no pyinfra).

Preflight reads pyinfra's ``LinuxDistribution`` fact and calls :func:`from_distribution`; an unsupported
distribution or version is a one-line error naming what was found. Roles never branch on apt or dnf:
they ask the platform (``roles/platform.py`` adds the operations) for package names and installs.

Adding a platform: one :data:`PLATFORMS` entry (package family, codename, the names its packages have).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Platform", "PLATFORMS", "UnsupportedPlatform", "from_distribution", "supported"]

#: Logical package -> name on apt platforms (None: provided by the base system, nothing to install).
_APT = {
    "ca-certificates": "ca-certificates",
    "curl": "curl",
    "gnupg": "gnupg",
    "python3": "python3",
    "docker": "docker.io",
    "kernel-headers": "linux-headers-{kernel}",
    "nvidia-driver": "nvidia-driver-{branch}-server",
    "ecr-credential-helper": "amazon-ecr-credential-helper",
    "node-exporter": "prometheus-node-exporter",
}
#: The same on dnf platforms (AL2023 ships curl-minimal and gnupg2-minimal, which provide curl and gpg;
#: its GPU DLAMIs ship the NVIDIA driver).
_DNF = {
    **_APT,
    "curl": None,
    "gnupg": None,
    "docker": "docker",
    "kernel-headers": "kernel-devel-{kernel}",
    "nvidia-driver": None,
}
#: Logical packages AL2023's repositories do not have (the role that needs one says what to do instead).
_DNF_UNPACKAGED = frozenset({"node-exporter"})


class UnsupportedPlatform(ValueError):
    """The host runs an OS tritonfleet does not support (the message names what was found)."""


@dataclass(frozen=True)
class Platform:
    """One supported OS release: how packages are installed and what they are called there."""

    key: str
    name: str
    family: Literal["apt", "dnf"]
    codename: str | None
    packages: Mapping[str, str | None] = field(repr=False)
    python: str = "3"
    unpackaged: frozenset[str] = frozenset()

    def package(self, logical: str, **fmt: str) -> str | None:
        """This platform's name for a logical package (``docker`` -> ``docker.io``), None when the base
        system provides it. Names the table does not know are taken as they are."""
        name = self.packages.get(logical, logical)
        return name.format(**fmt) if name else None

    def packaged(self, logical: str) -> bool:
        """Whether this platform's repositories have the logical package at all."""
        return logical not in self.unpackaged

    def packages_for(self, logical: list[str], **fmt: str) -> list[str]:
        return [p for p in (self.package(n, **fmt) for n in logical) if p]


PLATFORMS: dict[tuple[str, str], Platform] = {
    ("ubuntu", "22.04"): Platform("ubuntu2204", "Ubuntu 22.04", "apt", "jammy", _APT, "3.10"),
    ("ubuntu", "24.04"): Platform("ubuntu2404", "Ubuntu 24.04", "apt", "noble", _APT, "3.12"),
    ("debian", "12"): Platform("debian12", "Debian 12", "apt", "bookworm", _APT, "3.11"),
    ("amzn", "2023"): Platform("al2023", "Amazon Linux 2023", "dnf", None, _DNF, "3.9", _DNF_UNPACKAGED),
}


def supported() -> str:
    return ", ".join(p.name for p in PLATFORMS.values())


def from_distribution(distro: Mapping | None) -> Platform:
    """The :class:`Platform` for pyinfra's ``LinuxDistribution`` fact, else :class:`UnsupportedPlatform`."""
    meta = (distro or {}).get("release_meta") or {}
    os_id = str(meta.get("ID") or (distro or {}).get("name") or "").strip().lower()
    version = str(meta.get("VERSION_ID") or "").strip()
    platform = PLATFORMS.get((os_id, version))
    if platform is None:
        found = " ".join(x for x in (meta.get("NAME") or (distro or {}).get("name") or os_id, version) if x)
        raise UnsupportedPlatform(f"unsupported OS {found or 'unknown (no /etc/os-release)'!s}; "
                                  f"supported: {supported()}")
    return platform
