"""Launch errors: capacity and limits as one line of advice; partial launches kept or terminated.

EC2's errors are injected with botocore's Stubber; the partial launches are also run against moto
with an EC2 that starts fewer instances than asked and then fails, to see what really stays."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber

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
from tritonfleet.fleet import instances, lifecycle
from tritonfleet.fleet.ami import Image
from tritonfleet.fleet.aws import Clients
from tritonfleet.fleet.tags import FleetError, as_dict

IMAGE = Image("ami-0abc", "ssm:/x", "/dev/sda1", "ubuntu", "ubuntu-noble")


def _request(itype="inf2.xlarge", subnets=(), zones=()):
    return instances.LaunchRequest(fleet="prod", role="serve", instance_type=itype, image=IMAGE, os_name="ubuntu-24.04",
                                   security_group="sg-1", key_name="tritonfleet-prod", instance_profile="p",
                                   subnets=tuple(subnets), zones=tuple(zones))


@pytest.fixture
def stubbed():
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield Clients(REGION, _cache={"ec2": client}), stub
        stub.assert_no_pending_responses()


def _started(*ids):
    return {"Instances": [{"InstanceId": i, "State": {"Name": "pending", "Code": 0}} for i in ids]}


def _run_params(req, subnet, count):
    return {**req.params(subnet, count), "ClientToken": ANY}


def test_no_capacity_says_try_another_az_or_type(stubbed):
    clients, stub = stubbed
    stub.add_client_error("run_instances", "InsufficientInstanceCapacity",
                          "We currently do not have sufficient inf2.xlarge capacity in the Availability Zone you requested")
    with pytest.raises(FleetError) as exc:
        instances.launch(clients, _request(), 2, sleep=no_sleep)
    assert str(exc.value) == ("EC2 has no inf2.xlarge capacity in us-east-1 right now (InsufficientInstanceCapacity): "
                              "try another availability zone (--subnet in another AZ), another instance type, "
                              "or again later")


def test_no_capacity_in_one_subnet_goes_on_in_the_next(stubbed):
    clients, stub = stubbed
    req = _request(subnets=["subnet-a", "subnet-b"], zones=[f"{REGION}a", f"{REGION}b"])
    stub.add_client_error("run_instances", "InsufficientInstanceCapacity", "none", expected_params=_run_params(req, "subnet-a", 2))
    stub.add_response("run_instances", _started("i-1", "i-2"), expected_params=_run_params(req, "subnet-b", 2))
    assert [i["InstanceId"] for i in instances.launch(clients, req, 2, sleep=no_sleep)] == ["i-1", "i-2"]


def test_vcpu_limit_names_the_quota_and_tries_no_other_subnet(stubbed):
    clients, stub = stubbed
    req = _request(subnets=["subnet-a", "subnet-b"], zones=[f"{REGION}a", f"{REGION}b"])
    stub.add_client_error("run_instances", "VcpuLimitExceeded", "You have requested more vCPU capacity than allowed")
    with pytest.raises(FleetError) as exc:
        instances.launch(clients, req, 2, sleep=no_sleep)
    assert str(exc.value) == (
        "vCPU quota reached for inf2.xlarge (4 vCPUs each) in us-east-1 (VcpuLimitExceeded): request an increase "
        "of the Service Quota 'Running On-Demand Inf instances' (L-1945791B) in us-east-1, or stop other instances "
        "that use it")


def test_instance_limit_names_the_gpu_quota(stubbed):
    clients, stub = stubbed
    stub.add_client_error("run_instances", "InstanceLimitExceeded", "Your quota allows for 0 more running instance(s)")
    with pytest.raises(FleetError, match=r"instance limit reached for g5\.xlarge .*'Running On-Demand G and VT "
                                         r"instances' \(L-DB2E81BA\)"):
        instances.launch(clients, _request("g5.xlarge"), 1, sleep=no_sleep)


def test_unsupported_names_the_zone_and_how_to_find_one(stubbed):
    clients, stub = stubbed
    stub.add_client_error("run_instances", "Unsupported", "Your requested instance type is not supported")
    with pytest.raises(FleetError) as exc:
        instances.launch(clients, _request("trn1.32xlarge", ["subnet-c"], [f"{REGION}c"]), 1, sleep=no_sleep)
    assert str(exc.value).startswith("trn1.32xlarge is not offered in us-east-1c (subnet-c) (Unsupported)")
    assert "describe-instance-type-offerings" in str(exc.value) and "\n" not in str(exc.value)


def test_other_errors_are_one_line(stubbed):
    clients, stub = stubbed
    stub.add_client_error("run_instances", "UnauthorizedOperation", "You are not authorized\nto perform this operation.")
    with pytest.raises(FleetError, match=r"^UnauthorizedOperation: You are not authorized to perform this operation\.$"):
        instances.launch(clients, _request(), 1, sleep=no_sleep)


def test_new_instance_profile_is_retried_while_it_propagates(stubbed):
    clients, stub = stubbed
    stub.add_client_error("run_instances", "InvalidParameterValue",
                          "Value (p) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name")
    stub.add_response("run_instances", _started("i-1"))
    slept = []
    assert len(instances.launch(clients, _request(), 1, sleep=slept.append)) == 1
    assert slept == [5]


def test_partial_launch_terminates_what_started(stubbed):
    clients, stub = stubbed
    req = _request()
    stub.add_response("run_instances", _started("i-1"), expected_params=_run_params(req, None, 2))
    stub.add_client_error("run_instances", "InsufficientInstanceCapacity", "none",
                          expected_params=_run_params(req, None, 1))
    stub.add_response("terminate_instances", {}, expected_params={"InstanceIds": ["i-1"]})
    stub.add_response("describe_instances", {"Reservations": [{"Instances": [
        {"InstanceId": "i-1", "State": {"Name": "terminated", "Code": 48}}]}]}, expected_params={"InstanceIds": ["i-1"]})
    with pytest.raises(instances.PartialLaunch) as exc:
        instances.launch(clients, req, 2, on_partial="terminate", sleep=no_sleep)
    assert str(exc.value) == (
        "partial launch: 1 of 2 inf2.xlarge started, then EC2 has no inf2.xlarge capacity in us-east-1 right now "
        "(InsufficientInstanceCapacity): try another availability zone (--subnet in another AZ), another instance "
        "type, or again later; terminated i-1 (--on-partial keep keeps them)")
    assert exc.value.kept == []


def test_partial_launch_keeps_what_started(stubbed):
    clients, stub = stubbed
    stub.add_response("run_instances", _started("i-1"))
    stub.add_client_error("run_instances", "VcpuLimitExceeded", "over")
    with pytest.raises(instances.PartialLaunch, match=r"^partial launch: 1 of 2 .*; kept i-1 in fleet prod") as exc:
        instances.launch(clients, _request(), 2, on_partial="keep", sleep=no_sleep)
    assert exc.value.kept == ["i-1"]  # no terminate call was stubbed: none was made


class _ShortOfCapacity:
    """A moto EC2 client that starts at most one instance per call and fails from call ``fail_at`` on."""

    def __init__(self, real, fail_at=2, code="InsufficientInstanceCapacity"):
        self.real, self.fail_at, self.code, self.calls = real, fail_at, code, 0

    def run_instances(self, **kwargs):
        self.calls += 1
        if self.calls >= self.fail_at:
            raise ClientError({"Error": {"Code": self.code, "Message": "no capacity"}}, "RunInstances")
        return self.real.run_instances(**{**kwargs, "MaxCount": 1})

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.mark.parametrize("on_partial", ["terminate", "keep"])
def test_partial_launch_in_moto(aws, on_partial):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    aws._cache["ec2"] = _ShortOfCapacity(aws.ec2)
    with pytest.raises(instances.PartialLaunch, match="partial launch: 1 of 3 inf2.xlarge started") as exc:
        lifecycle.up(aws, spec(count=3, on_partial=on_partial), probe=always_up, sleep=no_sleep)
    found = instances.describe(aws, fleet="prod")
    assert len(found) == 1 and as_dict(found[0]["Tags"])["tritonfleet:fleet"] == "prod"
    state = found[0]["State"]["Name"]
    if on_partial == "terminate":
        assert state == "terminated" and exc.value.kept == []
    else:
        assert state == "running" and exc.value.kept == [found[0]["InstanceId"]]
