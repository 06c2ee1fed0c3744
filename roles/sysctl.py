"""Kernel parameters for inference hosts, persisted in /etc/sysctl.d and applied at once."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from roles import operations as ops
from roles.context import config_for
from tritonfleet.config import Role, RoleSettings

CONF = "/etc/sysctl.d/90-tritonfleet.conf"


class Settings(RoleSettings):
    params: dict[str, str | int] = Field({}, description=(
        'Kernel parameters, e.g. {"net.core.somaxconn": 4096}; written to /etc/sysctl.d/90-tritonfleet.conf '
        "and applied. {} leaves the kernel as it is."))

    @field_validator("params")
    @classmethod
    def _names(cls, v: dict[str, str | int]) -> dict[str, str | int]:
        for key, value in v.items():
            if not re.match(r"^[a-z0-9_]+(\.[a-z0-9_*-]+)+$", key) or not re.match(r"^[\w.: -]+$", str(value)):
                raise ValueError(f"{key!r} = {value!r} is not a sysctl name and value")
        return v


ROLE = Role("sysctl", Settings, "kernel parameters (sysctl.d)", order=15)


@deploy("sysctl")
def sysctl() -> None:
    params = config_for().sysctl.params
    if not params:
        host.noop("no kernel parameters set")
        return
    conf = ops.files.managed(name="sysctl.d file", files={
        CONF: "# Managed by tritonfleet (roles/sysctl.py)\n" + "".join(f"{k} = {v}\n" for k, v in sorted(params.items()))})
    server.shell(name="Apply kernel parameters", commands=[f"sysctl -q -p {CONF}"], _if=conf.did_change)
