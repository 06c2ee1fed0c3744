"""The rollout's order and stop rule, with the pyinfra runs replaced by a table of outcomes (the real runs
against the sandbox: tests/e2e/test_08_rollout.py), and the target group with moto."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from tritonfleet.fleet import rollout as ro
from tritonfleet.fleet.lb import TargetGroup, TargetGroupError

HOSTS = [(f"h{i}", {"qa_suites": "qa"}) for i in range(1, 7)]


def test_plan_puts_the_canary_first_then_batches():
    assert ro.plan(["a", "b", "c", "d", "e"], 1, 2) == [["a"], ["b", "c"], ["d", "e"]]
    assert ro.plan(["a", "b", "c"], 0, 2) == [["a", "b"], ["c"]]
    with pytest.raises(ro.RolloutError):
        ro.plan(["a"], 1, 0)


def fake(monkeypatch, tmp_path, failing: dict[str, str], fail_percent: float, batch: int = 2):
    calls = []

    def run(self, deploy, host, data=None):
        calls.append((host, deploy, data))
        step = "qa" if deploy.endswith("qa.py") else "serve" if deploy.endswith("serve.py") else "rollback"
        return (failing.get(host) != step, f"{step} on {host} failed" if failing.get(host) == step else "")

    monkeypatch.setattr(ro.Runner, "run", run)
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {"triton": f"spec-{name}"},
                                                                 "models_version": None})
    monkeypatch.setattr(ro, "serving", lambda name, data: (True, ""))
    opts = ro.Options(inventory="inv.py", batch=batch, canary=1, fail_percent=fail_percent,
                      reports_dir=str(tmp_path))
    return ro.Rollout(opts, HOSTS, out=lambda line: None), calls


def test_a_host_failing_qa_is_rolled_back_with_its_point_and_the_rest_continue(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h3": "qa"}, fail_percent=25)
    report = rollout.run()
    status = {h["host"]: h["status"] for h in report["hosts"]}
    assert status == {"h1": "updated", "h2": "updated", "h3": "rolled back", "h4": "updated", "h5": "updated",
                      "h6": "updated"}
    (rb,) = [c for c in calls if c[1] == "deploys/rollback.py"]
    assert rb[0] == "h3" and json.loads(rb[2]["rollback_point"]) == {"servers": {"triton": "spec-h3"},
                                                                     "models_version": None}
    assert report["failures"] == 1 and report["stopped"] is None
    assert [c[0] for c in calls if c[1] == "deploys/serve.py"][0] == "h1"  # the canary first


def test_over_fail_percent_no_further_batch_starts(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h3": "serve"}, fail_percent=0)
    report = rollout.run()
    status = {h["host"]: h["status"] for h in report["hosts"]}
    assert status["h3"] == "rolled back" and status["h2"] == "updated"
    assert {status[h] for h in ("h4", "h5", "h6")} == {"not started"}
    assert not any(c[0] in ("h4", "h5", "h6") for c in calls) and "no further batches" in report["stopped"]


def test_a_rollback_that_does_not_bring_the_host_back_says_so(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h1": "serve"}, fail_percent=100)
    monkeypatch.setattr(ro, "serving", lambda name, data: (name != "h1", "triton: exited, ready: -"))
    report = rollout.run()
    (h1,) = [h for h in report["hosts"] if h["host"] == "h1"]
    assert h1["status"] == "rollback failed" and "does not serve" in h1["message"]


def test_leftover_runs_of_a_killed_rollout_are_waited_for(tmp_path):
    runner = ro.Runner(ro.Options(inventory="x", reports_dir=str(tmp_path)))
    runner.state_file.write_text(json.dumps({"999999": "h1"}))  # a pid that is gone
    assert runner.wait_for_leftovers(timeout=5) == ["h1"]


@mock_aws
def test_target_group_takes_a_host_out_and_puts_it_back():
    ec2 = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    elb = boto3.client("elbv2", region_name="us-east-1")
    arn = elb.create_target_group(Name="triton", Protocol="HTTP", Port=8000, VpcId=vpc,
                                  TargetType="instance")["TargetGroups"][0]["TargetGroupArn"]
    image = ec2.describe_images()["Images"][0]["ImageId"]
    iid = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    tg = TargetGroup(arn, "us-east-1", client=elb, delay=1, attempts=5)
    tg.put_back("h1", {"instance_id": iid})
    assert [t["Target"]["Id"] for t in elb.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]] \
        == [iid]
    tg.take_out("h1", {"instance_id": iid})
    assert elb.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"] == []
    with pytest.raises(TargetGroupError, match="h2: instance_id: missing"):
        tg.check([("h2", {})])


def test_rollout_asg_starts_an_instance_refresh_and_reports_its_end(monkeypatch):
    from botocore.stub import Stubber
    from click.testing import CliRunner

    from tritonfleet.face.rollout import rollout as command
    from tritonfleet.fleet import refresh

    client = boto3.client("autoscaling", region_name="us-east-1")
    stub = Stubber(client)
    stub.add_response("start_instance_refresh", {"InstanceRefreshId": "r-1"},
                      {"AutoScalingGroupName": "big", "Strategy": "Rolling",
                       "Preferences": {"MinHealthyPercentage": 75, "SkipMatching": True,
                                       "CheckpointPercentages": [10, 50], "CheckpointDelay": 60}})
    stub.add_response("describe_instance_refreshes", {"InstanceRefreshes": [
        {"InstanceRefreshId": "r-1", "Status": "Failed", "PercentageComplete": 10, "StatusReason": "health checks"}]},
        {"AutoScalingGroupName": "big", "InstanceRefreshIds": ["r-1"]})
    monkeypatch.setattr(boto3, "client", lambda *a, **k: client)
    monkeypatch.setattr(refresh.time, "sleep", lambda s: None)
    with stub:
        result = CliRunner().invoke(command, ["--asg", "big", "--min-healthy", "75", "--checkpoints", "10,50",
                                              "--checkpoint-delay", "60", "--region", "us-east-1"])
    assert result.exit_code == 1 and "Failed" in result.output and "health checks" in result.output, result.output
