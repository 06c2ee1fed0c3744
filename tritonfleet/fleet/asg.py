"""Auto Scaling groups for fleets larger than one controller reaches over SSH.

Each instance deploys itself at boot: the launch template's user data (``templates/fleet/
asg-user-data.sh.j2``) downloads the fleet bundle (:mod:`tritonfleet.fleet.bundle`), checks its sha256
and runs ``pyinfra @local deploys/serve.py`` from it. The group pins a launch template *version* (not
``$Latest``): a new bundle or AMI is a new version, rolled out by an instance refresh
(:mod:`tritonfleet.fleet.refresh`), which can then also roll back.

Instances get the fleet and role tags from the launch template (so ``list`` and ``inventories/ec2.py``
see them); the group and the template carry the fleet tag with their own role.

Drain and warm start: the group has two lifecycle hooks (:func:`ensure_lifecycle_hooks`, put by
:func:`ensure_group`, so ``fleet up --asg`` and every later update keep them):

- ``tritonfleet-launch`` (``EC2_INSTANCE_LAUNCHING``, default ABANDON): a new instance stays in
  ``Pending:Wait``, out of the group's target groups and its capacity, until its user data completes the
  hook: CONTINUE once the deploy and the QA gate passed, ABANDON with the reason (the instance's
  ``tritonfleet:abandon-reason`` tag and the bootstrap log) otherwise. The long deploy records heartbeats
  (bounded in count); a bootstrap that hangs or dies is abandoned by the hook's timeout. So an instance is
  InService only when it serves.
- ``tritonfleet-terminate`` (``EC2_INSTANCE_TERMINATING``, default CONTINUE): the host's termination watcher
  (``tritonfleet-lifecycle.service``, :mod:`tritonfleet.agent.lifecycle`) sees the target lifecycle state
  ``Terminated`` in the instance metadata, runs the drain command (if any), waits (bounded) until Triton has
  no request in flight and completes the hook. A target group attached to the group is left by the Auto
  Scaling service itself (it deregisters a terminating instance and waits for the target group's
  deregistration delay); the host needs no Elastic Load Balancing permission. When the watcher is gone, the
  hook's timeout lets the termination go on.

The timeouts are AWS's bounds for a hook (30 to 7200 s) and the host side's bounds fit inside them: heartbeats
every :data:`HEARTBEAT_EVERY` s at most, the deploy at most :data:`DEPLOY_LIMIT` s, the drain at most
``drain_timeout + drain_wait`` s, less than the termination hook's timeout.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence

from botocore.exceptions import ClientError

from tritonfleet.fleet.aws import Clients, error_code, one_line, poll
from tritonfleet.fleet.bundle import DATA_FILE
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
LIFECYCLE_UNIT_TEMPLATE = "fleet/tritonfleet-lifecycle.service.j2"
USER_DATA_LIMIT = 16384  # EC2 accepts 16 KiB of user data before base64
#: the venv the user data installs the bundle into (the template's VENV)
VENV = "/opt/tritonfleet/controller"
QA_DEPLOY = "deploys/qa.py"

#: the lifecycle hooks (tritonfleet/agent/lifecycle.py has the same names: the agent cannot import this module)
LAUNCH_HOOK = "tritonfleet-launch"
TERMINATE_HOOK = "tritonfleet-terminate"
REASON_TAG = "tritonfleet:abandon-reason"
#: AWS's bounds of a hook's HeartbeatTimeout, seconds
HOOK_TIMEOUT_RANGE = (30, 7200)
#: seconds a new instance may go without a heartbeat: the download, the venv and pip run before the first one
LAUNCH_TIMEOUT = 1800
#: seconds a terminating instance may take to drain before the group terminates it anyway
TERMINATE_TIMEOUT = 600
#: seconds between two heartbeats of the deploy (at most; a third of the launch timeout when that is shorter)
HEARTBEAT_EVERY = 300
#: seconds the serve deploy may take, and the QA gate: then it is stopped and the instance abandoned
DEPLOY_LIMIT = 7200
QA_LIMIT = 3600
#: the termination watcher's defaults: seconds between two looks at the target lifecycle state, seconds the
#: drain command may take, seconds to wait for the requests in flight
WATCH_EVERY = 5
DRAIN_TIMEOUT = 60
DRAIN_WAIT = 300
#: seconds of the termination hook's timeout kept for the completion itself (IMDS, the tag lookup, the call)
COMPLETE_MARGIN = 60
#: a drain command's words reach a systemd ExecStart= as one word joined by spaces: no spaces, quotes, backslashes,
#: `$` or `%` (systemd expands the last two)
_DRAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./{}-]{1,256}$")


def _check_timeout(what: str, seconds: int) -> int:
    low, high = HOOK_TIMEOUT_RANGE
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not low <= seconds <= high:
        raise FleetError(f"{what} {seconds!r}: expected {low}-{high} seconds (AWS's bounds for a lifecycle hook)")
    return seconds


def heartbeat_every(launch_timeout: int = LAUNCH_TIMEOUT) -> int:
    """Seconds between two heartbeats: :data:`HEARTBEAT_EVERY`, or a third of a shorter launch timeout (so one
    heartbeat may be lost without the hook timing out)."""
    return max(10, min(HEARTBEAT_EVERY, _check_timeout("--launch-timeout", launch_timeout) // 3))


def lifecycle_unit(region: str, *, drain_command: Sequence[str] = (), drain_timeout: int = DRAIN_TIMEOUT,
                   drain_wait: int = DRAIN_WAIT, terminate_timeout: int = TERMINATE_TIMEOUT) -> str:
    """The termination watcher's systemd unit (installed by the user data). ``drain_command``: argv run when the
    instance starts terminating (``{instance_id}`` in a word is replaced), e.g. a script that takes the host out of
    an HAProxy front; none by default (a target group attached to the group needs none)."""
    _check_timeout("--terminate-timeout", terminate_timeout)
    if len(drain_command) > 32 or not all(isinstance(w, str) and _DRAIN_WORD.match(w) for w in drain_command):
        raise FleetError(f"drain command {list(drain_command)!r}: expected at most 32 words of letters, digits "
                         "and _@+=:,./{}- (no spaces, quotes, $ or %: it runs from a systemd unit)")
    for what, value in (("drain timeout", drain_timeout), ("drain wait", drain_wait)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FleetError(f"{what} {value!r}: expected a whole number of seconds >= 1")
    if drain_timeout + drain_wait + COMPLETE_MARGIN > terminate_timeout:
        raise FleetError(f"drain timeout {drain_timeout} s + drain wait {drain_wait} s + {COMPLETE_MARGIN} s to "
                         f"complete do not fit the termination hook's {terminate_timeout} s: shorten the drain or "
                         "raise --terminate-timeout")
    command = [f"{VENV}/bin/python", "-m", "tritonfleet.agent.lifecycle", "watch-termination", "--region", region,
               "--every", str(WATCH_EVERY), "--drain-timeout", str(drain_timeout), "--drain-wait", str(drain_wait)]
    if drain_command:
        command += ["--drain-command", " ".join(drain_command)]
    return render(LIFECYCLE_UNIT_TEMPLATE, command=command, stop_timeout=drain_timeout + drain_wait + COMPLETE_MARGIN)


def render_user_data(bundle_url: str, sha256: str, region: str, *, secret_env: Mapping[str, str] | None = None,
                     secret_parameters: Mapping[str, str] | None = None, inventory: str = "inventories/fleet_local.py",
                     deploy: str = "deploys/serve.py", launch_timeout: int = LAUNCH_TIMEOUT,
                     terminate_timeout: int = TERMINATE_TIMEOUT, drain_command: Sequence[str] = (),
                     drain_timeout: int = DRAIN_TIMEOUT, drain_wait: int = DRAIN_WAIT) -> str:
    """The user data script; ``secret_env`` maps data keys to env vars, ``secret_parameters`` keys to SSM names.

    The timeouts must be the ones :func:`ensure_group` puts on the hooks (both default to the same constants)."""
    if not bundle_url.startswith("s3://") or len(sha256) != 64:
        raise FleetError(f"bundle {bundle_url} / sha256 {sha256!r}: expected an s3:// URL and a hex sha256")
    env, params = dict(secret_env or {}), dict(secret_parameters or {})
    secrets = {env[key]: params[key] for key in sorted(params)}
    every = heartbeat_every(launch_timeout)
    unit = lifecycle_unit(region, drain_command=drain_command, drain_timeout=drain_timeout, drain_wait=drain_wait,
                          terminate_timeout=terminate_timeout)
    text = render(USER_DATA_TEMPLATE, bundle_url=bundle_url, sha256=sha256, region=region, secrets=secrets,
                  inventory=inventory, deploy=deploy, qa_deploy=QA_DEPLOY, data_file=DATA_FILE,
                  launch_hook=LAUNCH_HOOK, reason_tag=REASON_TAG, every=every,
                  deploy_beats=DEPLOY_LIMIT // every, deploy_limit=DEPLOY_LIMIT,
                  qa_beats=QA_LIMIT // every, qa_limit=QA_LIMIT, lifecycle_unit=unit)
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


def lifecycle_hooks(*, launch_timeout: int = LAUNCH_TIMEOUT,
                    terminate_timeout: int = TERMINATE_TIMEOUT) -> list[dict]:
    """The group's two hooks, as ``PutLifecycleHook`` (and ``LifecycleHookSpecificationList``) take them."""
    return [
        {"LifecycleHookName": LAUNCH_HOOK, "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
         "HeartbeatTimeout": _check_timeout("--launch-timeout", launch_timeout), "DefaultResult": "ABANDON"},
        {"LifecycleHookName": TERMINATE_HOOK, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
         "HeartbeatTimeout": _check_timeout("--terminate-timeout", terminate_timeout), "DefaultResult": "CONTINUE"},
    ]


def ensure_lifecycle_hooks(clients: Clients, group: str, *, launch_timeout: int = LAUNCH_TIMEOUT,
                           terminate_timeout: int = TERMINATE_TIMEOUT) -> list[str]:
    """Put the launch and termination hooks on ``group`` where they are missing or differ; the names put.

    A hook changed here applies to the instances that launch or terminate from now on."""
    wanted = lifecycle_hooks(launch_timeout=launch_timeout, terminate_timeout=terminate_timeout)
    try:
        found = {h["LifecycleHookName"]: h for h in clients.asg.describe_lifecycle_hooks(
            AutoScalingGroupName=group, LifecycleHookNames=[h["LifecycleHookName"] for h in wanted])["LifecycleHooks"]}
        put = []
        for hook in wanted:
            have = found.get(hook["LifecycleHookName"], {})
            if all(have.get(key) == value for key, value in hook.items()):
                continue
            clients.asg.put_lifecycle_hook(AutoScalingGroupName=group, **hook)
            put.append(hook["LifecycleHookName"])
        return put
    except ClientError as exc:
        raise FleetError(f"lifecycle hooks of Auto Scaling group {group}: {one_line(exc)}") from None


_TARGET_GROUP_ARN = re.compile(r"^arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:\d{12}:targetgroup/[A-Za-z0-9-]{1,32}/"
                               r"[0-9a-f]{16}$")


def check_target_groups(clients: Clients, arns: Sequence[str]) -> list[str]:
    """``arns`` (sorted, once each) when each is an ELBv2 target group of instances; else a one-line error saying
    what to pass. A group registers its instances by id, so an ``ip`` or ``lambda`` target group cannot be its."""
    wanted = sorted(set(arns))
    bad = [a for a in wanted if not _TARGET_GROUP_ARN.match(a)]
    if bad:
        raise FleetError(f"--target-group {bad[0]}: expected an ELBv2 target group ARN "
                         "(arn:aws:elasticloadbalancing:REGION:ACCOUNT:targetgroup/NAME/ID)")
    for arn in wanted:  # one at a time: the error names the one that is missing
        try:
            (found,) = clients.elbv2.describe_target_groups(TargetGroupArns=[arn])["TargetGroups"]
        except ClientError as exc:
            if error_code(exc) == "TargetGroupNotFound":
                raise FleetError(f"--target-group {arn}: no such target group in {clients.region}") from None
            raise FleetError(f"--target-group {arn}: {one_line(exc)}") from None
        kind = found.get("TargetType")
        if kind != "instance":
            raise FleetError(f"--target-group {arn}: its target type is {kind}; an Auto Scaling group registers "
                             "instances, so it needs a target group of type instance")
    return wanted


def ensure_group(clients: Clients, fleet: str, template: tuple[str, int], subnets: Sequence[str], *,
                 desired: int, min_size: int | None = None, max_size: int | None = None,
                 grace: int = 900, launch_timeout: int = LAUNCH_TIMEOUT,
                 terminate_timeout: int = TERMINATE_TIMEOUT,
                 target_groups: Sequence[str] | None = None) -> tuple[str, bool]:
    """Create the fleet's group, or point it at ``template``'s version and size; ``(name, created)``. Either way
    the group gets its lifecycle hooks (:func:`ensure_lifecycle_hooks`); a new group has them from its creation
    on, so that its first instances wait for their bootstrap too.

    ``target_groups``: the ELBv2 target groups of instances the group's instances serve in, exactly those (None:
    an existing group's stay as they are). The Auto Scaling service registers an instance once it is InService
    (its launch hook completed with CONTINUE) and deregisters a terminating one, waiting for the target group's
    deregistration delay, before its termination hook; the group then also replaces instances the target groups'
    health checks fail (health check type ELB).

    An existing group's running instances keep their version until an instance refresh replaces them."""
    hooks = lifecycle_hooks(launch_timeout=launch_timeout, terminate_timeout=terminate_timeout)
    wanted_tgs = None if target_groups is None else check_target_groups(clients, target_groups)
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
    if wanted_tgs is not None:
        spec["HealthCheckType"] = "ELB" if wanted_tgs else "EC2"
    try:
        existing = [g for g in find_groups(clients, fleet) if g["AutoScalingGroupName"] == name]
        created = not existing
        if created:
            clients.asg.create_auto_scaling_group(AutoScalingGroupName=name, Tags=_group_tags(name, fleet),
                                                  LifecycleHookSpecificationList=hooks,
                                                  **({"TargetGroupARNs": wanted_tgs} if wanted_tgs else {}), **spec)
        else:
            clients.asg.update_auto_scaling_group(AutoScalingGroupName=name, **spec)
            if wanted_tgs is not None:
                _set_target_groups(clients, name, set(existing[0].get("TargetGroupARNs") or []), set(wanted_tgs))
    except ClientError as exc:
        if error_code(exc) == "AlreadyExists":
            raise FleetError(f"Auto Scaling group {name} exists but is not tagged for fleet {fleet}") from None
        raise FleetError(f"Auto Scaling group {name}: {one_line(exc)}") from None
    ensure_lifecycle_hooks(clients, name, launch_timeout=launch_timeout, terminate_timeout=terminate_timeout)
    return name, created


def _set_target_groups(clients: Clients, name: str, have: set[str], wanted: set[str]) -> None:
    """Attach the target groups ``name`` lacks, then detach those no longer wanted (its instances deregister from
    them, each after its target group's deregistration delay)."""
    if wanted - have:
        clients.asg.attach_load_balancer_target_groups(AutoScalingGroupName=name, TargetGroupARNs=sorted(wanted - have))
    if have - wanted:
        clients.asg.detach_load_balancer_target_groups(AutoScalingGroupName=name, TargetGroupARNs=sorted(have - wanted))


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
