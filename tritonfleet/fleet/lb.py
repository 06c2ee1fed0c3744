"""The rollout's load balancer: one interface (:class:`LoadBalancer`), two backends.

- :class:`TargetGroup`: an ELBv2 (ALB/NLB) target group; with a traffic canary also a listener (or a listener
  rule) that forwards to it and to a canary target group with weights;
- :class:`tritonfleet.fleet.haproxy.HAProxy`: the HAProxy of the inventory's ``lb`` group, driven over SSH
  through its Runtime API.

A host is taken out (drained: no new requests, the ones in flight finish; bounded) before it changes and put back
(waited for until healthy; bounded) after it serves again. Every wait that ends without the state it waited for
raises :class:`LoadBalancerError` (one line) with what the balancer last said.

ELBv2 targets, from the host data ``inventories/ec2.py`` sets: instance target groups take ``ec2_instance_id``,
``ip`` target groups take ``ec2_private_ip`` (never a public address: a load balancer reaches its targets
inside the VPC); ``lb_target_id`` overrides both. Ports: the target group's own.

ELBv2 traffic canary (:meth:`TargetGroup.set_weights`): the listener's default action (or the rule
``rule_arn``) forwards to the main and the canary target group (``ForwardConfig.TargetGroups`` with weights).
The canary hosts are registered in the canary group (waited for until healthy), the weights become
``100 - percent`` / ``percent`` (``ModifyListener`` / ``ModifyRule``), then the canary hosts leave the main group
(drained). :meth:`TargetGroup.restore_weights` undoes it in the reverse order: the forward action as it was, the
canary hosts drained from the canary group, and back in the main group (unless ``rejoin`` is False: a canary
that is rolled back rejoins through its own put-back).
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

logger = logging.getLogger(__name__)

# host data key per target type
TARGET_KEYS = {"instance": "ec2_instance_id", "ip": "ec2_private_ip"}
# keys earlier versions read, and what replaced them
RENAMED = {"instance_id": "ec2_instance_id"}
#: Backend states of :class:`BackendView`.
STATES = ("up", "draining", "down", "maint")


class LoadBalancerError(Exception):
    """The load balancer cannot be used, or did not reach a state in time (one line)."""


class TargetGroupError(LoadBalancerError):
    """The ELBv2 target group cannot be used (one line)."""


@dataclass(frozen=True)
class BackendView:
    """The balancer's view of one backend: a Triton server in an HAProxy backend, or an ELBv2 target."""

    balancer: str  # the lb host (HAProxy) or the target group ARN (ELBv2)
    pool: str  # the HAProxy backend (triton_http, triton_grpc) or "main" / "canary" (ELBv2)
    host: str  # the inventory host ("" when the balancer has a backend no inventory host is known for)
    server: str  # the HAProxy server name, or the ELBv2 target id
    state: str  # one of STATES
    weight: int | None  # HAProxy: the server's weight; ELBv2: the weight of its target group in the forward action
    sessions: int | None  # HAProxy: current sessions (scur); ELBv2: None (not exposed)
    said: str = ""  # what the balancer says of it, in its own words (HAProxy status, ELBv2 state and reason)


@runtime_checkable
class LoadBalancer(Protocol):  # pragma: no mutate block (mutmut's trampolines would become protocol members)
    """What the rollout asks of a load balancer. Every method raises :class:`LoadBalancerError` (one line)."""

    def check(self, hosts: list[tuple[str, dict]]) -> None:
        """Validate before anything changes: every host can be found in the balancer (one line naming the
        host and the field)."""

    def take_out(self, name: str, data: dict) -> None:
        """Drain the host and wait (bounded) until nothing is in flight on it."""

    def put_back(self, name: str, data: dict) -> None:
        """Enable the host and wait (bounded) until the balancer calls it healthy."""

    def set_weights(self, canary: list[tuple[str, dict]], percent: int) -> str:
        """Send ``percent`` % of the requests to the canary hosts; says what was set (one line)."""

    def restore_weights(self, rejoin: bool = True) -> None:
        """Weights back as they were before :meth:`set_weights`; ``rejoin`` False: the canary hosts stay out
        (drained), for a rollback that puts them back itself."""

    def view(self) -> list[BackendView]:
        """The balancer's view of every backend."""


def _health_state(state: str | None) -> str:
    return {"healthy": "up", "draining": "draining"}.get(state or "", "down")


class TargetGroup:
    """The ELBv2 backend of :class:`LoadBalancer` (see the module docstring)."""

    def __init__(self, arn: str, region: str | None = None, client=None, delay: float = 5,
                 attempts: int = 120, *, listener_arn: str | None = None, rule_arn: str | None = None,
                 canary_arn: str | None = None) -> None:
        from tritonfleet.fleet import aws

        self.arn = arn
        self.client = client or aws.client("elbv2", region)
        self.waiter = {"Delay": max(1, int(delay)), "MaxAttempts": max(1, int(attempts))}
        self.kind = self._kind(arn)
        self.listener_arn, self.rule_arn, self.canary_arn = listener_arn, rule_arn, canary_arn
        self.names: dict[str, str] = {}  # target id -> host, for view()
        self._saved: list[dict] | None = None  # the forward action's actions before set_weights
        self._canary: list[tuple[str, dict]] = []
        if canary_arn is not None:
            if not (listener_arn or rule_arn) or (listener_arn and rule_arn):
                raise TargetGroupError(f"canary target group {canary_arn}: give one of a listener ARN or a rule "
                                       "ARN (the forward action whose weights change)")
            canary_kind = self._kind(canary_arn)
            if canary_kind != self.kind:
                raise TargetGroupError(f"canary target group {canary_arn}: target type {canary_kind}, but the main "
                                       f"target group's is {self.kind} (the hosts' keys must fit both)")
            self._forward_actions()  # the listener or rule exists and forwards to the main group

    def _kind(self, arn: str) -> str:
        try:
            group = self.client.describe_target_groups(TargetGroupArns=[arn])["TargetGroups"][0]
        except Exception as exc:
            raise TargetGroupError(f"target group {arn}: {exc}") from None
        kind = group.get("TargetType", "instance")
        if kind not in TARGET_KEYS:
            raise TargetGroupError(f"target group {arn}: target type {kind} is not supported (instance or ip)")
        return kind

    def target(self, name: str, data: dict) -> dict:
        if data.get("lb_target_id"):
            found = {"Id": str(data["lb_target_id"])}
        else:
            key = TARGET_KEYS[self.kind]
            if not data.get(key):
                old = [k for k, new in RENAMED.items() if new == key and data.get(k)]
                if old:
                    raise TargetGroupError(f"{name}: {old[0]}: renamed {key} (set {key}, or lb_target_id)")
                raise TargetGroupError(f"{name}: {key}: missing (needed to find the host in {self.kind} target group "
                                       f"{self.arn}; inventories/ec2.py sets it, or set lb_target_id)")
            found = {"Id": str(data[key])}
        self.names[found["Id"]] = name
        return found

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

    def _wait(self, waiter: str, name: str, target: dict, goal: str, arn: str | None = None) -> None:
        from botocore.exceptions import WaiterError

        arn = arn or self.arn
        started = time.monotonic()
        try:
            self.client.get_waiter(waiter).wait(TargetGroupArn=arn, Targets=[target], WaiterConfig=self.waiter)
        except WaiterError:
            waited = self.waiter["Delay"] * self.waiter["MaxAttempts"]
            health = self.health(target, arn)
            logger.debug("%s: target %s not %s after %.0fs (a look every %ss, %s at most): %s", name, target["Id"],
                         goal, time.monotonic() - started, self.waiter["Delay"], self.waiter["MaxAttempts"], health)
            raise TargetGroupError(f"{name}: target {target['Id']} not {goal} in {arn} after {waited}s "
                                   f"({health})") from None
        logger.debug("%s: target %s %s after %.0fs", name, target["Id"], goal, time.monotonic() - started)

    def health(self, target: dict, arn: str | None = None) -> str:
        """What the target group says of a target now (state and reason), for messages."""
        try:
            found = self.client.describe_target_health(TargetGroupArn=arn or self.arn, Targets=[target])
        except Exception as exc:  # noqa: BLE001 - only for a message
            return f"health unknown: {exc}"
        for desc in found.get("TargetHealthDescriptions", []):
            h = desc.get("TargetHealth", {})
            return " ".join(x for x in (h.get("State"), h.get("Reason"), h.get("Description")) if x) or "no state"
        return "not registered"

    # -- traffic canary ------------------------------------------------------------------------------------

    def _forward_actions(self) -> list[dict]:
        """The actions of the listener's default action or of the rule; refused unless one forwards to the
        main target group."""
        where = self.rule_arn or self.listener_arn
        try:
            if self.rule_arn:
                actions = self.client.describe_rules(RuleArns=[self.rule_arn])["Rules"][0]["Actions"]
            else:
                actions = self.client.describe_listeners(ListenerArns=[self.listener_arn])["Listeners"][0][
                    "DefaultActions"]
        except Exception as exc:
            raise TargetGroupError(f"{where}: {exc}") from None
        if not any(self.arn in _forwarded(a) for a in actions):
            raise TargetGroupError(f"{where}: does not forward to target group {self.arn} (its forward action "
                                   "must, for a traffic canary)")
        return actions

    def _modify(self, actions: list[dict]) -> None:
        if self.rule_arn:
            self.client.modify_rule(RuleArn=self.rule_arn, Actions=actions)
        else:
            self.client.modify_listener(ListenerArn=self.listener_arn, DefaultActions=actions)

    def _weights(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if not self.canary_arn:
            return out
        for action in self._forward_actions():
            for group in action.get("ForwardConfig", {}).get("TargetGroups", []):
                out[group["TargetGroupArn"]] = int(group.get("Weight", 1))
            if action.get("TargetGroupArn") and not action.get("ForwardConfig"):
                out[action["TargetGroupArn"]] = 1
        return out

    def set_weights(self, canary: list[tuple[str, dict]], percent: int) -> str:
        if not self.canary_arn:
            raise TargetGroupError("a traffic canary needs a canary target group and a listener or rule ARN")
        actions = self._forward_actions()
        self._saved, self._canary = copy.deepcopy(actions), list(canary)
        for name, data in canary:
            target = self.target(name, data)
            logger.debug("%s: registering target %s in canary group %s", name, target["Id"], self.canary_arn)
            self.client.register_targets(TargetGroupArn=self.canary_arn, Targets=[target])
            self._wait("target_in_service", name, target, "healthy", self.canary_arn)
        self._modify([_weighted(a, self.arn, self.canary_arn, percent) for a in actions])
        for name, data in canary:
            self.take_out(name, data)
        return f"target groups {self.arn} {100 - percent}, {self.canary_arn} {percent}"

    def restore_weights(self, rejoin: bool = True) -> None:
        if self._saved is None:
            return
        self._modify([_clean(a) for a in self._saved])
        for name, data in self._canary:
            target = self.target(name, data)
            self.client.deregister_targets(TargetGroupArn=self.canary_arn, Targets=[target])
            self._wait("target_deregistered", name, target, "deregistered (drained)", self.canary_arn)
            if rejoin:
                self.put_back(name, data)
        self._saved, self._canary = None, []

    def view(self) -> list[BackendView]:
        weights = self._weights()
        out = []
        for pool, arn in (("main", self.arn), ("canary", self.canary_arn)):
            if not arn:
                continue
            found = self.client.describe_target_health(TargetGroupArn=arn)
            for desc in found.get("TargetHealthDescriptions", []):
                h, tid = desc.get("TargetHealth", {}), desc["Target"]["Id"]
                said = " ".join(x for x in (h.get("State"), h.get("Reason")) if x)
                out.append(BackendView(arn, pool, self.names.get(tid, ""), tid, _health_state(h.get("State")),
                                       weights.get(arn), None, said))
        return out


def _forwarded(action: dict) -> list[str]:
    """The target groups an action forwards to."""
    groups = [g["TargetGroupArn"] for g in action.get("ForwardConfig", {}).get("TargetGroups", [])]
    return groups or ([action["TargetGroupArn"]] if action.get("TargetGroupArn") else [])


def _clean(action: dict) -> dict:
    """An action as ModifyListener/ModifyRule take it: with a ForwardConfig, no TargetGroupArn beside it."""
    out = {k: v for k, v in action.items() if v is not None}
    if out.get("ForwardConfig") and "TargetGroupArn" in out:
        del out["TargetGroupArn"]
    return out


def _weighted(action: dict, main: str, canary: str, percent: int) -> dict:
    """The forward action to ``main`` with the weights ``100 - percent`` (main) and ``percent`` (canary); other
    actions as they are."""
    if main not in _forwarded(action):
        return _clean(action)
    out = _clean(action)
    out.pop("TargetGroupArn", None)
    forward = dict(out.get("ForwardConfig") or {})
    forward["TargetGroups"] = [{"TargetGroupArn": main, "Weight": 100 - percent},
                               {"TargetGroupArn": canary, "Weight": percent}]
    out["ForwardConfig"] = forward
    return out
