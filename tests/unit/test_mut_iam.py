"""tritonfleet.fleet.iam against a stub IAM client: the S3 URIs it accepts, the whole policy document per
grant, and the calls (with their parameters as IAM receives them) that create, reconcile and delete the role
and instance profile, with their one-line errors. Written for the mutants ``make mutate`` found surviving
(docs/mutation-survivors.md); no moto, so each runs in milliseconds."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tritonfleet.fleet import iam
from tritonfleet.fleet.aws import Clients
from tritonfleet.fleet.tags import FleetError

REGION = "us-east-1"
ACCOUNT = "123456789012"
NAME = "tritonfleet-prod-us-east-1"
POLICY = "tritonfleet-host-access"


def client_error(code: str, message: str = "nope") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "Operation")


def fleet_tags(fleet: str, role: str) -> list[dict]:
    return [{"Key": "Name", "Value": f"{fleet}-{role}"}, {"Key": "tritonfleet:fleet", "Value": fleet},
            {"Key": "tritonfleet:role", "Value": role}]


ROLE_TAGS = fleet_tags("prod", "iam-role")
PROFILE_TAGS = fleet_tags("prod", "instance-profile")


class Iam:
    """IAM as far as iam.py uses it: roles and profiles by name, every call recorded as (operation, kwargs)."""

    def __init__(self, role=None, profile=None, inline=(), attached=(), other_profiles=(), fail=None):
        self.role, self.profile = role, profile
        self.inline, self.attached, self.other_profiles = list(inline), list(attached), list(other_profiles)
        self.fail = fail or {}  # operation -> ClientError
        self.calls: list[tuple[str, dict]] = []

    def _call(self, op, kwargs):
        self.calls.append((op, kwargs))
        if op in self.fail:
            raise self.fail[op]

    def ops(self) -> list[str]:
        return [op for op, _ in self.calls]

    def kwargs(self, op) -> list[dict]:
        return [kw for o, kw in self.calls if o == op]

    def get_role(self, **kw):
        self._call("get_role", kw)
        if self.role is None:
            raise client_error("NoSuchEntity", f"The role with name {kw['RoleName']} cannot be found.")
        return {"Role": self.role}

    def create_role(self, **kw):
        self._call("create_role", kw)
        self.role = {"RoleName": kw["RoleName"], "Path": kw["Path"], "Tags": kw["Tags"],
                     "Arn": f"arn:aws:iam::{ACCOUNT}:role{kw['Path']}{kw['RoleName']}"}
        return {"Role": self.role}

    def put_role_policy(self, **kw):
        self._call("put_role_policy", kw)

    def list_role_policies(self, **kw):
        self._call("list_role_policies", kw)
        return {"PolicyNames": list(self.inline)}

    def delete_role_policy(self, **kw):
        self._call("delete_role_policy", kw)

    def list_attached_role_policies(self, **kw):
        self._call("list_attached_role_policies", kw)
        return {"AttachedPolicies": [{"PolicyName": a.rsplit("/", 1)[-1], "PolicyArn": a} for a in self.attached]}

    def detach_role_policy(self, **kw):
        self._call("detach_role_policy", kw)

    def list_instance_profiles_for_role(self, **kw):
        self._call("list_instance_profiles_for_role", kw)
        return {"InstanceProfiles": [{"InstanceProfileName": p} for p in self.other_profiles]}

    def delete_role(self, **kw):
        self._call("delete_role", kw)

    def get_instance_profile(self, **kw):
        self._call("get_instance_profile", kw)
        if self.profile is None:
            raise client_error("NoSuchEntity", f"Instance Profile {kw['InstanceProfileName']} cannot be found.")
        return {"InstanceProfile": self.profile}

    def create_instance_profile(self, **kw):
        self._call("create_instance_profile", kw)
        self.profile = {"InstanceProfileName": kw["InstanceProfileName"], "Path": kw["Path"], "Tags": kw["Tags"],
                        "Roles": []}
        return {"InstanceProfile": self.profile}

    def add_role_to_instance_profile(self, **kw):
        self._call("add_role_to_instance_profile", kw)

    def remove_role_from_instance_profile(self, **kw):
        self._call("remove_role_from_instance_profile", kw)

    def delete_instance_profile(self, **kw):
        self._call("delete_instance_profile", kw)


class Session:
    def __init__(self, **services):
        self.services, self.made = services, []

    def client(self, name, region_name=None, config=None):
        self.made.append((name, region_name))
        return self.services[name]


def clients(stub: Iam, region: str = REGION) -> Clients:
    return Clients(region, session=Session(iam=stub))


def role(tags=ROLE_TAGS, name=NAME):
    out = {"RoleName": name, "Arn": f"arn:aws:iam::{ACCOUNT}:role/tritonfleet/{name}"}
    if tags is not None:
        out["Tags"] = tags
    return out


def profile(tags=PROFILE_TAGS, roles=(NAME,), name=NAME):
    out = {"InstanceProfileName": name, "Roles": [{"RoleName": r} for r in roles]}
    if tags is not None:
        out["Tags"] = tags
    return out


# ---- split_s3 and partition ----

@pytest.mark.parametrize("uri, parts", [
    ("s3://bkt/repos/prod/", ("bkt", "repos/prod")),
    ("s3://bkt/repos/prod", ("bkt", "repos/prod")),
    ("s3://bkt//deep/", ("bkt", "deep")),
    ("s3://bkt/", ("bkt", "")),
    ("s3://bkt", ("bkt", "")),
    ("s3://Xbkt/Xrepo/X/", ("Xbkt", "Xrepo/X")),  # only slashes are stripped from the prefix
    ("s3://bkt/ spaced /", ("bkt", " spaced ")),
])
def test_split_s3_gives_bucket_and_prefix_without_slashes(uri, parts):
    assert iam.split_s3(uri) == parts


@pytest.mark.parametrize("uri", ["models/prod", "S3://bkt/p", "s3:/bkt/p", "s3://", "s3:///prefix", "s3:///a/b", "http://bkt/p",
                                 "", None, 5])
def test_split_s3_refuses_what_is_not_s3_bucket_prefix_naming_it(uri):
    with pytest.raises(FleetError) as caught:
        iam.split_s3(uri)
    assert str(caught.value) == f"S3 URI {uri!r}: expected s3://bucket/prefix"


def test_split_s3_names_what_the_uri_is_for():
    with pytest.raises(FleetError) as caught:
        iam.split_s3("gs://b/p", "models S3 URI")
    assert str(caught.value) == "models S3 URI 'gs://b/p': expected s3://bucket/prefix"


@pytest.mark.parametrize("region, part", [
    ("us-east-1", "aws"), ("eu-west-1", "aws"), ("cn-north-1", "aws-cn"), ("cn-northwest-1", "aws-cn"),
    ("us-gov-west-1", "aws-us-gov"), ("us-gov-east-1", "aws-us-gov"), ("ap-cn-1", "aws"), ("us-govx-1", "aws")])
def test_partition_of_region(region, part):
    assert iam.partition(region) == part


# ---- policy_document: the whole document per grant ----

def test_policy_for_models_with_a_prefix_lists_only_under_it_and_reads_under_it():
    doc = iam.policy_document(iam.Access(models_s3_uri="s3://models-bkt/repos/prod/"), REGION, ACCOUNT)
    assert doc == {"Version": "2012-10-17", "Statement": [
        {"Sid": "ModelsList", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::models-bkt",
         "Condition": {"StringLike": {"s3:prefix": ["repos/prod", "repos/prod/*"]}}},
        {"Sid": "ModelsRead", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::models-bkt/repos/prod/*"}]}


def test_policy_for_a_whole_models_bucket_has_no_prefix_condition():
    doc = iam.policy_document(iam.Access(models_s3_uri="s3://models-bkt"), "cn-north-1", ACCOUNT)
    assert doc == {"Version": "2012-10-17", "Statement": [
        {"Sid": "ModelsList", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws-cn:s3:::models-bkt"},
        {"Sid": "ModelsRead", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": "arn:aws-cn:s3:::models-bkt/*"}]}


@pytest.mark.parametrize("uri, resource", [
    ("s3://qa-bkt/fleet/prod/", "arn:aws-us-gov:s3:::qa-bkt/fleet/prod/qa/*"),
    ("s3://qa-bkt", "arn:aws-us-gov:s3:::qa-bkt/qa/*"),
])
def test_policy_for_qa_reports_puts_under_qa(uri, resource):
    doc = iam.policy_document(iam.Access(qa_reports_s3_uri=uri), "us-gov-west-1", ACCOUNT)
    assert doc == {"Version": "2012-10-17", "Statement": [
        {"Sid": "QaReportsWrite", "Effect": "Allow", "Action": "s3:PutObject", "Resource": resource}]}


def test_policy_for_ecr_pulls_whole():
    doc = iam.policy_document(iam.Access(ecr_pull=True), "eu-west-1", ACCOUNT)
    assert doc == {"Version": "2012-10-17", "Statement": [
        {"Sid": "EcrToken", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
        {"Sid": "EcrPull", "Effect": "Allow", "Resource": f"arn:aws:ecr:eu-west-1:{ACCOUNT}:repository/*",
         "Action": ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]}]}


def test_policy_for_bundle_and_secrets_whole():
    access = iam.Access(bundle_s3_url="s3://bundles/prod/b-1.tar.gz",
                        secret_parameters=["/tritonfleet/prod/secret", "Xplain/one", "//two"])
    doc = iam.policy_document(access, "eu-west-1", ACCOUNT)
    assert doc == {"Version": "2012-10-17", "Statement": [
        {"Sid": "BundleRead", "Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bundles/prod/b-1.tar.gz"},
        {"Sid": "SecretsRead", "Effect": "Allow", "Action": "ssm:GetParameter", "Resource": [
            f"arn:aws:ssm:eu-west-1:{ACCOUNT}:parameter/tritonfleet/prod/secret",
            f"arn:aws:ssm:eu-west-1:{ACCOUNT}:parameter/Xplain/one",
            f"arn:aws:ssm:eu-west-1:{ACCOUNT}:parameter/two"]}]}


def test_policy_with_every_grant_keeps_them_all_in_order():
    access = iam.Access(models_s3_uri="s3://m/p", qa_reports_s3_uri="s3://q/r", ecr_pull=True,
                        bundle_s3_url="s3://b/k.tgz", secret_parameters=("/s",))
    doc = iam.policy_document(access, REGION, ACCOUNT)
    assert [s["Sid"] for s in doc["Statement"]] == [
        "ModelsList", "ModelsRead", "QaReportsWrite", "EcrToken", "EcrPull", "BundleRead", "SecretsRead"]
    assert doc["Version"] == "2012-10-17"


@pytest.mark.parametrize("access", [iam.Access(), iam.Access(models_s3_uri="", qa_reports_s3_uri="",
                                                              bundle_s3_url="", secret_parameters=())])
def test_policy_granting_nothing_is_none(access):
    assert iam.policy_document(access, REGION, ACCOUNT) is None


@pytest.mark.parametrize("access, said", [
    (iam.Access(models_s3_uri="models/prod"), "models S3 URI 'models/prod': expected s3://bucket/prefix"),
    (iam.Access(qa_reports_s3_uri="qa/prod"), "QA reports S3 URI 'qa/prod': expected s3://bucket/prefix"),
    (iam.Access(bundle_s3_url="https://b/k"), "bundle URL 'https://b/k': expected s3://bucket/prefix"),
])
def test_policy_refuses_a_bad_uri_naming_which(access, said):
    with pytest.raises(FleetError) as caught:
        iam.policy_document(access, REGION, ACCOUNT)
    assert str(caught.value) == said


# ---- ensure_instance_profile ----

def test_ensure_creates_role_policy_and_profile_for_a_new_fleet():
    stub = Iam()
    access = iam.Access(ecr_pull=True)
    assert iam.ensure_instance_profile(clients(stub), "prod", access) == NAME
    assert stub.ops() == ["get_role", "create_role", "put_role_policy", "get_instance_profile",
                          "create_instance_profile", "add_role_to_instance_profile"]
    assert stub.kwargs("get_role") == [{"RoleName": NAME}]
    (created,) = stub.kwargs("create_role")
    trust = json.loads(created.pop("AssumeRolePolicyDocument"))
    assert trust == {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    assert created == {"RoleName": NAME, "Path": "/tritonfleet/", "Description": "tritonfleet fleet prod hosts",
                       "Tags": ROLE_TAGS}
    (put,) = stub.kwargs("put_role_policy")
    assert json.loads(put.pop("PolicyDocument")) == iam.policy_document(access, REGION, ACCOUNT)
    assert put == {"RoleName": NAME, "PolicyName": POLICY}
    assert stub.kwargs("get_instance_profile") == [{"InstanceProfileName": NAME}]
    assert stub.kwargs("create_instance_profile") == [
        {"InstanceProfileName": NAME, "Path": "/tritonfleet/", "Tags": PROFILE_TAGS}]
    assert stub.kwargs("add_role_to_instance_profile") == [{"InstanceProfileName": NAME, "RoleName": NAME}]


def test_ensure_takes_the_account_from_the_roles_arn():
    stub = Iam(role={**role(), "Arn": "arn:aws:iam::210987654321:role/tritonfleet/" + NAME}, profile=profile())
    iam.ensure_instance_profile(clients(stub, "eu-west-1"), "prod", iam.Access(ecr_pull=True))
    (put,) = stub.kwargs("put_role_policy")
    pull = json.loads(put["PolicyDocument"])["Statement"][1]
    assert pull["Resource"] == "arn:aws:ecr:eu-west-1:210987654321:repository/*"


def test_ensure_names_role_and_profile_by_fleet_and_region():
    stub = Iam()
    assert iam.ensure_instance_profile(clients(stub, "eu-west-1"), "canary", iam.Access()) == \
        "tritonfleet-canary-eu-west-1"
    assert stub.kwargs("create_role")[0]["Tags"] == fleet_tags("canary", "iam-role")
    assert stub.kwargs("create_role")[0]["Description"] == "tritonfleet fleet canary hosts"
    assert stub.kwargs("create_instance_profile")[0]["Tags"] == fleet_tags("canary", "instance-profile")


def test_ensure_on_a_complete_fleet_only_updates_the_policy():
    stub = Iam(role=role(), profile=profile())
    assert iam.ensure_instance_profile(clients(stub), "prod", iam.Access(models_s3_uri="s3://m/p")) == NAME
    assert stub.ops() == ["get_role", "put_role_policy", "get_instance_profile"]


def test_ensure_adds_the_role_to_a_profile_that_lacks_it():
    stub = Iam(role=role(), profile=profile(roles=("someone-else",)))
    iam.ensure_instance_profile(clients(stub), "prod", iam.Access(models_s3_uri="s3://m/p"))
    assert stub.kwargs("add_role_to_instance_profile") == [{"InstanceProfileName": NAME, "RoleName": NAME}]


def test_ensure_adds_the_role_to_a_profile_reply_without_roles():
    bare = profile()
    del bare["Roles"]
    stub = Iam(role=role(), profile=bare)
    iam.ensure_instance_profile(clients(stub), "prod", iam.Access(models_s3_uri="s3://m/p"))
    assert stub.kwargs("add_role_to_instance_profile") == [{"InstanceProfileName": NAME, "RoleName": NAME}]


def test_ensure_without_grants_deletes_the_old_inline_policy():
    stub = Iam(role=role(), profile=profile(), inline=["other", POLICY])
    iam.ensure_instance_profile(clients(stub), "prod", iam.Access())
    assert stub.ops() == ["get_role", "list_role_policies", "delete_role_policy", "get_instance_profile"]
    assert stub.kwargs("list_role_policies") == [{"RoleName": NAME}]
    assert stub.kwargs("delete_role_policy") == [{"RoleName": NAME, "PolicyName": POLICY}]


def test_ensure_without_grants_and_without_the_policy_deletes_nothing():
    stub = Iam(role=role(), profile=profile(), inline=["other"])
    iam.ensure_instance_profile(clients(stub), "prod", iam.Access())
    assert stub.ops() == ["get_role", "list_role_policies", "get_instance_profile"]


@pytest.mark.parametrize("tags", [None, [], fleet_tags("other", "iam-role"), fleet_tags("prod", "instance-profile")])
def test_ensure_refuses_a_role_of_that_name_not_tagged_for_the_fleet(tags):
    stub = Iam(role=role(tags=tags), profile=profile())
    with pytest.raises(FleetError) as caught:
        iam.ensure_instance_profile(clients(stub), "prod", iam.Access(ecr_pull=True))
    assert str(caught.value) == f"IAM role {NAME} exists but is not tagged for fleet prod; remove or rename it"
    assert stub.ops() == ["get_role"]


@pytest.mark.parametrize("tags", [None, [], fleet_tags("other", "instance-profile"), fleet_tags("prod", "iam-role")])
def test_ensure_refuses_a_profile_of_that_name_not_tagged_for_the_fleet(tags):
    stub = Iam(role=role(), profile=profile(tags=tags))
    with pytest.raises(FleetError) as caught:
        iam.ensure_instance_profile(clients(stub), "prod", iam.Access(ecr_pull=True))
    assert str(caught.value) == (f"instance profile {NAME} exists but is not tagged for fleet prod; "
                                 "remove or rename it")
    assert "add_role_to_instance_profile" not in stub.ops()


@pytest.mark.parametrize("op", ["get_role", "create_role", "put_role_policy", "get_instance_profile",
                                "create_instance_profile", "add_role_to_instance_profile"])
def test_ensure_turns_an_aws_error_into_one_line(op):
    stub = Iam(fail={op: client_error("AccessDenied", "User: x is not\n  authorized")})
    with pytest.raises(FleetError) as caught:
        iam.ensure_instance_profile(clients(stub), "prod", iam.Access(ecr_pull=True))
    assert str(caught.value) == f"IAM {NAME}: AccessDenied: User: x is not authorized"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_ensure_error_listing_policies_is_one_line():
    stub = Iam(role=role(), fail={"list_role_policies": client_error("Throttling", "slow down")})
    with pytest.raises(FleetError) as caught:
        iam.ensure_instance_profile(clients(stub), "prod", iam.Access())
    assert str(caught.value) == (f"IAM {NAME}: AWS throttled the requests (Throttling: slow down); run it again "
                                 "in a minute, or with fewer concurrent tritonfleet runs against this account and region")


# ---- delete_instance_profile ----

def test_delete_removes_profile_then_role_with_its_policies():
    stub = Iam(role=role(), profile=profile(roles=(NAME, "stray")), inline=["a", POLICY],
               attached=["arn:aws:iam::aws:policy/ReadOnly", "arn:aws:iam::1:policy/mine"], other_profiles=["p2", "p3"])
    assert iam.delete_instance_profile(clients(stub), "prod") == [f"instance-profile/{NAME}", f"role/{NAME}"]
    assert stub.calls == [
        ("get_instance_profile", {"InstanceProfileName": NAME}),
        ("remove_role_from_instance_profile", {"InstanceProfileName": NAME, "RoleName": NAME}),
        ("remove_role_from_instance_profile", {"InstanceProfileName": NAME, "RoleName": "stray"}),
        ("delete_instance_profile", {"InstanceProfileName": NAME}),
        ("get_role", {"RoleName": NAME}),
        ("list_role_policies", {"RoleName": NAME}),
        ("delete_role_policy", {"RoleName": NAME, "PolicyName": "a"}),
        ("delete_role_policy", {"RoleName": NAME, "PolicyName": POLICY}),
        ("list_attached_role_policies", {"RoleName": NAME}),
        ("detach_role_policy", {"RoleName": NAME, "PolicyArn": "arn:aws:iam::aws:policy/ReadOnly"}),
        ("detach_role_policy", {"RoleName": NAME, "PolicyArn": "arn:aws:iam::1:policy/mine"}),
        ("list_instance_profiles_for_role", {"RoleName": NAME}),
        ("remove_role_from_instance_profile", {"InstanceProfileName": "p2", "RoleName": NAME}),
        ("remove_role_from_instance_profile", {"InstanceProfileName": "p3", "RoleName": NAME}),
        ("delete_role", {"RoleName": NAME}),
    ]


def test_delete_of_a_profile_reply_without_roles_deletes_it():
    bare = profile()
    del bare["Roles"]
    stub = Iam(profile=bare)
    assert iam.delete_instance_profile(clients(stub), "prod") == [f"instance-profile/{NAME}"]
    assert stub.ops() == ["get_instance_profile", "delete_instance_profile", "get_role"]


def test_delete_with_nothing_there_deletes_nothing():
    stub = Iam()
    assert iam.delete_instance_profile(clients(stub, "eu-west-1"), "canary") == []
    assert stub.calls == [("get_instance_profile", {"InstanceProfileName": "tritonfleet-canary-eu-west-1"}),
                          ("get_role", {"RoleName": "tritonfleet-canary-eu-west-1"})]


@pytest.mark.parametrize("tags", [None, fleet_tags("other", "instance-profile"), fleet_tags("prod", "iam-role")])
def test_delete_leaves_a_profile_not_tagged_for_the_fleet(tags):
    stub = Iam(role=role(), profile=profile(tags=tags))
    assert iam.delete_instance_profile(clients(stub), "prod") == [f"role/{NAME}"]
    assert "delete_instance_profile" not in stub.ops()
    assert stub.kwargs("remove_role_from_instance_profile") == []


@pytest.mark.parametrize("tags", [None, fleet_tags("other", "iam-role"), fleet_tags("prod", "instance-profile")])
def test_delete_leaves_a_role_not_tagged_for_the_fleet(tags):
    stub = Iam(role=role(tags=tags), profile=profile())
    assert iam.delete_instance_profile(clients(stub), "prod") == [f"instance-profile/{NAME}"]
    assert stub.ops() == ["get_instance_profile", "remove_role_from_instance_profile", "delete_instance_profile",
                          "get_role"]


@pytest.mark.parametrize("op", ["get_instance_profile", "remove_role_from_instance_profile",
                                "delete_instance_profile", "get_role", "list_role_policies", "delete_role_policy",
                                "list_attached_role_policies", "detach_role_policy",
                                "list_instance_profiles_for_role", "delete_role"])
def test_delete_turns_an_aws_error_into_one_line(op):
    stub = Iam(role=role(), profile=profile(), inline=[POLICY], attached=["arn:p"], other_profiles=["p2"],
               fail={op: client_error("DeleteConflict", "Cannot delete\tentity")})
    with pytest.raises(FleetError) as caught:
        iam.delete_instance_profile(clients(stub), "prod")
    assert str(caught.value) == f"IAM {NAME}: DeleteConflict: Cannot delete entity"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
