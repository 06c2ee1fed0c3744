"""The sandbox's AWS endpoint: moto's server, with the Auto Scaling launch wait that moto lacks.

moto 5 keeps lifecycle hooks but never acts on them: its instances are ``InService`` at once, it ignores
``LifecycleHookSpecificationList`` and it does not implement ``CompleteLifecycleAction`` or
``RecordLifecycleActionHeartbeat``. A host booted from an Auto Scaling group's user data
(:func:`tritonfleet.sandbox.fleet.boot_host`) completes its launch hook, so this server adds, as AWS does it:

- a group created with lifecycle hook specifications has those hooks from its creation on;
- an instance a group launches while it has a launch hook waits in ``Pending:Wait``;
- ``RecordLifecycleActionHeartbeat`` and ``CompleteLifecycleAction`` on an instance waiting for the launch hook
  (else AWS's ``ValidationError``); CONTINUE puts it ``InService``, ABANDON ``Terminating`` (and unhealthy).
  Termination stays moto's: no instance waits for a termination hook here, so its completion is refused.

Everything else is moto's. Run: ``python -m tritonfleet.sandbox.awsapi -H 192.168.250.1 -p 9000`` (moto_server's
arguments).
"""

from __future__ import annotations

import sys
from typing import Any

LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"


def _hooks(backend: Any, group: str, transition: str | None = None) -> list[Any]:
    return [h for h in backend.lifecycle_hooks.values()
            if h.auto_scaling_group_name == group and (transition is None or h.lifecycle_transition == transition)]


def install() -> None:
    """Patch moto's Auto Scaling model and responses (idempotent)."""
    from moto.autoscaling.exceptions import ValidationError
    from moto.autoscaling.models import FakeAutoScalingGroup
    from moto.autoscaling.responses import AutoScalingResponse
    from moto.core.responses import EmptyResult

    if getattr(AutoScalingResponse, "_tritonfleet_sandbox", False):
        return
    spawn = FakeAutoScalingGroup.replace_autoscaling_group_instances
    create = AutoScalingResponse.create_auto_scaling_group

    def replace_instances(self: Any, count_needed: int, propagated_tags: dict[str, str]) -> None:
        before = {s.instance.id for s in self.instance_states}
        spawn(self, count_needed, propagated_tags)
        if _hooks(self.autoscaling_backend, self.name, LAUNCHING):
            for state in self.instance_states:
                if state.instance.id not in before:
                    state.lifecycle_state = "Pending:Wait"

    def create_group(self: Any) -> Any:
        specs = self._get_params().get("LifecycleHookSpecificationList") or []
        name = self._get_param("AutoScalingGroupName")
        backend = self.autoscaling_backend
        for spec in specs:  # the hooks first: the group's first instances wait for them, as on AWS
            backend.create_lifecycle_hook(name=spec["LifecycleHookName"], as_name=name,
                                          transition=spec.get("LifecycleTransition"),
                                          timeout=int(spec["HeartbeatTimeout"]) if spec.get("HeartbeatTimeout") else None,
                                          result=spec.get("DefaultResult"))
        return create(self)

    def waiting(self: Any) -> tuple[Any, Any]:
        group_name = self._get_param("AutoScalingGroupName")
        hook_name, instance_id = self._get_param("LifecycleHookName"), self._get_param("InstanceId")
        backend = self.autoscaling_backend
        hook = next((h for h in _hooks(backend, group_name) if h.name == hook_name), None)
        group = backend.autoscaling_groups.get(group_name)
        state = next((s for s in (group.instance_states if group else []) if s.instance.id == instance_id), None)
        if hook is None or hook.lifecycle_transition != LAUNCHING or state is None or state.lifecycle_state != "Pending:Wait":
            raise ValidationError(f"No active Lifecycle Action found with instance ID {instance_id}")
        return hook, state

    def heartbeat(self: Any) -> Any:
        waiting(self)
        return EmptyResult()

    def complete(self: Any) -> Any:
        result = self._get_param("LifecycleActionResult")
        if result not in ("CONTINUE", "ABANDON"):
            raise ValidationError(f"Invalid LifecycleActionResult {result}")
        _hook, state = waiting(self)
        if result == "CONTINUE":
            state.lifecycle_state = "InService"
        else:
            state.lifecycle_state, state.health_status = "Terminating", "Unhealthy"
        return EmptyResult()

    # moto dispatches an action to the response method of its name: these are set as attributes
    setattr(FakeAutoScalingGroup, "replace_autoscaling_group_instances", replace_instances)  # noqa: B010
    for name, method in (("create_auto_scaling_group", create_group), ("record_lifecycle_action_heartbeat", heartbeat),
                         ("complete_lifecycle_action", complete), ("_tritonfleet_sandbox", True)):
        setattr(AutoScalingResponse, name, method)


def main(argv: list[str] | None = None) -> None:
    install()
    from moto.server import main as moto_main

    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
