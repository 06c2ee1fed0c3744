"""``tritonfleet fleet autoscale``: a target-tracking scaling policy on Triton's queue time per request.

The host agent publishes each server's average queue time per request (:mod:`tritonfleet.agent.queuetime`:
namespace ``tritonfleet``, metric :data:`~tritonfleet.agent.queuetime.METRIC_NAME`, milliseconds, once with the
dimensions ``fleet`` and ``family`` and once with ``fleet`` alone). The policy tracks the fleet-only copy, the
statistic ``Average`` over every server of the fleet, at ``target_queue_ms``: AWS creates the alarms and adds
instances while requests wait longer than that, and removes them, down to the group's minimum, while they wait
less. Queue time is a metric that falls as instances are added, which target tracking needs.

The group is the fleet's Auto Scaling group (:func:`tritonfleet.fleet.asg.find_groups`, made by ``fleet up
--asg``); its ``MinSize`` and ``MaxSize`` are set here too, and its desired capacity moved into them when it is
outside. The policy has a fixed name (:data:`POLICY_NAME`): ``PutScalingPolicy`` with that name replaces it, and
when the policy and the sizes already are what was asked, nothing is sent at all, so a second run changes
nothing. Every check of the input comes before the first AWS call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from tritonfleet.agent.queuetime import DIMENSION_FLEET, METRIC_NAME, NAMESPACE, UNIT
from tritonfleet.fleet.asg import find_groups
from tritonfleet.fleet.aws import Clients, one_line
from tritonfleet.fleet.tags import FleetError, check_fleet_name

POLICY_NAME = "tritonfleet-queue-time"
POLICY_TYPE = "TargetTrackingScaling"
STATISTIC = "Average"


@dataclass
class AutoscaleResult:
    group: str
    policy_arn: str
    min_size: int
    max_size: int
    desired: int
    changed: list[str] = field(default_factory=list)  # what this run changed, empty when nothing
    lines: list[str] = field(default_factory=list)  # what to print


def check(target_queue_ms: float, min_size: int, max_size: int) -> None:
    """FleetError (one line) for values no group or policy may take."""
    number = isinstance(target_queue_ms, (int, float)) and not isinstance(target_queue_ms, bool)
    if not number or not math.isfinite(target_queue_ms) or target_queue_ms <= 0:
        shown = f"{target_queue_ms:g}" if number else repr(target_queue_ms)
        raise FleetError(f"--target-queue-ms {shown}: expected a number of milliseconds above 0")
    if min_size < 0:
        raise FleetError(f"--min {min_size}: expected 0 or more instances")
    if min_size > max_size:
        raise FleetError(f"--min {min_size} is above --max {max_size}: expected min <= max")


def tracking_configuration(fleet: str, target_queue_ms: float) -> dict[str, Any]:
    """``TargetTrackingConfiguration``: the fleet's average queue time per request, held at the target."""
    return {
        "TargetValue": float(target_queue_ms),
        "CustomizedMetricSpecification": {
            "MetricName": METRIC_NAME, "Namespace": NAMESPACE, "Statistic": STATISTIC, "Unit": UNIT,
            "Dimensions": [{"Name": DIMENSION_FLEET, "Value": fleet}]},
        "DisableScaleIn": False,
    }


def _comparable(config: dict[str, Any] | None) -> tuple | None:
    """What of a policy's configuration this module sets, in a form two descriptions can be compared by."""
    if not config:
        return None
    spec = config.get("CustomizedMetricSpecification") or {}
    dims = tuple(sorted((d.get("Name"), d.get("Value")) for d in spec.get("Dimensions") or ()))
    return (float(config.get("TargetValue", 0)), spec.get("MetricName"), spec.get("Namespace"),
            spec.get("Statistic"), spec.get("Unit"), dims, bool(config.get("DisableScaleIn", False)))


def _the_group(clients: Clients, fleet: str) -> dict:
    groups = find_groups(clients, fleet)
    if not groups:
        raise FleetError(f"fleet {fleet} has no Auto Scaling group: create it with `tritonfleet fleet up --asg ...`")
    if len(groups) > 1:
        names = ", ".join(sorted(g["AutoScalingGroupName"] for g in groups))
        raise FleetError(f"fleet {fleet} has {len(groups)} Auto Scaling groups ({names}): expected one")
    return groups[0]


def _policy(clients: Clients, group: str) -> dict | None:
    """The group's policy of :data:`POLICY_NAME`, None when it has none."""
    try:
        found = clients.asg.describe_policies(AutoScalingGroupName=group, PolicyNames=[POLICY_NAME])
    except ClientError as exc:
        raise FleetError(f"Auto Scaling group {group}: cannot read its policies: {one_line(exc)}") from None
    return found["ScalingPolicies"][0] if found.get("ScalingPolicies") else None


def autoscale(clients: Clients, fleet: str, *, target_queue_ms: float, min_size: int,
              max_size: int) -> AutoscaleResult:
    """Set the fleet group's sizes and its queue-time policy; only what differs is sent. ``lines`` of the
    result say what changed and what did not."""
    check_fleet_name(fleet)
    check(target_queue_ms, min_size, max_size)
    group = _the_group(clients, fleet)
    name = group["AutoScalingGroupName"]
    wanted = tracking_configuration(fleet, target_queue_ms)
    current = _policy(clients, name)
    desired = int(group["DesiredCapacity"])
    result = AutoscaleResult(name, current["PolicyARN"] if current else "", min_size, max_size,
                             min(max(desired, min_size), max_size))

    sizes = (int(group["MinSize"]), int(group["MaxSize"]), desired)
    if sizes != (min_size, max_size, result.desired):
        try:
            clients.asg.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=min_size, MaxSize=max_size,
                                                  DesiredCapacity=result.desired)
        except ClientError as exc:
            raise FleetError(f"Auto Scaling group {name}: cannot set its sizes: {one_line(exc)}") from None
        result.changed.append("sizes")
        result.lines.append(f"{name}: min {min_size}, max {max_size}, desired {result.desired} "
                            f"(were min {sizes[0]}, max {sizes[1]}, desired {sizes[2]})")
    else:
        result.lines.append(f"{name}: min {min_size}, max {max_size}, desired {desired}: unchanged")

    same = (current is not None and current.get("PolicyType") == POLICY_TYPE
            and _comparable(current.get("TargetTrackingConfiguration")) == _comparable(wanted))
    what = (f"policy {POLICY_NAME}: {NAMESPACE}/{METRIC_NAME} {STATISTIC} for fleet {fleet} "
            f"held at {target_queue_ms:g} ms")
    if same:
        result.lines.append(f"{what}: unchanged")
    else:
        try:
            made = clients.asg.put_scaling_policy(AutoScalingGroupName=name, PolicyName=POLICY_NAME,
                                                  PolicyType=POLICY_TYPE, TargetTrackingConfiguration=wanted)
        except ClientError as exc:
            raise FleetError(f"Auto Scaling group {name}: cannot put policy {POLICY_NAME}: {one_line(exc)}") from None
        result.policy_arn = made.get("PolicyARN") or (_policy(clients, name) or {}).get("PolicyARN", "")
        result.changed.append("policy")
        was = current.get("TargetTrackingConfiguration", {}).get("TargetValue") if current else None
        result.lines.append(f"{what}: " + (f"replaced (was {was:g} ms)" if isinstance(was, (int, float))
                                            else "replaced" if current else "created"))
    result.lines.append("nothing changed: the group already had these sizes and this policy" if not result.changed
                        else "the policy is replaced by its name: running this again with the same values changes "
                        "nothing")
    return result
