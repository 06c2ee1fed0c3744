"""The rollout's target group against moto's ELBv2, with hosts loaded from ``inventories/ec2.py`` the way pyinfra
loads them: which host data key becomes the target, and a host whose target never turns healthy.

What moto cannot show: real health checks (moto calls a registered running instance healthy at once, an
``ip`` target always), draining delays and cross-zone behaviour; the test stops an instance right after its
registration to get a target that never turns healthy."""

from __future__ import annotations

import json
import logging

import boto3
import pytest

from tests.unit.test_fleet_inventory import _load
from tests.unit.test_fleet_support import (
    NEURON_PARAM,
    REGION,
    always_up,
    aws,  # noqa: F401 - fixture
    image_named,
    no_sleep,
    put_public_parameter,
    spec,
)
from tritonfleet.fleet import lifecycle
from tritonfleet.fleet import rollout as ro
from tritonfleet.fleet.lb import TargetGroup, TargetGroupError


@pytest.fixture
def prod(aws, monkeypatch):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    lifecycle.up(aws, spec(count=3), probe=always_up, sleep=no_sleep)
    hosts = sorted(_load(monkeypatch).items())
    vpc = aws.ec2.describe_instances(InstanceIds=[hosts[0][0]])["Reservations"][0]["Instances"][0]["VpcId"]
    return hosts, vpc


def _group(vpc: str, kind: str, name: str = "triton") -> str:
    elb = boto3.client("elbv2", region_name=REGION)
    return elb.create_target_group(Name=name, Protocol="HTTP", Port=8000, VpcId=vpc,
                                   TargetType=kind)["TargetGroups"][0]["TargetGroupArn"]


def _registered(arn: str) -> list[str]:
    elb = boto3.client("elbv2", region_name=REGION)
    return sorted(t["Target"]["Id"] for t in elb.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"])


def test_instance_targets_are_the_ec2_inventorys_instance_ids(prod):
    hosts, vpc = prod
    tg = TargetGroup(_group(vpc, "instance"), REGION, delay=1, attempts=3)
    tg.check(hosts)
    for name, data in hosts:
        tg.put_back(name, data)
    assert _registered(tg.arn) == sorted(data["ec2_instance_id"] for _n, data in hosts)
    tg.take_out(*hosts[0])
    assert hosts[0][1]["ec2_instance_id"] not in _registered(tg.arn)


def test_ip_targets_are_private_addresses_never_public_ones(prod):
    hosts, vpc = prod
    assert all(d["ssh_hostname"] != d["ec2_private_ip"] for _n, d in hosts)  # public addresses exist
    tg = TargetGroup(_group(vpc, "ip"), REGION, delay=1, attempts=3)
    for name, data in hosts:
        tg.put_back(name, data)
    assert _registered(tg.arn) == sorted(d["ec2_private_ip"] for _n, d in hosts)


def test_lb_target_id_overrides_the_inventory_keys(prod):
    hosts, vpc = prod
    tg = TargetGroup(_group(vpc, "ip"), REGION, delay=1, attempts=3)
    name, data = hosts[0]
    tg.put_back(name, {**data, "lb_target_id": "10.0.9.9"})
    assert _registered(tg.arn) == ["10.0.9.9"]


def test_a_host_without_its_key_is_refused_before_the_rollout_starts(prod):
    hosts, vpc = prod
    name, data = hosts[0]
    tg = TargetGroup(_group(vpc, "ip"), REGION)
    with pytest.raises(TargetGroupError, match=f"^{name}: ec2_private_ip: missing"):
        tg.check([(name, {k: v for k, v in data.items() if k != "ec2_private_ip"})])


def test_a_host_whose_target_never_turns_healthy_fails_the_rollout(prod, monkeypatch, tmp_path, caplog):
    """The canary's instance stops right after it is registered again: its target stays ``unused``; the
    rollout names it, starts no further batch and exits non-zero."""
    hosts, vpc = prod
    arn = _group(vpc, "instance")
    canary = hosts[0][1]["ec2_instance_id"]
    ec2 = boto3.client("ec2", region_name=REGION)
    real_init = TargetGroup.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)

        def stop_after_register(http_response, parsed, model, **_):
            if model.name == "RegisterTargets":
                ec2.stop_instances(InstanceIds=[canary])

        self.client.meta.events.register("after-call", stop_after_register)

    monkeypatch.setattr(TargetGroup, "__init__", init)
    monkeypatch.setattr("tritonfleet.access.inventory.load_inventory_groups", lambda path, _read=lambda path: hosts: (_read(path), {}))
    monkeypatch.setattr(ro.Runner, "run", lambda self, deploy, host, data=None: (True, ""))
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    caplog.set_level(logging.INFO, logger=ro.logger.name)
    caplog.set_level(logging.DEBUG, logger="tritonfleet.fleet.lb")
    opts = ro.Options(inventory="ec2.py", canary=1, batch=1, target_group=arn, region=REGION,
                      reports_dir=str(tmp_path), lb_timeout=2, lb_delay=1)
    assert ro.main(opts) == 1
    said = [r.getMessage() for r in caplog.records if r.name == ro.logger.name]
    assert f"{hosts[0][0]}: not healthy in the load balancer: " in "\n".join(said)
    waits = [r.getMessage() for r in caplog.records if r.name == "tritonfleet.fleet.lb"]
    # with -v: what the target group was asked and what it said (a canary moto never registered cannot leave it)
    assert [w.split(":")[0] for w in waits] == [hosts[0][0]] * 3, waits
    assert f"deregistering target {canary} from {arn}" in waits[0]
    assert f"registering target {canary} in {arn}; waiting until healthy" in waits[1]
    assert f"target {canary} not healthy after" in waits[2] and "Target.InvalidState" in waits[2]
    (path,) = tmp_path.glob("rollout-*.json")
    report = json.loads(path.read_text())
    first = report["hosts"][0]
    assert first["host"] == hosts[0][0] and first["status"] == "out of the load balancer"
    assert "not healthy" in first["message"] and "Target.InvalidState" in first["message"]
    assert report["failures"] == 1 and report["stopped"]
    assert [h["status"] for h in report["hosts"][1:]] == ["not started", "not started"]


def test_one_read_of_the_inventory_gives_the_hosts_and_the_lb_groups_members(tmp_path):
    """The rollout asks a (dynamic) inventory once: hosts and group membership come from the same run."""
    from tritonfleet.access.inventory import load_inventory_groups
    from tritonfleet.fleet.haproxy import group_hosts

    runs = tmp_path / "runs"
    inv = tmp_path / "inv.py"
    inv.write_text(f"open({str(runs)!r}, 'a').write('x')\n"
                   "triton = [('h1', {'ssh_hostname': '10.0.0.1'}), 'h2']\n"
                   "lb = (['lb1'], {'lb_frontend_http_port': 9000})\n")
    hosts, members = load_inventory_groups(inv)
    assert runs.read_text() == "x"
    assert [n for n, _ in hosts] == ["h1", "h2", "lb1"] and members == {"triton": ["h1", "h2"], "lb": ["lb1"]}
    assert group_hosts(members, hosts) == [("lb1", {"lb_frontend_http_port": 9000})]
