"""The rollout's order and stop rule, with the pyinfra runs replaced by a table of outcomes (the real runs
against the sandbox: tests/e2e/test_08_rollout.py), and the target group with moto."""

from __future__ import annotations

import json
import logging
import os

import boto3
import pytest
from moto import mock_aws

from tritonfleet.fleet import rollout as ro
from tritonfleet.fleet import runner as rn
from tritonfleet.fleet.lb import TargetGroup, TargetGroupError

HOSTS = [(f"h{i}", {"qa_suites": "qa"}) for i in range(1, 7)]


def test_plan_puts_the_canary_first_then_batches():
    assert ro.plan(["a", "b", "c", "d", "e"], 1, 2) == [["a"], ["b", "c"], ["d", "e"]]
    assert ro.plan(["a", "b", "c"], 0, 2) == [["a", "b"], ["c"]]
    with pytest.raises(ro.RolloutError):
        ro.plan(["a"], 1, 0)


def fake(monkeypatch, tmp_path, failing: dict[str, str], fail_percent: float, batch: int = 2, hosts=HOSTS):
    calls = []

    def run(self, deploy, host, data=None):
        calls.append((host, deploy, data))
        step = "qa" if deploy.endswith("qa.py") else "serve" if deploy.endswith("serve.py") else "rollback"
        return (failing.get(host) != step, f"{step} on {host} failed" if failing.get(host) == step else "")

    def point(name, data):
        calls.append((name, "rollback_point", None))
        if failing.get(name) == "record":
            raise ro.RolloutError(f"{name}: cannot read its host records: Permission denied")
        return {"servers": {"triton": f"spec-{name}"}, "models_version": None}

    monkeypatch.setattr(ro.Runner, "run", run)
    monkeypatch.setattr(ro, "rollback_point", point)
    monkeypatch.setattr(ro, "serving", lambda name, data: (True, ""))
    opts = ro.Options(inventory="inv.py", batch=batch, canary=1, fail_percent=fail_percent,
                      reports_dir=str(tmp_path))
    return ro.Rollout(opts, hosts), calls


def test_a_host_failing_qa_is_rolled_back_with_its_point_and_the_rest_continue(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h3": "qa"}, fail_percent=25)
    report = rollout.run()
    status = {h["host"]: h["status"] for h in report["hosts"]}
    assert status == {"h1": "updated", "h2": "updated", "h3": "rolled back", "h4": "updated", "h5": "updated",
                      "h6": "updated"}
    (rb,) = [c for c in calls if c[1] == "deploys/rollback.py"]
    for host in ("h1", "h3"):  # the point is read before anything changes on the host
        mine = [c[1] for c in calls if c[0] == host]
        assert mine[0] == "rollback_point" and mine[1] == "deploys/serve.py"
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
    assert report["failures"] == 1


def test_a_failed_rollback_counts_and_stops_the_rollout(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h1": "serve"}, fail_percent=0)
    monkeypatch.setattr(ro, "serving", lambda name, data: (False, "triton: exited, ready: -"))
    report = rollout.run()
    assert [h["status"] for h in report["hosts"]] == ["rollback failed"] + ["not started"] * 5
    assert report["failures"] == 1 and "1 of 6 hosts failed" in report["stopped"]
    assert {c[0] for c in calls} == {"h1"}


def test_a_host_whose_point_cannot_be_read_is_not_changed_and_counts(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h1": "record"}, fail_percent=0)
    report = rollout.run()
    h1 = report["hosts"][0]
    assert (h1["status"], h1["failed_step"]) == ("not changed", "record") and "Permission denied" in h1["message"]
    assert report["failures"] == 1 and report["stopped"]
    assert [c[1] for c in calls] == ["rollback_point"]  # nothing was applied to it


class FakeLB:
    """A load balancer whose put-back fails for some hosts, as a target group whose targets never turn
    healthy does (the real one against moto: tests/unit/test_rollout_lb.py)."""

    def __init__(self, unhealthy=()):
        self.unhealthy, self.calls = set(unhealthy), []

    def take_out(self, name, data):
        self.calls.append(("out", name))

    def put_back(self, name, data):
        self.calls.append(("back", name))
        if name in self.unhealthy:
            raise TargetGroupError(f"{name}: target i-1 not healthy in arn:tg after 600s (unhealthy "
                                   "Target.FailedHealthChecks)")


def test_a_host_that_never_turns_healthy_in_the_load_balancer_is_a_failure(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {}, fail_percent=0)
    rollout.lb = FakeLB(unhealthy={"h1"})
    report = rollout.run()
    h1 = report["hosts"][0]
    assert h1["status"] == "out of the load balancer" and h1["failed_step"] == "put back"
    assert "Target.FailedHealthChecks" in h1["message"]
    assert report["failures"] == 1 and "no further batches" in report["stopped"]
    assert {h["status"] for h in report["hosts"][1:]} == {"not started"}


def test_a_rolled_back_host_that_cannot_rejoin_keeps_both_reasons(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h1": "qa"}, fail_percent=100)
    rollout.lb = FakeLB(unhealthy={"h1"})
    report = rollout.run()
    h1 = report["hosts"][0]
    assert h1["status"] == "out of the load balancer" and h1["failed_step"] == "qa"
    assert "qa on h1 failed" in h1["message"] and "put back" in h1["message"]
    assert report["failures"] == 1
    assert [h["status"] for h in report["hosts"][1:]] == ["updated"] * 5


def test_a_host_that_did_not_serve_after_its_rollback_stays_out_of_the_load_balancer(monkeypatch, tmp_path):
    rollout, calls = fake(monkeypatch, tmp_path, {"h2": "serve"}, fail_percent=100)
    monkeypatch.setattr(ro, "serving", lambda name, data: (False, "no servers"))
    rollout.lb = FakeLB()
    rollout.run()
    assert ("out", "h2") in rollout.lb.calls and ("back", "h2") not in rollout.lb.calls
    assert ("back", "h1") in rollout.lb.calls


def test_the_exit_code_is_non_zero_and_the_report_names_the_host_out_of_the_load_balancer(monkeypatch, tmp_path,
                                                                                          caplog):
    from tritonfleet.access import inventory
    from tritonfleet.fleet import lb

    fake(monkeypatch, tmp_path, {}, fail_percent=0)
    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: HOSTS[:3]: (_read(path), {}))
    unhealthy = FakeLB(unhealthy={"h1"})

    class Group(FakeLB):
        def __init__(self, *args, **kwargs):
            self.__dict__ = unhealthy.__dict__

        def check(self, hosts):
            pass

    monkeypatch.setattr(lb, "TargetGroup", Group)
    caplog.set_level(logging.INFO, logger=ro.logger.name)
    opts = ro.Options(inventory="inv.py", canary=1, reports_dir=str(tmp_path), target_group="arn:tg")
    assert ro.main(opts) == 1
    lines = [r.getMessage() for r in caplog.records if r.name == ro.logger.name]
    (path,) = tmp_path.glob("rollout-*.json")
    written = json.loads(path.read_text())
    assert written["failures"] == 1 and written["hosts"][0]["status"] == "out of the load balancer"
    assert any("h1: out of the load balancer" in line for line in lines)


def test_rollback_point_reads_records_and_current_with_models_dir_quoted(monkeypatch, tmp_path):
    """The command runs in a real shell over a host tree in tmp_path: a models_dir with spaces and a command
    substitution reads its ``current`` and runs nothing."""
    import subprocess

    from tritonfleet import hostcontract as hc
    from tritonfleet.access import ssh

    servers = tmp_path / "servers"
    servers.mkdir()
    record = hc.ServerRecord(name="triton", image="img:1", spec="spec-a", run_args=["--rm"], command=["tritonserver"])
    (servers / "triton.json").write_text(record.to_json())
    (servers / "bad.json").write_text("not json")
    models = tmp_path / "my models $(touch pwned)"
    (models / "versions" / "v2").mkdir(parents=True)
    (models / "current").symlink_to("versions/v2")
    monkeypatch.setattr(hc, "SERVERS_DIR", str(servers))
    monkeypatch.chdir(tmp_path)
    sent = []

    class Session:
        def run(self, command, root=False):
            sent.append((command, root))
            done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
            return done.returncode, done.stdout, done.stderr

        def close(self):
            sent.append(("closed", None))

    monkeypatch.setattr(ssh, "connect", lambda name, data: Session())
    point = ro.rollback_point("h1", {"models_dir": str(models)})
    assert point == {"servers": {"triton": "spec-a"}, "models_version": "v2"}
    assert not (tmp_path / "pwned").exists() and sent[0][1] is True and sent[-1][0] == "closed"
    (models / "current").unlink()
    assert ro.rollback_point("h1", {"models_dir": str(models)})["models_version"] is None


def test_rollback_point_that_cannot_read_the_records_is_one_line(monkeypatch):
    from tritonfleet.access import ssh

    class Session:
        def run(self, command, root=False):
            return 1, "", "sudo: a password is required\n"

        def close(self):
            pass

    monkeypatch.setattr(ssh, "connect", lambda name, data: Session())
    with pytest.raises(ro.RolloutError, match="h1: cannot read its host records: sudo: a password is required$"):
        ro.rollback_point("h1", {})


def test_two_rollouts_against_one_reports_directory_refuse_to_run_at_once(monkeypatch, tmp_path):
    from tritonfleet.access import inventory

    fake(monkeypatch, tmp_path, {}, fail_percent=0)
    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: HOSTS[:1]: (_read(path), {}))
    opts = ro.Options(inventory="inv.py", reports_dir=str(tmp_path))
    with ro.ReportsLock(str(tmp_path)):
        with pytest.raises(ro.RolloutError, match=rf"another rollout is running against {tmp_path}/ \(pid "
                                                  rf"{os.getpid()}, since "):
            ro.main(opts)
    assert ro.main(opts) == 0  # free again once the first has ended


def test_a_run_over_its_step_timeout_that_ignores_sigterm_is_killed_in_bounded_time(tmp_path, monkeypatch):
    import time

    stubborn = tmp_path / "pyinfra"
    stubborn.write_text("#!/bin/sh\ntrap '' TERM\necho started\nsleep 60\n")
    stubborn.chmod(0o755)
    monkeypatch.setattr(rn, "TERM_GRACE", 1.0)
    runner = ro.Runner(ro.Options(inventory="x", reports_dir=str(tmp_path), step_timeout=1))
    runner.pyinfra = str(stubborn)
    started = time.monotonic()
    ok, why = runner.run("deploys/serve.py", "h1")
    assert not ok and "took longer than 1s" in why
    assert time.monotonic() - started < 15
    assert json.loads(runner.state_file.read_text()) == {}


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
    tg.put_back("h1", {"ec2_instance_id": iid})
    assert [t["Target"]["Id"] for t in elb.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]] \
        == [iid]
    tg.take_out("h1", {"ec2_instance_id": iid})
    assert elb.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"] == []
    with pytest.raises(TargetGroupError, match="h2: ec2_instance_id: missing"):
        tg.check([("h2", {})])
    with pytest.raises(TargetGroupError, match="h2: instance_id: renamed ec2_instance_id"):
        tg.check([("h2", {"instance_id": iid})])


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
