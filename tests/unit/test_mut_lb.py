"""tritonfleet.fleet.lb against a stub ELBv2 client: what moto does not show (the client it builds, the
waiter's limits, the one-line errors and the target's health in them). Written for the mutants
``make mutate`` found surviving (docs/mutation-survivors.md)."""

from __future__ import annotations

import pytest
from botocore.exceptions import WaiterError

from tritonfleet.fleet.lb import TargetGroup, TargetGroupError

ARN = "arn:tg"


class Waiter:
    def __init__(self, client, name):
        self.client, self.name = client, name

    def wait(self, **kwargs):
        self.client.calls.append((self.name, kwargs))
        if self.client.fail:
            raise WaiterError(name=self.name, reason="Max attempts exceeded", last_response={})


class Client:
    def __init__(self, group=None, health=None, fail=False):
        self.group = {"TargetType": "instance"} if group is None else group
        self.health_reply = {"TargetHealthDescriptions": []} if health is None else health
        self.fail, self.calls = fail, []

    def describe_target_groups(self, TargetGroupArns):
        if isinstance(self.group, Exception):
            raise self.group
        return {"TargetGroups": [self.group]}

    def register_targets(self, **kwargs):
        self.calls.append(("register", kwargs))

    def deregister_targets(self, **kwargs):
        self.calls.append(("deregister", kwargs))

    def get_waiter(self, name):
        return Waiter(self, name)

    def describe_target_health(self, **kwargs):
        self.calls.append(("health", kwargs))
        if isinstance(self.health_reply, Exception):
            raise self.health_reply
        return self.health_reply


def unhealthy(**health):
    return {"TargetHealthDescriptions": [{"Target": {"Id": "i-1"}, "TargetHealth": health}]}


def test_without_a_client_it_builds_one_for_the_region_with_the_fleet_retries(monkeypatch):
    import boto3

    made = {}

    def client(service, **kwargs):
        made.update(kwargs, service=service)
        return Client()

    monkeypatch.setattr(boto3, "client", client)
    TargetGroup(ARN, "eu-west-1")
    assert made["service"] == "elbv2" and made["region_name"] == "eu-west-1"
    assert made["config"].retries == {"total_max_attempts": 10, "mode": "adaptive"}


def test_waiter_limits_default_and_floor():
    assert TargetGroup(ARN, client=Client()).waiter == {"Delay": 5, "MaxAttempts": 120}
    assert TargetGroup(ARN, client=Client(), delay=0, attempts=0).waiter == {"Delay": 1, "MaxAttempts": 1}
    assert TargetGroup(ARN, client=Client(), delay=2.7, attempts=3).waiter == {"Delay": 2, "MaxAttempts": 3}


def test_a_group_without_a_target_type_is_an_instance_group():
    tg = TargetGroup(ARN, client=Client(group={}))
    assert tg.kind == "instance" and tg.target("h1", {"ec2_instance_id": "i-1"}) == {"Id": "i-1"}


def test_unusable_groups_are_one_line_errors():
    with pytest.raises(TargetGroupError) as info:
        TargetGroup(ARN, client=Client(group=RuntimeError("AccessDenied")))
    assert str(info.value) == "target group arn:tg: AccessDenied"
    with pytest.raises(TargetGroupError) as info:
        TargetGroup(ARN, client=Client(group={"TargetType": "lambda"}))
    assert str(info.value) == "target group arn:tg: target type lambda is not supported (instance or ip)"


def test_take_out_and_put_back_name_the_host_whose_key_is_missing():
    tg = TargetGroup(ARN, client=Client())
    for step in (tg.take_out, tg.put_back):
        with pytest.raises(TargetGroupError, match=r"^h2: ec2_instance_id: missing"):
            step("h2", {})


def test_a_wait_that_runs_out_says_host_target_goal_time_and_health():
    client = Client(fail=True, health=unhealthy(State="unhealthy", Reason="Target.FailedHealthChecks",
                                                Description="Health checks failed"))
    tg = TargetGroup(ARN, client=client, delay=2, attempts=3)
    with pytest.raises(TargetGroupError) as info:
        tg.put_back("h1", {"ec2_instance_id": "i-1"})
    assert str(info.value) == ("h1: target i-1 not healthy in arn:tg after 6s "
                               "(unhealthy Target.FailedHealthChecks Health checks failed)")
    with pytest.raises(TargetGroupError) as info:
        tg.take_out("h1", {"ec2_instance_id": "i-1"})
    assert str(info.value).startswith("h1: target i-1 not deregistered (drained) in arn:tg after 6s (")
    waits = [(name, kwargs) for name, kwargs in client.calls if name.startswith("target_")]
    assert waits == [(name, {"TargetGroupArn": ARN, "Targets": [{"Id": "i-1"}],
                             "WaiterConfig": {"Delay": 2, "MaxAttempts": 3}})
                     for name in ("target_in_service", "target_deregistered")]
    assert ("health", {"TargetGroupArn": ARN, "Targets": [{"Id": "i-1"}]}) in client.calls


@pytest.mark.parametrize("reply, said", [
    (unhealthy(State="draining"), "draining"),
    (unhealthy(Reason="Elb.RegistrationInProgress", Description="registering"),
     "Elb.RegistrationInProgress registering"),
    (unhealthy(), "no state"),
    ({"TargetHealthDescriptions": [{"Target": {"Id": "i-1"}}]}, "no state"),
    ({"TargetHealthDescriptions": []}, "not registered"),
    ({}, "not registered"),
    (RuntimeError("throttled"), "health unknown: throttled"),
])
def test_health_in_words(reply, said):
    assert TargetGroup(ARN, client=Client(health=reply)).health({"Id": "i-1"}) == said

