"""The ELBv2 traffic canary (tritonfleet/fleet/lb.py ``TargetGroup`` with a canary target group) against moto's
ELBv2, with hosts loaded from ``inventories/ec2.py``: weights in the listener's (or a rule's) forward action,
the canary hosts moved between the main and the canary target group, and what is refused before anything changes.

What moto cannot show: real draining (deregistration delay) and health checks against real targets (moto calls a
registered running instance healthy at once), and that the load balancer really splits requests by the weights:
only the API state (ForwardConfig weights, registrations) is asserted here."""

from __future__ import annotations

import boto3
import pytest

from tests.unit.test_fleet_support import REGION, aws  # noqa: F401 - fixture
from tests.unit.test_rollout_lb import _group, _registered, prod  # noqa: F401 - fixture
from tritonfleet.fleet.lb import BackendView, LoadBalancer, TargetGroup, TargetGroupError


def _balancer(vpc: str) -> str:
    ec2 = boto3.client("ec2", region_name=REGION)
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=f"{REGION}{az}")["Subnet"]["SubnetId"]
               for cidr, az in _free_cidrs(vpc)]
    elb = boto3.client("elbv2", region_name=REGION)
    return elb.create_load_balancer(Name="front", Subnets=subnets, Type="application")["LoadBalancers"][0][
        "LoadBalancerArn"]


def _free_cidrs(vpc: str) -> list[tuple[str, str]]:
    ec2 = boto3.client("ec2", region_name=REGION)
    block = ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"][0]["CidrBlock"]  # e.g. 10.0.0.0/16
    base = block.split("/")[0].rsplit(".", 2)[0]
    return [(f"{base}.250.0/24", "a"), (f"{base}.251.0/24", "b")]


@pytest.fixture
def front(prod):  # noqa: F811
    hosts, vpc = prod
    main, canary = _group(vpc, "instance"), _group(vpc, "instance", "triton-canary")
    elb = boto3.client("elbv2", region_name=REGION)
    listener = elb.create_listener(LoadBalancerArn=_balancer(vpc), Protocol="HTTP", Port=80,
                                   DefaultActions=[{"Type": "forward", "TargetGroupArn": main}])["Listeners"][0][
        "ListenerArn"]
    tg = TargetGroup(main, REGION, delay=1, attempts=3, listener_arn=listener, canary_arn=canary)
    tg.check(hosts)
    for name, data in hosts:
        tg.put_back(name, data)
    return hosts, vpc, tg, elb, listener


def _weights(elb, listener: str) -> dict[str, int]:
    (action,) = elb.describe_listeners(ListenerArns=[listener])["Listeners"][0]["DefaultActions"]
    return {g["TargetGroupArn"]: g["Weight"] for g in action.get("ForwardConfig", {}).get("TargetGroups", [])} or \
        {action["TargetGroupArn"]: 1}


def test_it_is_a_load_balancer(front):
    assert isinstance(front[2], LoadBalancer)


def test_set_weights_moves_the_canary_to_its_group_and_weighs_the_forward_action(front):
    hosts, vpc, tg, elb, listener = front
    canary = hosts[:1]
    iid = canary[0][1]["ec2_instance_id"]
    said = tg.set_weights(canary, 10)
    assert said == f"target groups {tg.arn} 90, {tg.canary_arn} 10"
    assert _weights(elb, listener) == {tg.arn: 90, tg.canary_arn: 10}
    assert _registered(tg.canary_arn) == [iid] and iid not in _registered(tg.arn)
    view = {(v.pool, v.server): v for v in tg.view()}
    assert view[("canary", iid)] == BackendView(tg.canary_arn, "canary", hosts[0][0], iid, "up", 10, None, "healthy")
    assert view[("main", hosts[1][1]["ec2_instance_id"])].weight == 90
    tg.restore_weights()
    assert _weights(elb, listener) == {tg.arn: 1}  # the action as it was: a plain forward
    assert _registered(tg.canary_arn) == [] and iid in _registered(tg.arn)


def test_restore_without_rejoin_leaves_the_canary_out_of_both_groups(front):
    hosts, vpc, tg, elb, listener = front
    tg.set_weights(hosts[:1], 50)
    tg.restore_weights(rejoin=False)
    iid = hosts[0][1]["ec2_instance_id"]
    assert iid not in _registered(tg.arn) and iid not in _registered(tg.canary_arn)
    assert _weights(elb, listener) == {tg.arn: 1}


def test_a_rule_gets_the_weights_and_the_listener_is_left_alone(front):
    hosts, vpc, tg, elb, listener = front
    rule = elb.create_rule(ListenerArn=listener, Priority=10,
                           Conditions=[{"Field": "path-pattern", "Values": ["/v2/*"]}],
                           Actions=[{"Type": "forward", "TargetGroupArn": tg.arn}])["Rules"][0]["RuleArn"]
    ruled = TargetGroup(tg.arn, REGION, delay=1, attempts=3, rule_arn=rule, canary_arn=tg.canary_arn)
    ruled.set_weights(hosts[:1], 25)
    (action,) = elb.describe_rules(RuleArns=[rule])["Rules"][0]["Actions"]
    assert {g["TargetGroupArn"]: g["Weight"] for g in action["ForwardConfig"]["TargetGroups"]} == \
        {tg.arn: 75, tg.canary_arn: 25}
    assert _weights(elb, listener) == {tg.arn: 1}
    ruled.restore_weights()
    (action,) = elb.describe_rules(RuleArns=[rule])["Rules"][0]["Actions"]
    assert _registered(tg.canary_arn) == [] and action.get("TargetGroupArn", tg.arn) == tg.arn


def test_a_canary_group_of_another_target_type_is_refused(front):
    hosts, vpc, tg, elb, listener = front
    ip = _group(vpc, "ip", "triton-ip")
    with pytest.raises(TargetGroupError) as info:
        TargetGroup(tg.arn, REGION, listener_arn=listener, canary_arn=ip)
    assert str(info.value) == (f"canary target group {ip}: target type ip, but the main target group's is instance "
                               "(the hosts' keys must fit both)")


def test_a_listener_that_does_not_forward_to_the_main_group_is_refused(front):
    hosts, vpc, tg, elb, listener = front
    other = _group(vpc, "instance", "elsewhere")
    with pytest.raises(TargetGroupError) as info:
        TargetGroup(other, REGION, listener_arn=listener, canary_arn=tg.canary_arn)
    assert str(info.value) == f"{listener}: does not forward to target group {other} (its forward action must, for a " \
                              "traffic canary)"


def test_a_canary_group_needs_exactly_one_of_listener_and_rule(front):
    hosts, vpc, tg, elb, listener = front
    for kwargs in ({}, {"listener_arn": listener, "rule_arn": "arn:rule"}):
        with pytest.raises(TargetGroupError, match="give one of a listener ARN or a rule ARN"):
            TargetGroup(tg.arn, REGION, canary_arn=tg.canary_arn, **kwargs)


def test_hosts_without_the_groups_key_are_refused_before_anything_changes(front):
    hosts, vpc, tg, elb, listener = front
    name, data = hosts[0]
    with pytest.raises(TargetGroupError, match=f"^{name}: ec2_instance_id: missing"):
        tg.check([(name, {k: v for k, v in data.items() if k != "ec2_instance_id"})])
    assert _weights(elb, listener) == {tg.arn: 1}
