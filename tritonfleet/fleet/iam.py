"""The fleet's IAM role and instance profile: hosts get AWS access from it, never from keys.

The inline policy grants exactly:

- read-only access to the model repository prefix (``models_s3_uri``): ``s3:ListBucket`` on the bucket
  with an ``s3:prefix`` condition, ``s3:GetObject`` under the prefix;
- ``s3:PutObject`` under ``<qa_reports_s3_uri>/qa/*`` (where scheduled QA uploads its reports);
- optionally ECR pulls (the triton role's ``amazon-ecr-credential-helper``), the ASG bundle object and
  the SSM parameters the ASG user data reads secrets from;
- for an Auto Scaling group's hosts (``asg_fleet``): ``cloudwatch:PutMetricData`` in the ``tritonfleet``
  namespace only (the queue-time metric ``fleet autoscale`` tracks, :mod:`tritonfleet.agent.queuetime`), and
  ``autoscaling:SetInstanceHealth`` on the groups tagged for that fleet only (the watchdog's ``replace``), the
  lifecycle hooks' ``CompleteLifecycleAction`` and ``RecordLifecycleActionHeartbeat`` on them, ``ec2:DescribeTags``
  (an instance finds its group) and ``ec2:CreateTags`` of the abandon-reason tag on the fleet's instances.

Names are ``tritonfleet-<fleet>-<region>`` (IAM is global to the account), path ``/tritonfleet/``; both
carry the fleet tags, and ``down`` deletes only what carries them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from tritonfleet.fleet.aws import Clients, error_code, one_line
from tritonfleet.fleet.tags import ROLE_IAM, ROLE_PROFILE, TAG_FLEET, FleetError, belongs, resource_name, tags

#: the CloudWatch namespace of the hosts' metrics (tritonfleet/agent/queuetime.py's NAMESPACE)
METRIC_NAMESPACE = "tritonfleet"
#: the tag an abandoned launch leaves on its instance (tritonfleet/agent/lifecycle.py's)
ABANDON_REASON_TAG = "tritonfleet:abandon-reason"

PATH = "/tritonfleet/"
POLICY_NAME = "tritonfleet-host-access"
ASSUME_EC2 = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


@dataclass(frozen=True)
class Access:
    """What the hosts may reach (each optional)."""

    models_s3_uri: str | None = None
    qa_reports_s3_uri: str | None = None
    ecr_pull: bool = False
    bundle_s3_url: str | None = None
    secret_parameters: Sequence[str] = field(default_factory=tuple)
    asg_fleet: str | None = None  # the hosts are an Auto Scaling group's, of this fleet


def split_s3(uri: str, what: str = "S3 URI") -> tuple[str, str]:
    """``s3://bucket/prefix/`` -> ``("bucket", "prefix")``."""
    if not isinstance(uri, str) or not uri.startswith("s3://") or not uri[5:].split("/", 1)[0]:
        raise FleetError(f"{what} {uri!r}: expected s3://bucket/prefix")
    bucket, _, prefix = uri[5:].partition("/")
    return bucket, prefix.strip("/")


def partition(region: str) -> str:
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def policy_document(access: Access, region: str, account: str) -> dict | None:
    """The inline policy for ``access`` (None when it grants nothing)."""
    arn = f"arn:{partition(region)}"
    statements: list[dict] = []
    if access.models_s3_uri:
        bucket, prefix = split_s3(access.models_s3_uri, "models S3 URI")
        listing: dict = {"Sid": "ModelsList", "Effect": "Allow", "Action": "s3:ListBucket",
                         "Resource": f"{arn}:s3:::{bucket}"}
        if prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
        statements += [listing, {"Sid": "ModelsRead", "Effect": "Allow", "Action": "s3:GetObject",
                                 "Resource": f"{arn}:s3:::{bucket}/{prefix + '/' if prefix else ''}*"}]
    if access.qa_reports_s3_uri:
        bucket, prefix = split_s3(access.qa_reports_s3_uri, "QA reports S3 URI")
        statements.append({"Sid": "QaReportsWrite", "Effect": "Allow", "Action": "s3:PutObject",
                           "Resource": f"{arn}:s3:::{bucket}/{prefix + '/' if prefix else ''}qa/*"})
    if access.ecr_pull:
        statements += [
            {"Sid": "EcrToken", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
            {"Sid": "EcrPull", "Effect": "Allow", "Resource": f"{arn}:ecr:{region}:{account}:repository/*",
             "Action": ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]}]
    if access.bundle_s3_url:
        bucket, key = split_s3(access.bundle_s3_url, "bundle URL")
        statements.append({"Sid": "BundleRead", "Effect": "Allow", "Action": "s3:GetObject",
                           "Resource": f"{arn}:s3:::{bucket}/{key}"})
    if access.secret_parameters:
        statements.append({"Sid": "SecretsRead", "Effect": "Allow", "Action": "ssm:GetParameter",
                           "Resource": [f"{arn}:ssm:{region}:{account}:parameter/{p.lstrip('/')}"
                                        for p in access.secret_parameters]})
    if access.asg_fleet:
        statements += [
            {"Sid": "QueueTimeMetric", "Effect": "Allow", "Action": "cloudwatch:PutMetricData", "Resource": "*",
             "Condition": {"StringEquals": {"cloudwatch:namespace": METRIC_NAMESPACE}}},
            {"Sid": "WatchdogReplace", "Effect": "Allow", "Action": "autoscaling:SetInstanceHealth",
             "Resource": f"{arn}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/*",
             "Condition": {"StringEquals": {f"autoscaling:ResourceTag/{TAG_FLEET}": access.asg_fleet}}},
            # the lifecycle hooks (tritonfleet/agent/lifecycle.py): complete them, beat while a bootstrap runs
            {"Sid": "LifecycleHooks", "Effect": "Allow",
             "Action": ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"],
             "Resource": f"{arn}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/*",
             "Condition": {"StringEquals": {f"autoscaling:ResourceTag/{TAG_FLEET}": access.asg_fleet}}},
            # which group the instance is in (its aws:autoscaling:groupName tag); DescribeTags has no resource scope
            {"Sid": "FindOwnGroup", "Effect": "Allow", "Action": "ec2:DescribeTags", "Resource": "*"},
            # an abandoned launch says why on the instance: that one tag, on the fleet's instances only
            {"Sid": "AbandonReasonTag", "Effect": "Allow", "Action": "ec2:CreateTags",
             "Resource": f"{arn}:ec2:{region}:{account}:instance/*",
             "Condition": {"StringEquals": {f"aws:ResourceTag/{TAG_FLEET}": access.asg_fleet},
                           "ForAllValues:StringEquals": {"aws:TagKeys": [ABANDON_REASON_TAG]}}}]
    return {"Version": "2012-10-17", "Statement": statements} if statements else None


def _get(call, **kwargs) -> dict | None:
    try:
        return call(**kwargs)
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return None
        raise


def ensure_instance_profile(clients: Clients, fleet: str, access: Access) -> str:
    """Create or update the role, its inline policy and the instance profile; returns the profile name."""
    iam, name = clients.iam, resource_name(fleet, clients.region)
    try:
        role = _get(iam.get_role, RoleName=name)
        if role is None:
            role = iam.create_role(RoleName=name, Path=PATH, AssumeRolePolicyDocument=json.dumps(ASSUME_EC2),
                                   Description=f"tritonfleet fleet {fleet} hosts", Tags=tags(fleet, ROLE_IAM))
        elif not belongs(role["Role"].get("Tags"), fleet, ROLE_IAM):
            raise FleetError(f"IAM role {name} exists but is not tagged for fleet {fleet}; remove or rename it")
        account = role["Role"]["Arn"].split(":")[4]
        document = policy_document(access, clients.region, account)
        if document:
            iam.put_role_policy(RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(document))
        elif POLICY_NAME in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=POLICY_NAME)
        profile = _get(iam.get_instance_profile, InstanceProfileName=name)
        if profile is None:
            profile = iam.create_instance_profile(InstanceProfileName=name, Path=PATH, Tags=tags(fleet, ROLE_PROFILE))
        elif not belongs(profile["InstanceProfile"].get("Tags"), fleet, ROLE_PROFILE):
            raise FleetError(f"instance profile {name} exists but is not tagged for fleet {fleet}; remove or rename it")
        if name not in [r["RoleName"] for r in profile["InstanceProfile"].get("Roles", [])]:
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    except ClientError as exc:
        raise FleetError(f"IAM {name}: {one_line(exc)}") from None
    return name


def delete_instance_profile(clients: Clients, fleet: str) -> list[str]:
    """Delete the fleet's instance profile and role (only when tagged for the fleet)."""
    iam, name, deleted = clients.iam, resource_name(fleet, clients.region), []
    try:
        profile = _get(iam.get_instance_profile, InstanceProfileName=name)
        if profile and belongs(profile["InstanceProfile"].get("Tags"), fleet, ROLE_PROFILE):
            for role in profile["InstanceProfile"].get("Roles", []):
                iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role["RoleName"])
            iam.delete_instance_profile(InstanceProfileName=name)
            deleted.append(f"instance-profile/{name}")
        role = _get(iam.get_role, RoleName=name)
        if role and belongs(role["Role"].get("Tags"), fleet, ROLE_IAM):
            for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
                iam.delete_role_policy(RoleName=name, PolicyName=policy)
            for attached in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=name, PolicyArn=attached["PolicyArn"])
            for other in iam.list_instance_profiles_for_role(RoleName=name)["InstanceProfiles"]:
                iam.remove_role_from_instance_profile(InstanceProfileName=other["InstanceProfileName"], RoleName=name)
            iam.delete_role(RoleName=name)
            deleted.append(f"role/{name}")
    except ClientError as exc:
        raise FleetError(f"IAM {name}: {one_line(exc)}") from None
    return deleted
