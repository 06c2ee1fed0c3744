"""``tritonfleet fleet autoscale`` on moto: the target-tracking policy on the agent's queue-time metric and the
group's sizes, a second run that changes nothing, and bad input refused in one line before anything changes.

moto stores the policy and the sizes; it never evaluates the policy's alarms nor scales the group."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.unit.test_fleet_support import (
    REGION,
    aws,  # noqa: F401 - fixture
    image_named,
)
from tritonfleet.agent import queuetime
from tritonfleet.face.cli import main
from tritonfleet.fleet import asg, autoscale
from tritonfleet.fleet.tags import FleetError


def make_group(clients, fleet: str = "prod", desired: int = 1) -> str:
    """The fleet's launch template and group, made as ``fleet up --asg`` makes them (asg.py)."""
    data = {"ImageId": image_named(clients, "ubuntu"), "InstanceType": "inf2.xlarge"}
    template = asg.ensure_launch_template(clients, fleet, data)
    subnets = sorted(s["SubnetId"] for s in clients.ec2.describe_subnets(
        Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"])[:2]
    name, created = asg.ensure_group(clients, fleet, template, subnets, desired=desired)
    assert created
    return name


def sent(clients) -> list[str]:
    """The names of the Auto Scaling requests sent from now on."""
    calls: list[str] = []
    clients.asg.meta.events.register("before-call.auto-scaling", lambda model, **_: calls.append(model.name))
    return calls


def group(clients, name: str) -> dict:
    return clients.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def policies(clients, name: str) -> list[dict]:
    return clients.asg.describe_policies(AutoScalingGroupName=name)["ScalingPolicies"]


def test_sets_the_policy_on_the_agent_metric_and_the_sizes(aws):  # noqa: F811
    name = make_group(aws)
    result = autoscale.autoscale(aws, "prod", target_queue_ms=20, min_size=2, max_size=10)
    assert result.changed == ["sizes", "policy"]
    found = group(aws, name)
    assert (found["MinSize"], found["MaxSize"], found["DesiredCapacity"]) == (2, 10, 2)  # desired moved into them
    [policy] = policies(aws, name)
    assert policy["PolicyName"] == autoscale.POLICY_NAME and policy["PolicyType"] == "TargetTrackingScaling"
    assert result.policy_arn == policy["PolicyARN"]
    config = policy["TargetTrackingConfiguration"]
    assert config["TargetValue"] == 20.0 and not config.get("DisableScaleIn")
    spec = config["CustomizedMetricSpecification"]
    # exactly what the agent publishes: its fleet-only copy (CloudWatch matches dimension sets exactly)
    assert (spec["Namespace"], spec["MetricName"], spec["Statistic"], spec["Unit"]) == (
        queuetime.NAMESPACE, queuetime.METRIC_NAME, "Average", "Milliseconds")
    assert spec["Dimensions"] == [{"Name": "fleet", "Value": "prod"}] == queuetime.dimensions("prod")
    assert result.lines[0] == f"{name}: min 2, max 10, desired 2 (were min 1, max 1, desired 1)"
    assert result.lines[1].endswith("held at 20 ms: created")


def test_a_second_run_changes_nothing_and_a_new_target_replaces_the_policy(aws):  # noqa: F811
    name = make_group(aws, desired=4)
    first = autoscale.autoscale(aws, "prod", target_queue_ms=20, min_size=2, max_size=10)
    assert "running this again with the same values changes nothing" in first.lines[-1]
    calls = sent(aws)
    again = autoscale.autoscale(aws, "prod", target_queue_ms=20, min_size=2, max_size=10)
    assert again.changed == [] and again.policy_arn == first.policy_arn
    assert not {"PutScalingPolicy", "UpdateAutoScalingGroup"} & set(calls), calls
    assert again.lines[-1] == "nothing changed: the group already had these sizes and this policy"
    assert all(line.endswith("unchanged") for line in again.lines[:2]), again.lines
    assert group(aws, name)["DesiredCapacity"] == 4  # inside the sizes: left to the policy

    changed = autoscale.autoscale(aws, "prod", target_queue_ms=35.5, min_size=2, max_size=10)
    assert changed.changed == ["policy"] and calls.count("PutScalingPolicy") == 1
    assert changed.lines[1].endswith("held at 35.5 ms: replaced (was 20 ms)")
    [policy] = policies(aws, name)  # replaced by name: still one
    assert policy["TargetTrackingConfiguration"]["TargetValue"] == 35.5

    smaller = autoscale.autoscale(aws, "prod", target_queue_ms=35.5, min_size=1, max_size=3)
    assert smaller.changed == ["sizes"]
    found = group(aws, name)
    assert (found["MinSize"], found["MaxSize"], found["DesiredCapacity"]) == (1, 3, 3)


def _unchanged(clients, name: str, before: dict, calls: list[str]) -> None:
    after = group(clients, name)
    assert {k: after[k] for k in ("MinSize", "MaxSize", "DesiredCapacity")} == before
    assert policies(clients, name) == []
    assert not {"PutScalingPolicy", "UpdateAutoScalingGroup"} & set(calls), calls


BAD = [
    ({"target_queue_ms": 20, "min_size": 5, "max_size": 2}, "--min 5 is above --max 2: expected min <= max"),
    ({"target_queue_ms": 20, "min_size": -1, "max_size": 2}, "--min -1: expected 0 or more instances"),
    ({"target_queue_ms": 0, "min_size": 1, "max_size": 2}, "--target-queue-ms 0: expected a number of milliseconds"),
    ({"target_queue_ms": -3, "min_size": 1, "max_size": 2}, "--target-queue-ms -3: expected a number"),
    ({"target_queue_ms": float("nan"), "min_size": 1, "max_size": 2}, "--target-queue-ms nan: expected a number"),
]


@pytest.mark.parametrize("target, low, high", [(20, 3, 3), (0.5, 0, 0), (1e-3, 0, 1)])
def test_the_bounds_themselves_are_accepted(target, low, high):
    autoscale.check(target, low, high)


@pytest.mark.parametrize("values, message", BAD)
def test_bad_values_are_refused_before_anything_changes(aws, values, message):  # noqa: F811
    name = make_group(aws)
    before = {k: group(aws, name)[k] for k in ("MinSize", "MaxSize", "DesiredCapacity")}
    calls = sent(aws)
    with pytest.raises(FleetError, match=message) as exc:
        autoscale.autoscale(aws, "prod", **values)
    assert "\n" not in str(exc.value)
    assert calls == []  # not even a read
    _unchanged(aws, name, before, calls)


def test_a_fleet_without_a_group_or_a_bad_name_is_refused(aws):  # noqa: F811
    name = make_group(aws, "prod")
    with pytest.raises(FleetError) as exc:
        autoscale.autoscale(aws, "staging", target_queue_ms=20, min_size=2, max_size=10)
    assert str(exc.value) == ("fleet staging has no Auto Scaling group: create it with "
                              "`tritonfleet fleet up --asg ...`")
    with pytest.raises(FleetError, match="fleet name 'Prod'"):
        autoscale.autoscale(aws, "Prod", target_queue_ms=20, min_size=2, max_size=10)
    assert policies(aws, name) == [] and group(aws, name)["MaxSize"] == 1


@pytest.fixture
def cli(aws, monkeypatch):  # noqa: F811
    monkeypatch.setenv("TRITONFLEET_REGION", REGION)
    runner = CliRunner()

    def run(*args):
        return runner.invoke(main, ["fleet", "autoscale", *args], catch_exceptions=False)

    return aws, run


def _one_line_error(result, text):
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"Error: {text}"], result.output


@pytest.mark.parametrize("args, message", [
    (["--fleet", "prod", "--target-queue-ms", "20", "--min", "5", "--max", "2"],
     "--min 5 is above --max 2: expected min <= max"),
    (["--fleet", "prod", "--target-queue-ms", "20", "--min", "-1", "--max", "2"],
     "--min -1: expected 0 or more instances"),
    (["--fleet", "prod", "--target-queue-ms", "0", "--min", "1", "--max", "2"],
     "--target-queue-ms 0: expected a number of milliseconds above 0"),
    (["--fleet", "staging", "--target-queue-ms", "20", "--min", "2", "--max", "10"],
     "fleet staging has no Auto Scaling group: create it with `tritonfleet fleet up --asg ...`"),
])
def test_the_command_refuses_bad_input_in_one_line(cli, args, message):
    clients, run = cli
    name = make_group(clients)
    before = {k: group(clients, name)[k] for k in ("MinSize", "MaxSize", "DesiredCapacity")}
    calls = sent(clients)
    _one_line_error(run(*args), message)
    _unchanged(clients, name, before, calls)


def test_the_command_sets_the_policy_and_says_a_rerun_changes_nothing(cli):
    clients, run = cli
    name = make_group(clients)
    args = ["--fleet", "prod", "--target-queue-ms", "20", "--min", "2", "--max", "10"]
    first = run(*args)
    assert first.exit_code == 0, first.output
    assert "held at 20 ms: created" in first.output and "changes nothing" in first.output
    again = run(*args)
    assert again.exit_code == 0, again.output
    assert "nothing changed" in again.output and again.output.count("unchanged") == 2
    assert len(policies(clients, name)) == 1
