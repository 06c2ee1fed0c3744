"""Baseline every Triton host needs: the tools the other roles use and the memlock limit."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import apt, dnf, files

from roles.facts import PackageFamily
from roles.operations import apt_update_needed
from roles.preflight import config_for
from tritonfleet.templating import template_path

DEFAULTS = {
    # Packages the roles rely on (keys, downloads) on apt hosts.
    "base_packages_apt": ["ca-certificates", "curl", "gnupg"],
    # The same on dnf hosts (AL2023 ships curl-minimal and gnupg2-minimal, which provide curl and gpg).
    "base_packages_dnf": ["ca-certificates"],
    # /etc/security/limits.d memlock for all users ("unlimited" or KiB).
    "base_memlock_limit": "unlimited",
}


@deploy("Base", data_defaults=DEFAULTS)
def base() -> None:
    cfg = config_for()
    family = host.get_fact(PackageFamily)
    if family == "apt":
        apt.packages(name="Baseline packages", packages=cfg.base.packages_apt, no_recommends=True,
                     update=apt_update_needed(cfg.base.packages_apt), cache_time=3600)
    else:
        dnf.packages(name="Baseline packages", packages=cfg.base.packages_dnf)
    files.template(name="memlock limit", src=str(template_path("base/limits-memlock.conf.j2")),
                   dest="/etc/security/limits.d/90-tritonfleet-memlock.conf", mode="644",
                   limit=cfg.base.memlock_limit)
