"""An ELBv2 target group during a rollout: a host is taken out (deregistered, connections drained) before it
changes and put back (registered, waited for until healthy) after it serves again.

Targets, from the host data ``inventories/ec2.py`` sets: instance target groups take ``ec2_instance_id``,
``ip`` target groups take ``ec2_private_ip`` (never a public address: a load balancer reaches its targets
inside the VPC); ``lb_target_id`` overrides both. Ports: the target group's own. A wait that ends without
the state it waited for raises :class:`TargetGroupError` with what the load balancer last said of the target.
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger(__name__)

# host data key per target type
TARGET_KEYS = {"instance": "ec2_instance_id", "ip": "ec2_private_ip"}
# keys earlier versions read, and what replaced them
RENAMED = {"instance_id": "ec2_instance_id"}


class TargetGroupError(Exception):
    """The target group cannot be used (one line)."""


class TargetGroup:
    def __init__(self, arn: str, region: str | None = None, client=None, delay: float = 5,
                 attempts: int = 120) -> None:
        from tritonfleet.fleet import aws

        self.arn = arn
        self.client = client or aws.client("elbv2", region)
        self.waiter = {"Delay": max(1, int(delay)), "MaxAttempts": max(1, int(attempts))}
        try:
            group = self.client.describe_target_groups(TargetGroupArns=[arn])["TargetGroups"][0]
        except Exception as exc:
            raise TargetGroupError(f"target group {arn}: {exc}") from None
        self.kind = group.get("TargetType", "instance")
        if self.kind not in TARGET_KEYS:
            raise TargetGroupError(f"target group {arn}: target type {self.kind} is not supported "
                                   f"(instance or ip)")

    def target(self, name: str, data: dict) -> dict:
        if data.get("lb_target_id"):
            return {"Id": str(data["lb_target_id"])}
        key = TARGET_KEYS[self.kind]
        if data.get(key):
            return {"Id": str(data[key])}
        old = [k for k, new in RENAMED.items() if new == key and data.get(k)]
        if old:
            raise TargetGroupError(f"{name}: {old[0]}: renamed {key} (set {key}, or lb_target_id)")
        raise TargetGroupError(f"{name}: {key}: missing (needed to find the host in {self.kind} target group "
                               f"{self.arn}; inventories/ec2.py sets it, or set lb_target_id)")

    def check(self, hosts: list[tuple[str, dict]]) -> None:
        for name, data in hosts:
            self.target(name, data)

    def take_out(self, name: str, data: dict) -> None:
        target = self.target(name, data)
        logger.debug("%s: deregistering target %s from %s; waiting until drained", name, target["Id"], self.arn)
        self.client.deregister_targets(TargetGroupArn=self.arn, Targets=[target])
        self._wait("target_deregistered", name, target, "deregistered (drained)")

    def put_back(self, name: str, data: dict) -> None:
        target = self.target(name, data)
        logger.debug("%s: registering target %s in %s; waiting until healthy", name, target["Id"], self.arn)
        self.client.register_targets(TargetGroupArn=self.arn, Targets=[target])
        self._wait("target_in_service", name, target, "healthy")

    def _wait(self, waiter: str, name: str, target: dict, goal: str) -> None:
        from botocore.exceptions import WaiterError

        started = time.monotonic()
        try:
            self.client.get_waiter(waiter).wait(TargetGroupArn=self.arn, Targets=[target], WaiterConfig=self.waiter)
        except WaiterError:
            waited = self.waiter["Delay"] * self.waiter["MaxAttempts"]
            health = self.health(target)
            logger.debug("%s: target %s not %s after %.0fs (a look every %ss, %s at most): %s", name, target["Id"],
                         goal, time.monotonic() - started, self.waiter["Delay"], self.waiter["MaxAttempts"], health)
            raise TargetGroupError(f"{name}: target {target['Id']} not {goal} in {self.arn} after {waited}s "
                                   f"({health})") from None
        logger.debug("%s: target %s %s after %.0fs", name, target["Id"], goal, time.monotonic() - started)

    def health(self, target: dict) -> str:
        """What the target group says of a target now (state and reason), for messages."""
        try:
            found = self.client.describe_target_health(TargetGroupArn=self.arn, Targets=[target])
        except Exception as exc:  # noqa: BLE001 - only for a message
            return f"health unknown: {exc}"
        for desc in found.get("TargetHealthDescriptions", []):
            h = desc.get("TargetHealth", {})
            return " ".join(x for x in (h.get("State"), h.get("Reason"), h.get("Description")) if x) or "no state"
        return "not registered"
