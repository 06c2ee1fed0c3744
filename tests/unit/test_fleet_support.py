"""Shared set-up of the fleet tests (moto in-process, botocore Stubber) and tests of the small pieces:
names, tags, quotas, the instance profile policy."""

from __future__ import annotations

import datetime
import json

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ssm.models import Parameter, ssm_backends

from tritonfleet.fleet import errors, iam, lifecycle
from tritonfleet.fleet.aws import Clients
from tritonfleet.fleet.tags import FleetError, check_fleet_name, check_role, tags

REGION = "us-east-1"
NEURON_PARAM = "/aws/service/neuron/dlami/base/ubuntu-24.04/latest/image_id"
GPU_PARAM = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
CIDR = "203.0.113.7/32"


@pytest.fixture
def aws(monkeypatch, tmp_path):
    """moto for every AWS service, fake credentials, and a key directory of the test's own."""
    for var in ("AWS_PROFILE", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("TRITONFLEET_KEY_DIR", str(tmp_path / "keys"))
    with mock_aws():
        yield Clients(REGION)


def put_public_parameter(name: str, value: str, region: str = REGION) -> None:
    """An /aws/service/... parameter, as AWS publishes them (PutParameter refuses that namespace)."""
    backend = ssm_backends[DEFAULT_ACCOUNT_ID][region]
    backend._parameters[name].append(Parameter(
        account_id=DEFAULT_ACCOUNT_ID, name=name, value=value, parameter_type="String", description=None,
        allowed_pattern=None, keyid=None, last_modified_date=datetime.datetime.now(), version=1, data_type="text"))


def image_named(clients: Clients, word: str) -> str:
    """A moto stock AMI whose name contains ``word``."""
    images = clients.ec2.describe_images(Owners=["amazon"], Filters=[
        {"Name": "architecture", "Values": ["x86_64"]}, {"Name": "name", "Values": [f"*{word}*"]}])["Images"]
    return sorted(i["ImageId"] for i in images)[0]


def spec(**overrides) -> lifecycle.FleetSpec:
    values = {"fleet": "prod", "instance_type": "inf2.xlarge", "ssh_cidr": CIDR, "count": 2}
    values.update(overrides)
    return lifecycle.FleetSpec(**values)


def no_sleep(_seconds: float) -> None:
    return None


def always_up(_address: str, _port: int) -> bool:
    return True


def test_public_parameter_reaches_get_parameter(aws):
    put_public_parameter(NEURON_PARAM, "ami-0123")
    assert aws.ssm.get_parameter(Name=NEURON_PARAM)["Parameter"]["Value"] == "ami-0123"


@pytest.mark.parametrize("name", ["prod", "a", "inf2-canary-7", "x" * 32])
def test_fleet_names_accepted(name):
    assert check_fleet_name(name) == name


@pytest.mark.parametrize("name", ["", "Prod", "-prod", "prod-", "x" * 33, "a_b", "a b"])
def test_fleet_names_refused_in_one_line(name):
    with pytest.raises(FleetError, match="fleet name") as exc:
        check_fleet_name(name)
    assert "\n" not in str(exc.value)


def test_role_cannot_pose_as_a_resource():
    with pytest.raises(FleetError, match="security-group"):
        check_role("security-group")
    assert check_role("canary") == "canary"


def test_tags_carry_fleet_and_role():
    assert {"Key": "tritonfleet:fleet", "Value": "prod"} in tags("prod", "serve")
    assert {"Key": "tritonfleet:role", "Value": "serve"} in tags("prod", "serve")


@pytest.mark.parametrize("itype, quota", [
    ("inf2.xlarge", "L-1945791B"), ("inf1.6xlarge", "L-1945791B"), ("trn1n.32xlarge", "L-2C3B7624"),
    ("trn2.48xlarge", "L-2C3B7624"), ("g5.xlarge", "L-DB2E81BA"), ("g4dn.12xlarge", "L-DB2E81BA"),
    ("p5.48xlarge", "L-417A185B"), ("m7i.large", "L-1216C47A")])
def test_quota_per_family(itype, quota):
    assert errors.quota_for(itype)[1] == quota


def test_policy_grants_model_prefix_read_and_qa_write_only():
    access = iam.Access(models_s3_uri="s3://models-bkt/repos/prod/", qa_reports_s3_uri="s3://qa-bkt/fleet")
    doc = iam.policy_document(access, REGION, "123456789012")
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert set(by_sid) == {"ModelsList", "ModelsRead", "QaReportsWrite"}
    assert by_sid["ModelsList"] == {
        "Sid": "ModelsList", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::models-bkt",
        "Condition": {"StringLike": {"s3:prefix": ["repos/prod", "repos/prod/*"]}}}
    assert by_sid["ModelsRead"]["Action"] == "s3:GetObject"
    assert by_sid["ModelsRead"]["Resource"] == "arn:aws:s3:::models-bkt/repos/prod/*"
    assert by_sid["QaReportsWrite"]["Action"] == "s3:PutObject"
    assert by_sid["QaReportsWrite"]["Resource"] == "arn:aws:s3:::qa-bkt/fleet/qa/*"
    assert "s3:*" not in json.dumps(doc) and "s3:DeleteObject" not in json.dumps(doc)


@pytest.mark.parametrize("region, partition", [(REGION, "aws"), ("cn-north-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov")])
def test_ecr_pulls_are_scoped_to_the_accounts_repositories_only_the_token_is_global(region, partition):
    doc = iam.policy_document(iam.Access(ecr_pull=True), region, "123456789012")
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert set(by_sid) == {"EcrToken", "EcrPull"}
    # GetAuthorizationToken has no resource-level permissions: "*" is the only resource it takes
    assert by_sid["EcrToken"] == {"Sid": "EcrToken", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken",
                                  "Resource": "*"}
    pull = by_sid["EcrPull"]
    assert pull["Effect"] == "Allow"
    assert sorted(pull["Action"]) == ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage",
                                      "ecr:GetDownloadUrlForLayer"]
    # the pull actions on repository ARNs of this account and region, never on "*" (any account's images)
    assert pull["Resource"] == f"arn:{partition}:ecr:{region}:123456789012:repository/*"
    # nothing but the token is granted on every resource, and nothing beyond pulling
    assert [s["Sid"] for s in doc["Statement"] if s["Resource"] == "*"] == ["EcrToken"]
    actions = [a for s in doc["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])]
    assert "ecr:*" not in actions and not [a for a in actions if a.startswith("ecr:Put") or "Upload" in a]
    assert iam.policy_document(iam.Access(), region, "123456789012") is None  # no pulls asked: no ECR grant


def test_bundle_and_secret_reads_are_scoped_to_the_object_and_the_parameters():
    access = iam.Access(bundle_s3_url="s3://fleet-bundles/prod/tritonfleet-bundle-0123.tar.gz",
                        secret_parameters=("/tritonfleet/prod/repository-secret", "tritonfleet/prod/other"))
    by_sid = {s["Sid"]: s for s in iam.policy_document(access, REGION, "123456789012")["Statement"]}
    assert by_sid["BundleRead"]["Resource"] == "arn:aws:s3:::fleet-bundles/prod/tritonfleet-bundle-0123.tar.gz"
    assert by_sid["SecretsRead"]["Action"] == "ssm:GetParameter"
    assert by_sid["SecretsRead"]["Resource"] == [
        f"arn:aws:ssm:{REGION}:123456789012:parameter/tritonfleet/prod/repository-secret",
        f"arn:aws:ssm:{REGION}:123456789012:parameter/tritonfleet/prod/other"]


def test_policy_for_nothing_is_none_and_bad_uri_is_one_line():
    assert iam.policy_document(iam.Access(), REGION, "1") is None
    with pytest.raises(FleetError, match="expected s3://bucket/prefix"):
        iam.policy_document(iam.Access(models_s3_uri="models/prod"), REGION, "1")


def test_clients_need_a_region():
    with pytest.raises(FleetError, match="region"):
        Clients("")


def test_stubbed_client_can_be_injected():
    client = boto3.client("ec2", region_name=REGION)
    assert Clients(REGION, _cache={"ec2": client}).ec2 is client


def test_an_asgs_hosts_may_put_only_tritonfleet_metrics_and_set_only_their_fleets_groups_health():
    from tritonfleet.agent import lifecycle, queuetime

    doc = iam.policy_document(iam.Access(asg_fleet="prod"), REGION, "123456789012")
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert set(by_sid) == {"QueueTimeMetric", "WatchdogReplace", "LifecycleHooks", "FindOwnGroup", "AbandonReasonTag"}
    assert by_sid["LifecycleHooks"]["Condition"] == by_sid["WatchdogReplace"]["Condition"]
    assert sorted(by_sid["LifecycleHooks"]["Action"]) == ["autoscaling:CompleteLifecycleAction",
                                                          "autoscaling:RecordLifecycleActionHeartbeat"]
    tag = by_sid["AbandonReasonTag"]
    assert tag["Action"] == "ec2:CreateTags" and tag["Resource"] == f"arn:aws:ec2:{REGION}:123456789012:instance/*"
    assert tag["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": [lifecycle.REASON_TAG]}
    assert tag["Condition"]["StringEquals"] == {"aws:ResourceTag/tritonfleet:fleet": "prod"}
    # PutMetricData takes no resource: the namespace condition is what scopes it (to the agent's own)
    assert by_sid["QueueTimeMetric"] == {
        "Sid": "QueueTimeMetric", "Effect": "Allow", "Action": "cloudwatch:PutMetricData", "Resource": "*",
        "Condition": {"StringEquals": {"cloudwatch:namespace": queuetime.NAMESPACE}}}
    replace = by_sid["WatchdogReplace"]
    assert replace["Action"] == "autoscaling:SetInstanceHealth"
    assert replace["Resource"] == (f"arn:aws:autoscaling:{REGION}:123456789012:autoScalingGroup:*:"
                                   "autoScalingGroupName/*")
    assert replace["Condition"] == {"StringEquals": {"autoscaling:ResourceTag/tritonfleet:fleet": "prod"}}
    # hosts that are not a group's get neither
    plain = iam.policy_document(iam.Access(models_s3_uri="s3://b/p"), REGION, "123456789012")
    assert not [s for s in plain["Statement"] if s["Sid"] in by_sid]
