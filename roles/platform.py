"""Operations that differ per platform, behind one interface: roles call these, never apt or dnf.

The :class:`~tritonfleet.platforms.Platform` (chosen once by preflight) says which package family a
host uses and what its packages are called; this module turns that into operations.
"""

from __future__ import annotations

from collections.abc import Mapping

from roles import operations as ops
from roles.context import config_for
from tritonfleet import imagespec
from tritonfleet.config import checked
from tritonfleet.platforms import Platform
from tritonfleet.templating import render

APT_KEYRINGS = "/etc/apt/keyrings"
RPM_KEYS = "/etc/pki/rpm-gpg"


def current() -> Platform:
    platform = config_for().platform
    if platform is None:  # preflight always sets it; a HostConfig built by hand may not
        raise RuntimeError("no platform for this host (run preflight)")
    return platform


def install(name: str, logical: list[str] | Mapping[str, str | None], **fmt: str):
    """Install packages by logical name (``docker``, ``kernel-headers``…), optionally at version patterns
    (a mapping name -> pattern). Names the platform provides by itself are skipped."""
    p = current()
    pins = logical if isinstance(logical, Mapping) else dict.fromkeys(logical)
    real = {pkg: pat for n, pat in pins.items() if (pkg := p.package(n, **fmt)) is not None}
    if not real:
        return None
    return ops.packages.install(name=name, pins=real, family=p.family)


def remove(name: str, names: list[str]):
    """Remove packages (real names) where installed."""
    return ops.packages.install(name=name, pins=dict.fromkeys(names), family=current().family, present=False)


def keyring_path(repo_id: str) -> str:
    """Where :func:`signed_repo` keeps the key of ``repo_id`` on this platform."""
    if current().family == "apt":
        return f"{APT_KEYRINGS}/{repo_id}.gpg"
    return f"{RPM_KEYS}/RPM-GPG-KEY-{repo_id}"


def signed_repo(title: str, repo_id: str, *, key_url: str, fingerprint: str, apt_url: str, yum_url: str,
                apt_suite: str | None = None, apt_components: str = "main", gpgcheck: bool = True,
                repo_gpgcheck: bool = False) -> None:
    """A package repository whose key is checked against ``fingerprint`` before anything is written.

    apt: a binary keyring in /etc/apt/keyrings and the whole ``sources.list.d/<repo_id>.list`` with
    ``signed-by`` (an older unsigned line would conflict). dnf: the armored key in /etc/pki/rpm-gpg and
    ``yum.repos.d/<repo_id>.repo``. Package lists are refreshed by the next install that needs them.
    ``apt_suite`` None means the OS codename; ``/`` (flat repository) takes no components.
    """
    p = current()
    key = keyring_path(repo_id)
    if p.family == "apt":
        ops.keys.keyring(name=f"{title} key (fingerprint checked)", src=key_url, dest=key,
                         fingerprint=fingerprint)
        suite = apt_suite or checked(p.codename, f"{p.name}'s codename")
        line = f"deb [signed-by={key}] {apt_url} {suite}" + ("" if suite.endswith("/") else f" {apt_components}")
        ops.files.managed(name=f"{title} apt repository",
                          files={f"/etc/apt/sources.list.d/{repo_id}.list": line + "\n"})
    else:
        ops.keys.keyring(name=f"{title} key (fingerprint checked)", src=key_url, dest=key,
                         fingerprint=fingerprint, armored=True)
        ops.files.managed(name=f"{title} dnf repository", files={f"/etc/yum.repos.d/{repo_id}.repo": render(
            "repos/dnf.repo.j2", repo_id=repo_id, title=title, url=yum_url, key_path=key, gpgcheck=gpgcheck,
            repo_gpgcheck=repo_gpgcheck, owner="tritonfleet")})


def keyring_file_name(repo_id: str) -> str:
    """The key of ``repo_id`` as a file name for another apt (e.g. inside an image build): binary keyrings
    end in .gpg, armored ones in .asc (apt's signed-by reads both by extension)."""
    return imagespec.keyring_file_name(repo_id, current().family)
