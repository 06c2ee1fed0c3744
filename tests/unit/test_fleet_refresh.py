"""Instance refresh (``rollout --asg`` primitives) with botocore's Stubber: moto does not implement it."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from tritonfleet.fleet import refresh
from tritonfleet.fleet.tags import FleetError

GROUP = "tritonfleet-prod"


@pytest.fixture
def stub():
    client = boto3.client("autoscaling", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def _state(status, percent, reason=None):
    item = {"InstanceRefreshId": "r-1", "AutoScalingGroupName": GROUP, "Status": status, "PercentageComplete": percent}
    if reason:
        item["StatusReason"] = reason
    return {"InstanceRefreshes": [item]}


DESCRIBE = {"AutoScalingGroupName": GROUP, "InstanceRefreshIds": ["r-1"]}


def test_start_sends_checkpoints_delay_and_min_healthy(stub):
    client, stubber = stub
    stubber.add_response("start_instance_refresh", {"InstanceRefreshId": "r-1"}, expected_params={
        "AutoScalingGroupName": GROUP, "Strategy": "Rolling",
        "Preferences": {"MinHealthyPercentage": 90, "SkipMatching": True, "CheckpointPercentages": [10, 50, 100],
                        "CheckpointDelay": 600, "InstanceWarmup": 900},
        "DesiredConfiguration": {"LaunchTemplate": {"LaunchTemplateId": "lt-1", "Version": "3"}}})
    assert refresh.start_refresh(client, GROUP, min_healthy=90, checkpoints=[10, 50, 100], checkpoint_delay=600,
                                 warmup=900, launch_template=("lt-1", 3)) == "r-1"


def test_poll_until_successful(stub):
    client, stubber = stub
    for status, percent in (("Pending", 0), ("InProgress", 10), ("InProgress", 10), ("InProgress", 60),
                            ("Successful", 100)):
        stubber.add_response("describe_instance_refreshes", _state(status, percent), expected_params=DESCRIBE)
    slept, progress = [], []
    outcome = refresh.wait_refresh(client, GROUP, "r-1", interval=30, sleep=slept.append, clock=lambda: 0,
                                   on_progress=lambda o: progress.append((o.status, o.percent)))
    assert outcome.ok and outcome.line() == f"{GROUP}: instance refresh r-1 successful (100% replaced)"
    assert slept == [30] * 4
    assert progress == [("Pending", 0), ("InProgress", 10), ("InProgress", 60), ("Successful", 100)]


def test_failed_refresh_is_one_line_with_the_reason(stub):
    client, stubber = stub
    stubber.add_response("describe_instance_refreshes", _state(
        "Failed", 40, "Instance i-0abc failed health checks.\nReplacement stopped."), expected_params=DESCRIBE)
    outcome = refresh.wait_refresh(client, GROUP, "r-1", sleep=lambda _s: None)
    assert not outcome.ok
    assert outcome.line() == (f"{GROUP}: instance refresh r-1 failed (40% replaced): Instance i-0abc failed health "
                              "checks. Replacement stopped.")


def test_rolled_back_is_an_outcome_too(stub):
    client, stubber = stub
    stubber.add_response("describe_instance_refreshes", _state("RollbackInProgress", 50))
    stubber.add_response("describe_instance_refreshes", _state("RollbackSuccessful", 100, "rolled back on alarm"))
    outcome = refresh.wait_refresh(client, GROUP, "r-1", sleep=lambda _s: None, clock=lambda: 0)
    assert outcome.status == "RollbackSuccessful" and not outcome.ok


def test_poll_times_out(stub):
    client, stubber = stub
    now = [0.0]
    for _ in range(3):
        stubber.add_response("describe_instance_refreshes", _state("InProgress", 20))

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(FleetError, match="timed out after 60 s waiting for instance refresh r-1 of tritonfleet-prod"):
        refresh.wait_refresh(client, GROUP, "r-1", timeout=60, interval=30, sleep=sleep, clock=lambda: now[0])


def test_refresh_already_running_is_one_line(stub):
    client, stubber = stub
    stubber.add_client_error("start_instance_refresh", "InstanceRefreshInProgress", "An Instance Refresh is already "
                             "in progress and blocks the execution of this Instance Refresh.")
    with pytest.raises(FleetError, match=f"^{GROUP}: an instance refresh is already in progress; wait for it or cancel"):
        refresh.start_refresh(client, GROUP)


def test_unknown_refresh_id(stub):
    client, stubber = stub
    stubber.add_response("describe_instance_refreshes", {"InstanceRefreshes": []})
    with pytest.raises(FleetError, match="instance refresh r-1 not found"):
        refresh.wait_refresh(client, GROUP, "r-1", sleep=lambda _s: None)


@pytest.mark.parametrize("kwargs, message", [
    ({"min_healthy": 101}, "expected 0-100"),
    ({"checkpoints": [50, 20]}, "ascending percentages"),
    ({"checkpoints": [0, 100]}, "ascending percentages"),
    ({"checkpoint_delay": 60}, "needs checkpoints"),
    ({"checkpoints": [50], "checkpoint_delay": 172801}, "needs checkpoints and 0-172800"),
    ({"max_healthy": 250}, "expected 100-200"),
    ({"min_healthy": 0, "max_healthy": 150}, "at most min \\+ 100"),
])
def test_bad_preferences_fail_before_any_call(stub, kwargs, message):
    client, _stubber = stub
    with pytest.raises(FleetError, match=message):
        refresh.start_refresh(client, GROUP, **kwargs)
