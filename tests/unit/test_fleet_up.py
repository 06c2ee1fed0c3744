"""``fleet up`` against moto: AMI from SSM, instances, tags, security group, key pair, instance profile."""

from __future__ import annotations

import json
import stat

import boto3
import pytest
from botocore.stub import Stubber
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.unit.test_fleet_support import (
    CIDR,
    GPU_PARAM,
    NEURON_PARAM,
    REGION,
    always_up,
    aws,  # noqa: F401 - fixture
    image_named,
    no_sleep,
    put_public_parameter,
    spec,
)
from tritonfleet.fleet import instances, keys, lifecycle, network
from tritonfleet.fleet.aws import Clients
from tritonfleet.fleet.tags import FleetError, as_dict


def _up(clients, **overrides):
    return lifecycle.up(clients, spec(**overrides), probe=always_up, sleep=no_sleep)


def _source_sg(clients):
    vpc = clients.ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    return clients.ec2.create_security_group(GroupName="alb", Description="load balancer", VpcId=vpc)["GroupId"]


def test_up_launches_the_type_from_the_ssm_ami_with_tags_volume_and_profile(aws):  # noqa: F811
    ami_id = image_named(aws, "ubuntu")
    put_public_parameter(NEURON_PARAM, ami_id)
    access = lifecycle.iam.Access(models_s3_uri="s3://models/repos/prod", qa_reports_s3_uri="s3://reports/prod")
    result = _up(aws, access=access)
    assert len(result.launched) == 2 and result.image.source == f"ssm:{NEURON_PARAM}"
    assert set(result.ready) == set(result.launched)
    found = instances.describe(aws, ids=result.launched)
    for inst in found:
        assert inst["InstanceType"] == "inf2.xlarge"
        assert inst["ImageId"] == ami_id
        tags = as_dict(inst["Tags"])
        assert tags["tritonfleet:fleet"] == "prod" and tags["tritonfleet:role"] == "serve"
        assert tags["tritonfleet:ssh-user"] == "ubuntu"
        assert inst["IamInstanceProfile"]["Arn"].endswith(f"instance-profile/tritonfleet/tritonfleet-prod-{REGION}")
        assert inst["KeyName"] == "tritonfleet-prod"
        assert [g["GroupId"] for g in inst["SecurityGroups"]] == [result.security_group]
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert inst["MetadataOptions"]["HttpPutResponseHopLimit"] == 1  # containers do not reach the profile
        volume_id = inst["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
        volume = aws.ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
        assert (volume["Size"], volume["VolumeType"]) == (500, "gp3")
        assert as_dict(volume["Tags"])["tritonfleet:fleet"] == "prod"
    policy = aws.iam.get_role_policy(RoleName=f"tritonfleet-prod-{REGION}", PolicyName="tritonfleet-host-access")
    document = policy["PolicyDocument"]
    document = json.loads(document) if isinstance(document, str) else document
    actions = {s["Sid"]: s["Action"] for s in document["Statement"]}
    assert actions == {"ModelsList": "s3:ListBucket", "ModelsRead": "s3:GetObject", "QaReportsWrite": "s3:PutObject"}


def test_security_group_opens_ssh_to_the_cidr_and_triton_to_the_source_group_only(aws):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    source = _source_sg(aws)
    result = _up(aws, instance_type="inf2.24xlarge", count=1, triton_source_sg=source)
    group = aws.ec2.describe_security_groups(GroupIds=[result.security_group])["SecurityGroups"][0]
    assert as_dict(group["Tags"])["tritonfleet:role"] == "security-group"
    rules = network._current_rules(group)
    assert ("tcp", 22, 22, "cidr4", CIDR) in rules
    triton = sorted((lo, hi) for _p, lo, hi, kind, src in rules if kind == "sg" and src == source)
    assert triton == [(8000 + 10 * i, 8002 + 10 * i) for i in range(6)]  # inf2.24xlarge: 6 devices, 6 servers
    assert len(rules) == 7  # nothing else, in particular no 0.0.0.0/0


def test_second_up_reconciles_rules_and_launches_nothing(aws):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    first = _up(aws)
    second = _up(aws, ssh_cidr="198.51.100.0/24", triton_source_sg=_source_sg(aws), triton_servers=1)
    assert second.launched == [] and sorted(second.existing) == sorted(first.launched)
    group = aws.ec2.describe_security_groups(GroupIds=[first.security_group])["SecurityGroups"][0]
    rules = network._current_rules(group)
    assert ("tcp", 22, 22, "cidr4", "198.51.100.0/24") in rules and ("tcp", 22, 22, "cidr4", CIDR) not in rules
    assert len(rules) == 2
    third = _up(aws, count=3)
    assert len(third.launched) == 1


def test_created_private_key_is_0600_and_imported_key_writes_nothing(aws, tmp_path):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    result = _up(aws, count=1)
    pem = keys.private_key_path("prod")
    assert result.key.private_key == pem and pem.exists()
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600 and "PRIVATE KEY" in pem.read_text()
    other = tmp_path / "id.pub"
    public = Ed25519PrivateKey.generate().public_key()
    other.write_bytes(public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    imported = _up(aws, fleet="other", count=1, public_key=str(other))
    assert imported.key.origin == "imported" and not keys.private_key_path("other").exists()


def test_private_key_given_as_public_key_is_refused(aws, tmp_path):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    secret = tmp_path / "id"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nxxx\n-----END OPENSSH PRIVATE KEY-----\n")
    with pytest.raises(FleetError, match="holds a private key") as exc:
        _up(aws, public_key=str(secret))
    assert "xxx" not in str(exc.value)


def test_gpu_uses_the_gpu_dlami_and_amazon_linux_gets_ec2_user(aws):  # noqa: F811
    put_public_parameter(GPU_PARAM, image_named(aws, "ubuntu"))
    assert _up(aws, instance_type="g5.xlarge", count=1).image.source == f"ssm:{GPU_PARAM}"
    al = image_named(aws, "amzn")
    put_public_parameter("/aws/service/neuron/dlami/base/amazon-linux-2023/latest/image_id", al)
    result = _up(aws, fleet="al", count=1, os_name="amazon-linux-2023")
    assert as_dict(instances.describe(aws, ids=result.launched)[0]["Tags"])["tritonfleet:ssh-user"] == "ec2-user"


def test_explicit_ami_wins_over_the_parameter(aws):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    pinned = image_named(aws, "amzn")
    result = _up(aws, count=1, ami=pinned)
    assert result.image.image_id == pinned and result.image.source == "--ami"


def test_inf1_needs_a_pinned_ami(aws):  # noqa: F811
    with pytest.raises(FleetError, match="dropped inf1 after SDK 2.26; pass --ami") as exc:
        _up(aws, instance_type="inf1.xlarge")
    assert "\n" not in str(exc.value)
    assert _up(aws, instance_type="inf1.xlarge", count=1, ami=image_named(aws, "ubuntu")).launched


@pytest.mark.parametrize("overrides, message", [
    ({"instance_type": "inf3.xlarge"}, "unknown instance type"),
    ({"ssh_cidr": "0.0.0.0/0"}, "refusing to open SSH"),
    ({"ssh_cidr": "my laptop"}, "expected a CIDR"),
    ({"volume_size": 4}, "--volume-size"),
    ({"triton_servers": 2}, "holds 0-1 servers"),
    ({"fleet": "Prod"}, "fleet name"),
    ({"count": 0}, "--count"),
    ({"on_partial": "retry"}, "--on-partial"),
    ({"access": lifecycle.iam.Access(models_s3_uri="models/prod")}, "expected s3://bucket/prefix"),
])
def test_bad_specs_fail_in_one_line_before_any_aws_call(overrides, message):
    clients = Clients(REGION, _cache={name: _no_calls(name) for name in ("ec2", "ssm", "iam")})
    with pytest.raises(FleetError, match=message) as exc:
        _up(clients, **overrides)
    assert "\n" not in str(exc.value)


def _no_calls(service):
    client = boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    Stubber(client).activate()  # any call raises: nothing may be asked of AWS
    return client


def test_bad_ami_value_is_one_line(aws):  # noqa: F811
    with pytest.raises(FleetError, match="expected ami-"):
        _up(aws, ami="ubuntu")
    assert not instances.describe(aws, fleet="prod")


def test_missing_ssm_parameter_says_pass_ami(aws):  # noqa: F811
    with pytest.raises(FleetError, match=f"{NEURON_PARAM} does not exist in {REGION}; pass --ami"):
        _up(aws)


def test_wait_ready_times_out_naming_the_instances(aws):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(FleetError, match="not SSH-ready after 60 s: i-") as exc:
        lifecycle.up(aws, spec(count=1), probe=lambda _a, _p: False, ready_timeout=60, sleep=sleep,
                     clock=lambda: now[0])
    assert "SSH not answering" in str(exc.value)
    assert instances.describe(aws, fleet="prod", states=["running"])  # kept for list/down


def test_models_s3_direct_raises_the_hop_limit_to_2_for_tritons_container(aws):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    result = _up(aws, models_s3_direct=True, count=1)
    (inst,) = instances.describe(aws, ids=result.launched)
    assert inst["MetadataOptions"]["HttpPutResponseHopLimit"] == 2


def test_metrics_ports_are_opened_to_the_metrics_source_and_reconciled_like_the_others(aws):  # noqa: F811
    """Issue "Security", item 5: up managed only SSH and Triton and revoked the exporter rules README told
    users to add by hand; it now writes them from --metrics-source and reconciles them, prefix lists too."""
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    prometheus = _source_sg(aws)
    result = _up(aws, instance_type="inf2.24xlarge", count=1, triton_servers=2, metrics_sources=(prometheus, "10.20.0.0/16"))
    group_id = result.security_group

    def rules():
        return network._current_rules(aws.ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0])
    metrics = {(lo, kind, src) for _p, lo, hi, kind, src in rules() if lo == hi and lo != 22}
    ports = [8002, 8012, 9100, 9010]  # two Triton servers' metrics, node, Neuron exporter (inf2: no DCGM)
    assert metrics == {(p, k, s) for p in ports for k, s in (("sg", prometheus), ("cidr4", "10.20.0.0/16"))}
    # a second up with the same sources changes nothing; a hand-made prefix-list rule is reconciled away
    aws.ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 9100, "ToPort": 9100, "PrefixListIds": [{"PrefixListId": "pl-0123456789abcdef0"}]}])
    assert ("tcp", 9100, 9100, "pl", "pl-0123456789abcdef0") in rules()
    _up(aws, instance_type="inf2.24xlarge", count=1, triton_servers=2, metrics_sources=(prometheus, "10.20.0.0/16"))
    after = rules()
    assert ("tcp", 9100, 9100, "pl", "pl-0123456789abcdef0") not in after
    assert {(lo, kind, src) for _p, lo, hi, kind, src in after if lo == hi and lo != 22} == metrics
    # a prefix list as the source; without sources the metrics ports close
    _up(aws, instance_type="inf2.24xlarge", count=1, triton_servers=2, metrics_sources=("pl-0123456789abcdef0",))
    assert {(lo, src) for _p, lo, hi, kind, src in rules() if kind == "pl"} == {(p, "pl-0123456789abcdef0") for p in ports}
    _up(aws, instance_type="inf2.24xlarge", count=1, triton_servers=2)
    assert not [r for r in rules() if r[1] == r[2] and r[1] != 22]


@pytest.mark.parametrize("source, message", [
    ("0.0.0.0/0", "refusing to open SSH to the whole internet"), ("10.0.0.0/8", "wider than a /16"),
    ("sg-xyz", "expected a CIDR such as"), ("prometheus", "expected a CIDR such as")])
def test_a_metrics_source_is_a_group_a_prefix_list_or_a_narrow_cidr(aws, source, message):  # noqa: F811
    with pytest.raises(FleetError, match=message) as exc:
        _up(aws, metrics_sources=(source,))
    assert "--metrics-source" in str(exc.value) and "\n" not in str(exc.value)
