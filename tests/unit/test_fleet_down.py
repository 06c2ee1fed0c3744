"""``fleet down`` removes exactly what the fleet created: other fleets and untagged resources survive."""

from __future__ import annotations

import json

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
from tritonfleet.fleet import instances, keys, lifecycle


def _live(clients, ids):
    return {i["InstanceId"]: i["State"]["Name"] for i in instances.describe(clients, ids=ids)}


def test_down_removes_the_fleet_and_nothing_else(aws):  # noqa: F811
    ec2 = aws.ec2
    ami_id = image_named(aws, "ubuntu")
    put_public_parameter(NEURON_PARAM, ami_id)
    # unrelated: an untagged instance, security group, key pair and IAM role, and another fleet
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    other_sg = ec2.create_security_group(GroupName="web", Description="not ours", VpcId=vpc)["GroupId"]
    other_instance = ec2.run_instances(ImageId=ami_id, MinCount=1, MaxCount=1, InstanceType="m5.large",
                                       SecurityGroupIds=[other_sg])["Instances"][0]["InstanceId"]
    ec2.create_key_pair(KeyName="someone-else")
    aws.iam.create_role(RoleName="someone-else", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17"}))
    neighbour = lifecycle.up(aws, spec(fleet="staging", count=1), probe=always_up, sleep=no_sleep)

    ours = lifecycle.up(aws, spec(), probe=always_up, sleep=no_sleep)
    stray = ec2.create_volume(Size=10, AvailabilityZone=f"{REGION}a", TagSpecifications=[
        {"ResourceType": "volume", "Tags": [{"Key": "tritonfleet:fleet", "Value": "prod"}]}])["VolumeId"]
    assert keys.private_key_path("prod").exists()

    removed = lifecycle.down(aws, "prod", sleep=no_sleep)

    assert sorted(removed["instances"]) == sorted(ours.launched)
    assert set(_live(aws, ours.launched).values()) == {"terminated"}
    assert removed["security-groups"] == [ours.security_group]
    assert removed["key-pairs"] == ["tritonfleet-prod"]
    assert removed["volumes"] == [stray]
    assert sorted(removed["iam"]) == [f"instance-profile/tritonfleet-prod-{REGION}", f"role/tritonfleet-prod-{REGION}"]
    assert not keys.private_key_path("prod").exists()
    # survivors
    assert _live(aws, [other_instance]) == {other_instance: "running"}
    assert set(_live(aws, neighbour.launched).values()) == {"running"}
    groups = {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]}
    assert {other_sg, neighbour.security_group} <= groups and ours.security_group not in groups
    key_names = {k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]}
    assert key_names == {"someone-else", "tritonfleet-staging"}
    roles = {r["RoleName"] for r in aws.iam.list_roles()["Roles"]}
    assert roles == {"someone-else", f"tritonfleet-staging-{REGION}"}
    assert keys.private_key_path("staging").exists()

    again = lifecycle.down(aws, "prod", sleep=no_sleep)
    assert not any(again.values())


def test_down_leaves_an_untagged_role_with_the_fleet_name(aws):  # noqa: F811
    name = f"tritonfleet-prod-{REGION}"
    aws.iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")
    assert lifecycle.down(aws, "prod", sleep=no_sleep)["iam"] == []
    assert aws.iam.get_role(RoleName=name)


def test_down_keeps_an_imported_keys_files_untouched(aws, tmp_path):  # noqa: F811
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    pub = tmp_path / "mine.pub"
    pub.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    lifecycle.up(aws, spec(count=1, public_key=str(pub)), probe=always_up, sleep=no_sleep)
    assert lifecycle.down(aws, "prod", sleep=no_sleep)["key-pairs"] == ["tritonfleet-prod"]
    assert pub.exists()
