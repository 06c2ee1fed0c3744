"""``tritonfleet fleet up|list|down`` end to end on moto: tables, one-line errors, no secrets printed."""

from __future__ import annotations

import stat

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

from tests.unit.test_fleet_support import (
    CIDR,
    NEURON_PARAM,
    REGION,
    aws,  # noqa: F401 - fixture
    image_named,
    put_public_parameter,
)
from tritonfleet.face.cli import main
from tritonfleet.fleet import instances, keys


@pytest.fixture
def cli(aws, monkeypatch):  # noqa: F811
    monkeypatch.setattr(instances, "tcp_ssh_probe", lambda _address, _port: True)
    monkeypatch.setenv("TRITONFLEET_REGION", REGION)
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    runner = CliRunner()

    def run(*args, **kwargs):
        return runner.invoke(main, ["fleet", *args], catch_exceptions=False, **kwargs)

    return aws, run


def _one_line_error(result, text):
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and text in lines[0], result.output
    assert "Traceback" not in result.output


def test_up_list_down(cli):
    clients, run = cli
    up = run("up", "--fleet", "prod", "-t", "inf2.xlarge", "-n", "2", "--ssh-cidr", CIDR)
    assert up.exit_code == 0, up.output
    ids = [i["InstanceId"] for i in instances.describe(clients, fleet="prod")]
    assert len(ids) == 2 and all(i in up.output for i in ids), up.output
    assert f"TRITONFLEET_REGION={REGION} TRITONFLEET_FLEET=prod pyinfra inventories/ec2.py" in up.output
    assert "PRIVATE KEY" not in up.output
    pem = keys.private_key_path("prod")
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600

    listed = run("list", "--fleet", "prod")
    assert listed.exit_code == 0
    for column in ("id", "type", "AZ", "state", "public IP", "private IP", "role"):
        assert column in listed.output
    assert listed.output.count("inf2.xlarge") == 2 and listed.output.count("serve") == 2
    assert "fleet" not in listed.output.splitlines()[1]
    assert "prod" in run("list").output  # every fleet, with a fleet column

    refused = run("down", "--fleet", "prod", input="n\n")
    assert refused.exit_code == 1 and "Aborted" in refused.output
    assert {i["State"]["Name"] for i in instances.describe(clients, fleet="prod")} == {"running"}

    down = run("down", "--fleet", "prod", "--yes")
    assert down.exit_code == 0, down.output
    assert "removed instances: " in down.output and "removed security-groups: sg-" in down.output
    assert {i["State"]["Name"] for i in instances.describe(clients, fleet="prod")} == {"terminated"}
    assert not pem.exists()
    assert "has nothing" in run("down", "--fleet", "prod", "--yes").output


def test_limit_error_is_one_line(cli, monkeypatch):
    _clients, run = cli

    def refuse(*_args, **_kwargs):
        raise ClientError({"Error": {"Code": "VcpuLimitExceeded", "Message": "too many vCPUs"}}, "RunInstances")

    monkeypatch.setattr(instances, "_run", refuse)
    result = run("up", "--fleet", "prod", "-t", "inf2.48xlarge", "--ssh-cidr", CIDR)
    _one_line_error(result, "vCPU quota reached for inf2.48xlarge (192 vCPUs each) in us-east-1 (VcpuLimitExceeded): "
                            "request an increase of the Service Quota 'Running On-Demand Inf instances' (L-1945791B)")


def test_inf1_without_ami_is_one_line(cli):
    _clients, run = cli
    _one_line_error(run("up", "--fleet", "prod", "-t", "inf1.xlarge", "--ssh-cidr", CIDR),
                    "Neuron DLAMIs dropped inf1 after SDK 2.26; pass --ami")


def test_asg_needs_a_bundle(cli):
    _clients, run = cli
    _one_line_error(run("up", "--fleet", "prod", "-t", "inf2.xlarge", "--ssh-cidr", CIDR, "--asg"),
                    "--asg needs --bundle-s3")


def test_a_target_group_without_asg_is_one_line_before_anything_launches(cli):
    clients, run = cli
    _one_line_error(run("up", "--fleet", "prod", "-t", "inf2.xlarge", "--ssh-cidr", CIDR, "--target-group",
                        "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/x/0123456789abcdef"),
                    "--target-group is for --asg")
    assert not clients.ec2.describe_instances()["Reservations"]


def test_ssh_cidr_is_required(cli, monkeypatch):
    _clients, run = cli
    monkeypatch.delenv("TRITONFLEET_SSH_CIDR", raising=False)
    result = run("up", "--fleet", "prod", "-t", "inf2.xlarge")
    assert result.exit_code == 2 and "--ssh-cidr" in result.output
