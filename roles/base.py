"""Baseline every Triton host needs: the tools the other roles use and the memlock limit."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pyinfra.api import deploy

from roles import operations as ops
from roles import platform
from roles.context import config_for
from tritonfleet import hostcontract as hc
from tritonfleet.config import Role, RoleSettings, package_name
from tritonfleet.templating import render


class Settings(RoleSettings):
    packages: list[str] = Field(["ca-certificates", "curl", "gnupg"], description=(
        "Packages the roles rely on (keys, downloads), by logical name; the platform maps them "
        "(AL2023's curl-minimal and gnupg2-minimal already provide curl and gpg)."))
    memlock_limit: str = Field("unlimited", description=(
        '/etc/security/limits.d memlock for all users ("unlimited" or a positive number of KiB).'))
    hide_processes: bool = Field(True, description=(
        "Mount /proc with hidepid=invisible: local users see only their own processes, so Triton's command "
        "line (it carries the repository secret) is visible to root only."))

    _packages = field_validator("packages")(lambda v: package_name(v))

    @field_validator("memlock_limit")
    @classmethod
    def _memlock(cls, v: str) -> str:
        if v != "unlimited" and not re.fullmatch(r"[1-9][0-9]{0,18}", v):
            raise ValueError("expected 'unlimited' or a positive number of KiB")
        return v


ROLE = Role("base", Settings, "the tools the other roles use, memlock limit", order=10)


@deploy("Base")
def base() -> None:
    cfg = config_for()
    ops.files.writable_dirs(name="tritonfleet directories writable", paths=[hc.STATE_DIR, hc.OPT_DIR])
    platform.install("Baseline packages", cfg.base.packages)
    if cfg.base.hide_processes:
        ops.system.hide_other_users_processes(name="Other users' processes hidden (/proc hidepid)")
    ops.files.managed(name="memlock limit", files={
        "/etc/security/limits.d/90-tritonfleet-memlock.conf": render("base/limits-memlock.conf.j2",
                                                                         limit=cfg.base.memlock_limit)})
