"""The sandbox's AWS endpoint (tritonfleet/sandbox/awsapi.py): moto's server with the Auto Scaling launch wait, run
as the sandbox runs it (its own process, here on loopback) and driven with boto3 as the fleet code and the hosts'
agent drive it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import ClientError

from tritonfleet.fleet import asg

REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tritonfleet.sandbox.awsapi", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the sandbox's AWS endpoint did not start (exit status {proc.poll()})")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _client(endpoint: str, service: str):
    return boto3.client(service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id="sandbox",
                        aws_secret_access_key="sandbox")


def _group(endpoint: str, name: str, *, hooks: bool, desired: int = 1) -> list[str]:
    ec2, auto = _client(endpoint, "ec2"), _client(endpoint, "autoscaling")
    image = sorted(i["ImageId"] for i in ec2.describe_images(Owners=["amazon"])["Images"])[0]
    ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": image,
                                                                           "InstanceType": "inf2.xlarge"})
    extra = {"LifecycleHookSpecificationList": asg.lifecycle_hooks()} if hooks else {}
    auto.create_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, MaxSize=3, DesiredCapacity=desired,
                                   LaunchTemplate={"LaunchTemplateName": name}, AvailabilityZones=[f"{REGION}a"],
                                   **extra)
    return [i["InstanceId"] for i in auto.describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
        "AutoScalingGroups"][0]["Instances"]]


def _states(endpoint: str, name: str) -> dict[str, tuple[str, str]]:
    (group,) = _client(endpoint, "autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
        "AutoScalingGroups"]
    return {i["InstanceId"]: (i["LifecycleState"], i["HealthStatus"]) for i in group["Instances"]}


def _complete(endpoint: str, name: str, instance: str, result: str, hook: str = asg.LAUNCH_HOOK) -> None:
    _client(endpoint, "autoscaling").complete_lifecycle_action(
        AutoScalingGroupName=name, LifecycleHookName=hook, InstanceId=instance, LifecycleActionResult=result)


def test_a_group_created_with_hooks_has_them_and_its_first_instance_waits(endpoint):
    (instance,) = _group(endpoint, "hooked", hooks=True)
    hooks = _client(endpoint, "autoscaling").describe_lifecycle_hooks(AutoScalingGroupName="hooked")["LifecycleHooks"]
    assert {h["LifecycleHookName"]: h["LifecycleTransition"] for h in hooks} == {
        asg.LAUNCH_HOOK: "autoscaling:EC2_INSTANCE_LAUNCHING", asg.TERMINATE_HOOK: "autoscaling:EC2_INSTANCE_TERMINATING"}
    assert _states(endpoint, "hooked") == {instance: ("Pending:Wait", "Healthy")}


def test_without_a_launch_hook_instances_are_in_service_at_once(endpoint):
    (instance,) = _group(endpoint, "plain", hooks=False)
    assert _states(endpoint, "plain") == {instance: ("InService", "Healthy")}
    with pytest.raises(ClientError, match="No active Lifecycle Action"):
        _complete(endpoint, "plain", instance, "CONTINUE")


def test_heartbeats_then_continue_put_the_instance_in_service_once(endpoint):
    (instance,) = _group(endpoint, "cont", hooks=True)
    auto = _client(endpoint, "autoscaling")
    auto.record_lifecycle_action_heartbeat(AutoScalingGroupName="cont", LifecycleHookName=asg.LAUNCH_HOOK,
                                           InstanceId=instance)
    assert _states(endpoint, "cont") == {instance: ("Pending:Wait", "Healthy")}
    with pytest.raises(ClientError, match="Invalid LifecycleActionResult"):
        _complete(endpoint, "cont", instance, "MAYBE")
    with pytest.raises(ClientError, match="No active Lifecycle Action"):  # the wrong hook
        _complete(endpoint, "cont", instance, "CONTINUE", hook=asg.TERMINATE_HOOK)
    _complete(endpoint, "cont", instance, "CONTINUE")
    assert _states(endpoint, "cont") == {instance: ("InService", "Healthy")}
    with pytest.raises(ClientError, match="No active Lifecycle Action"):  # completed already
        _complete(endpoint, "cont", instance, "CONTINUE")
    with pytest.raises(ClientError, match="No active Lifecycle Action"):
        auto.record_lifecycle_action_heartbeat(AutoScalingGroupName="cont", LifecycleHookName=asg.LAUNCH_HOOK,
                                               InstanceId=instance)


def test_abandon_terminates_and_a_replacement_waits_too(endpoint):
    (instance,) = _group(endpoint, "aband", hooks=True)
    _complete(endpoint, "aband", instance, "ABANDON")
    assert _states(endpoint, "aband") == {instance: ("Terminating", "Unhealthy")}
    _client(endpoint, "autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=False)
    states = _states(endpoint, "aband")
    assert instance not in states and list(states.values()) == [("Pending:Wait", "Healthy")]
    with pytest.raises(ClientError, match="No active Lifecycle Action"):  # not a member any more
        _complete(endpoint, "aband", instance, "CONTINUE")
