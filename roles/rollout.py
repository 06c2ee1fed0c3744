"""Which load balancer a rollout drains hosts from (settings only; the rollout is ``tritonfleet rollout``,
``tritonfleet/fleet/rollout.py``): an ELBv2 target group, or the HAProxy hosts of the inventory's ``lb`` group
(``roles/lb.py``), whose servers are drained and put back through HAProxy's Runtime API."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pyinfra.api.exceptions import NoGroupError

from tritonfleet.config import FieldProblem, HostConfig, Role, RoleSettings, matching


class Settings(RoleSettings):
    lb: Literal["elbv2", "haproxy"] = Field("elbv2", description=(
        "elbv2: the ELBv2 target group rollout_target_group (or --target-group; neither: no load balancer is "
        "told); haproxy: the HAProxy of the lb group's hosts (roles/lb.py), each server drained and put back "
        "over its Runtime API."))
    target_group: str | None = Field(None, description=(
        "elbv2: the target group's ARN (the rollout's --target-group wins)."))

    _arn = field_validator("target_group")(matching(
        r"arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:\d{12}:targetgroup/[A-Za-z0-9-]{1,32}/[0-9a-f]{16}",
        "expected a target group ARN (arn:aws:elasticloadbalancing:REGION:ACCOUNT:targetgroup/NAME/ID)"))


def _checks(cfg: HostConfig) -> None:
    r: Settings = cfg.rollout
    if r.lb == "haproxy" and r.target_group is not None:
        raise FieldProblem("rollout_target_group", r.target_group, "is for rollout_lb: elbv2 (rollout_lb is haproxy)")


def _host_checks(h, cfg: HostConfig) -> None:
    if cfg.rollout.lb != "haproxy":
        return
    try:
        members = list(h.inventory.get_group("lb"))
    except NoGroupError:
        members = []
    if not members:
        raise FieldProblem("rollout_lb", "haproxy", "the inventory's lb group has no hosts (roles/lb.py runs HAProxy "
                                                   "on them)")


ROLE = Role("rollout", Settings, "which load balancer a rollout drains hosts from (ELBv2 or HAProxy)",
            checks=_checks, host_checks=_host_checks, order=95)
