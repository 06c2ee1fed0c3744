"""An ELBv2 target group during a rollout: a host is taken out (deregistered, connections drained) before it
changes and put back (registered, waited for until healthy) after it serves again.

Targets are the hosts' instance ids (host data ``instance_id``, which the EC2 inventory sets) or, for
target groups of type ``ip``, their addresses (``lb_target_id`` overrides both). Ports: the target
group's own.
"""

from __future__ import annotations


class TargetGroupError(Exception):
    """The target group cannot be used (one line)."""


class TargetGroup:
    def __init__(self, arn: str, region: str | None = None, client=None, delay: int = 5, attempts: int = 120) -> None:
        import boto3

        self.arn = arn
        self.client = client or boto3.client("elbv2", region_name=region)
        self.waiter = {"Delay": delay, "MaxAttempts": attempts}
        try:
            group = self.client.describe_target_groups(TargetGroupArns=[arn])["TargetGroups"][0]
        except Exception as exc:
            raise TargetGroupError(f"target group {arn}: {exc}") from None
        self.kind = group.get("TargetType", "instance")

    def target(self, name: str, data: dict) -> dict:
        target = data.get("lb_target_id") or (data.get("instance_id") if self.kind == "instance"
                                               else data.get("ssh_hostname"))
        if not target:
            need = "instance_id" if self.kind == "instance" else "ssh_hostname"
            raise TargetGroupError(f"{name}: {need}: missing (needed to find the host in target group {self.arn}; "
                                   "or set lb_target_id)")
        return {"Id": target}

    def check(self, hosts: list[tuple[str, dict]]) -> None:
        for name, data in hosts:
            self.target(name, data)

    def take_out(self, name: str, data: dict) -> None:
        target = self.target(name, data)
        self.client.deregister_targets(TargetGroupArn=self.arn, Targets=[target])
        self.client.get_waiter("target_deregistered").wait(TargetGroupArn=self.arn, Targets=[target],
                                                           WaiterConfig=self.waiter)

    def put_back(self, name: str, data: dict) -> None:
        target = self.target(name, data)
        self.client.register_targets(TargetGroupArn=self.arn, Targets=[target])
        self.client.get_waiter("target_in_service").wait(TargetGroupArn=self.arn, Targets=[target],
                                                         WaiterConfig=self.waiter)
