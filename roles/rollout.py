"""How ``tritonfleet rollout`` treats the fleet (settings only; the rollout is ``tritonfleet/fleet/rollout.py``):
which load balancer it drains hosts from (an ELBv2 target group, or the HAProxy hosts of the inventory's ``lb``
group, ``roles/lb.py``, whose servers are drained and put back through HAProxy's Runtime API), and the traffic
canary's weight, bake, Prometheus and gate thresholds. A rollout has one value of each: every host's data must
agree (set them in ``group_data/all.py``); a command-line option wins over the data
(:func:`tritonfleet.fleet.canary.options_from_data`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pyinfra.api.exceptions import NoGroupError

from tritonfleet.config import FieldProblem, HostConfig, Role, RoleSettings, http_url, matching


class Settings(RoleSettings):
    lb: Literal["elbv2", "haproxy"] = Field("elbv2", description=(
        "elbv2: the ELBv2 target group rollout_target_group (or --target-group; neither: no load balancer is "
        "told); haproxy: the HAProxy of the lb group's hosts (roles/lb.py), each server drained and put back "
        "over its Runtime API."))
    target_group: str | None = Field(None, description=(
        "elbv2: the target group's ARN (the rollout's --target-group wins)."))

    lb_timeout: int = Field(600, ge=10, le=3600, description=(
        "Seconds a host may take to drain, and to be healthy again, in the load balancer (--lb-timeout)."))
    canary_weight: int | None = Field(None, ge=0, le=100, description=(
        "Traffic canary: percent of the requests the canary hosts get while they bake (--canary-weight); "
        "None: no traffic canary."))
    bake: float | None = Field(None, gt=0, le=86400, description=(
        "Traffic canary: seconds it bakes before the gates judge it (--bake; None: 120)."))
    prometheus: str | None = Field(None, description=(
        "Traffic canary: the Prometheus the gates ask, http(s)://host:port (--prometheus)."))
    max_error_ratio: float = Field(0.01, ge=0, le=1, description=(
        "Gate: the canary's error ratio above which it is rolled back (absolute; 0.01 = 1 % of its requests)."))
    max_latency_ratio: float = Field(1.5, gt=0, description=(
        "Gate: the canary's latency per request above this times the other hosts' rolls it back."))

    _prometheus = field_validator("prometheus")(lambda v: http_url(v))
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


ROLE = Role("rollout", Settings, "how a rollout drains hosts (ELBv2 or HAProxy) and judges a traffic canary",
            checks=_checks, host_checks=_host_checks, order=95)
