"""Auto Scaling groups for fleets larger than one controller reaches over SSH.

Each instance deploys itself at boot: the launch template's user data (``templates/fleet/
asg-user-data.sh.j2``) downloads the fleet bundle (:mod:`tritonfleet.fleet.bundle`), checks its sha256
and runs ``pyinfra @local deploys/serve.py`` from it. The group pins a launch template *version* (not
``$Latest``): a new bundle or AMI is a new version, rolled out by an instance refresh
(:mod:`tritonfleet.fleet.refresh`), which can then also roll back.

Instances get the fleet and role tags from the launch template (so ``list`` and ``inventories/ec2.py``
see them); the group and the template carry the fleet tag with their own role.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence

from botocore.exceptions import ClientError

from tritonfleet.fleet.aws import Clients, error_code, one_line, poll
from tritonfleet.fleet.instances import LaunchRequest
from tritonfleet.fleet.tags import (
    ROLE_ASG,
    ROLE_LT,
    TAG_FLEET,
    TAG_ROLE,
    FleetError,
    as_dict,
    belongs,
    fleet_filters,
    resource_name,
    tag_specs,
)
from tritonfleet.templating import render

USER_DATA_TEMPLATE = "fleet/asg-user-data.sh.j2"
USER_DATA_LIMIT = 16384  # EC2 accepts 16 KiB of user data before base64


def render_user_data(bundle_url: str, sha256: str, region: str, *, secret_env: Mapping[str, str] | None = None,
                     secret_parameters: Mapping[str, str] | None = None, inventory: str = "inventories/fleet_local.py",
                     deploy: str = "deploys/serve.py") -> str:
    """The user data script; ``secret_env`` maps data keys to env vars, ``secret_parameters`` keys to SSM names."""
    if not bundle_url.startswith("s3://") or len(sha256) != 64:
        raise FleetError(f"bundle {bundle_url} / sha256 {sha256!r}: expected an s3:// URL and a hex sha256")
    env, params = dict(secret_env or {}), dict(secret_parameters or {})
    secrets = {env[key]: params[key] for key in sorted(params)}
    text = render(USER_DATA_TEMPLATE, bundle_url=bundle_url, sha256=sha256, region=region, secrets=secrets,
                  inventory=inventory, deploy=deploy)
    if len(text.encode()) > USER_DATA_LIMIT:
        raise FleetError(f"user data is {len(text.encode())} bytes; EC2 takes at most {USER_DATA_LIMIT}")
    return text


def template_data(req: LaunchRequest, user_data: str) -> dict:
    """``LaunchTemplateData`` from a launch request (no count, no subnet: the group places instances)."""
    params = req.params(None, 1)
    data = {k: v for k, v in params.items() if k not in ("MinCount", "MaxCount", "ClientToken", "SubnetId")}
    for nic in data.get("NetworkInterfaces", []):
        nic.pop("SubnetId", None)
    data["UserData"] = base64.b64encode(user_data.encode()).decode()
    return data


def ensure_launch_template(clients: Clients, fleet: str, data: dict) -> tuple[str, int]:
    """Create the fleet's launch template, or add a version when ``data`` changed; ``(id, version)``."""
    ec2, name = clients.ec2, resource_name(fleet)
    # the version description carries a digest of the data: describe normalizes what it returns
    digest = "tritonfleet " + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]
    found = ec2.describe_launch_templates(Filters=fleet_filters(fleet, ROLE_LT))["LaunchTemplates"]
    try:
        if not found:
            created = ec2.create_launch_template(
                LaunchTemplateName=name, LaunchTemplateData=data, VersionDescription=digest,
                TagSpecifications=tag_specs(fleet, ROLE_LT, ["launch-template"]))["LaunchTemplate"]
            return created["LaunchTemplateId"], int(created["LatestVersionNumber"])
        template_id = found[0]["LaunchTemplateId"]
        latest = ec2.describe_launch_template_versions(LaunchTemplateId=template_id, Versions=["$Latest"])
        current = latest["LaunchTemplateVersions"][0]
        if current.get("VersionDescription") == digest:
            return template_id, int(current["VersionNumber"])
        version = ec2.create_launch_template_version(LaunchTemplateId=template_id, LaunchTemplateData=data,
                                                     VersionDescription=digest)["LaunchTemplateVersion"]
        return template_id, int(version["VersionNumber"])
    except ClientError as exc:
        raise FleetError(f"launch template {name}: {one_line(exc)}") from None


def _group_tags(name: str, fleet: str) -> list[dict]:
    return [{"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": key, "Value": value,
             "PropagateAtLaunch": False} for key, value in ((TAG_FLEET, fleet), (TAG_ROLE, ROLE_ASG))]


def find_groups(clients: Clients, fleet: str) -> list[dict]:
    pages = clients.asg.get_paginator("describe_auto_scaling_groups").paginate(
        Filters=[{"Name": f"tag:{TAG_FLEET}", "Values": [fleet]}])
    return [g for page in pages for g in page["AutoScalingGroups"] if belongs(g.get("Tags"), fleet, ROLE_ASG)]


def ensure_group(clients: Clients, fleet: str, template: tuple[str, int], subnets: Sequence[str], *,
                 desired: int, min_size: int | None = None, max_size: int | None = None,
                 grace: int = 900) -> tuple[str, bool]:
    """Create the fleet's group, or point it at ``template``'s version and size; ``(name, created)``.

    An existing group's running instances keep their version until an instance refresh replaces them."""
    if not subnets:
        raise FleetError("an Auto Scaling group needs subnets: pass --subnet (one per AZ to spread over)")
    name = resource_name(fleet)
    min_size = desired if min_size is None else min_size
    max_size = max(desired, min_size) if max_size is None else max_size
    if not 0 <= min_size <= desired <= max_size:
        raise FleetError(f"sizes min {min_size} <= desired {desired} <= max {max_size} do not hold")
    spec = {"LaunchTemplate": {"LaunchTemplateId": template[0], "Version": str(template[1])},
            "MinSize": min_size, "MaxSize": max_size, "DesiredCapacity": desired,
            "VPCZoneIdentifier": ",".join(subnets), "HealthCheckGracePeriod": grace, "DefaultInstanceWarmup": grace}
    try:
        if any(g["AutoScalingGroupName"] == name for g in find_groups(clients, fleet)):
            clients.asg.update_auto_scaling_group(AutoScalingGroupName=name, **spec)
            return name, False
        clients.asg.create_auto_scaling_group(AutoScalingGroupName=name, Tags=_group_tags(name, fleet), **spec)
        return name, True
    except ClientError as exc:
        if error_code(exc) == "AlreadyExists":
            raise FleetError(f"Auto Scaling group {name} exists but is not tagged for fleet {fleet}") from None
        raise FleetError(f"Auto Scaling group {name}: {one_line(exc)}") from None


def delete_groups(clients: Clients, fleet: str, *, timeout: float = 900, interval: float = 15,
                  sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Force-delete the fleet's groups (their instances terminate) and wait until they are gone."""
    names = [g["AutoScalingGroupName"] for g in find_groups(clients, fleet)]
    for name in names:
        try:
            clients.asg.delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
        except ClientError as exc:
            if error_code(exc) != "ScalingActivityInProgress":
                raise FleetError(f"cannot delete Auto Scaling group {name}: {one_line(exc)}") from None

    def gone() -> bool | None:
        left = clients.asg.describe_auto_scaling_groups(AutoScalingGroupNames=names)["AutoScalingGroups"] if names else []
        return True if not left else None

    poll(gone, timeout=timeout, interval=interval, sleep=sleep, clock=clock, what="Auto Scaling groups to be deleted")
    return names


def delete_launch_templates(clients: Clients, fleet: str) -> list[str]:
    deleted = []
    for template in clients.ec2.describe_launch_templates(Filters=fleet_filters(fleet, ROLE_LT))["LaunchTemplates"]:
        if as_dict(template.get("Tags")).get(TAG_FLEET) != fleet:
            continue
        clients.ec2.delete_launch_template(LaunchTemplateId=template["LaunchTemplateId"])
        deleted.append(template["LaunchTemplateName"])
    return deleted
