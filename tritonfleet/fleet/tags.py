"""Names and tags of what a fleet creates.

Everything tritonfleet creates for a fleet carries ``tritonfleet:fleet`` (the fleet name) and
``tritonfleet:role`` (what it is: the instances' role such as ``serve``, or ``security-group``,
``key-pair``, ``iam-role``, ``instance-profile``, ``launch-template``, ``auto-scaling-group``). ``down``
finds what to remove by these tags only, so resources it did not create are never touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

TAG_FLEET = "tritonfleet:fleet"
TAG_ROLE = "tritonfleet:role"
TAG_SSH_USER = "tritonfleet:ssh-user"
TAG_OS = "tritonfleet:os"
TAG_KEY_ORIGIN = "tritonfleet:key-origin"

ROLE_SG = "security-group"
ROLE_KEY = "key-pair"
ROLE_IAM = "iam-role"
ROLE_PROFILE = "instance-profile"
ROLE_LT = "launch-template"
ROLE_ASG = "auto-scaling-group"
#: Role of instances when none is given.
DEFAULT_ROLE = "serve"

_FLEET = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$")
_ROLE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")


class FleetError(Exception):
    """A fleet operation failed; ``str(e)`` is one line meant for the user."""


def check_fleet_name(name: str) -> str:
    """Fleet names go into IAM, key pair and security group names: 1-32 of ``a-z 0-9 -``."""
    if not isinstance(name, str) or not _FLEET.match(name):
        raise FleetError(f"fleet name {name!r}: expected 1-32 characters a-z, 0-9 and '-' "
                         "(starting and ending with a letter or digit)")
    return name


def check_role(role: str) -> str:
    if not isinstance(role, str) or not _ROLE.match(role) or role in _RESOURCE_ROLES:
        raise FleetError(f"role {role!r}: expected 1-31 characters a-z, 0-9 and '-', not one of "
                         f"{', '.join(sorted(_RESOURCE_ROLES))}")
    return role


_RESOURCE_ROLES = {ROLE_SG, ROLE_KEY, ROLE_IAM, ROLE_PROFILE, ROLE_LT, ROLE_ASG}


def resource_name(fleet: str, region: str | None = None) -> str:
    """``tritonfleet-<fleet>`` (``-<region>`` for IAM, whose names are global to the account)."""
    return f"tritonfleet-{fleet}" + (f"-{region}" if region else "")


def tags(fleet: str, role: str, **extra: str) -> list[dict[str, str]]:
    """``[{"Key": ..., "Value": ...}]`` with the fleet and role tags, a Name and ``extra`` tags."""
    values = {"Name": f"{fleet}-{role}", TAG_FLEET: fleet, TAG_ROLE: role, **extra}
    return [{"Key": k, "Value": v} for k, v in values.items()]


def tag_specs(fleet: str, role: str, resource_types: Iterable[str], **extra: str) -> list[dict]:
    """EC2 ``TagSpecifications`` for each resource type."""
    return [{"ResourceType": rtype, "Tags": tags(fleet, role, **extra)} for rtype in resource_types]


def fleet_filters(fleet: str | None, role: str | None = None) -> list[dict]:
    """EC2 ``Filters`` selecting a fleet's resources (any fleet when ``fleet`` is None)."""
    out = [{"Name": f"tag:{TAG_FLEET}", "Values": [fleet]} if fleet else {"Name": "tag-key", "Values": [TAG_FLEET]}]
    if role:
        out.append({"Name": f"tag:{TAG_ROLE}", "Values": [role]})
    return out


def as_dict(tag_list: Iterable[Mapping[str, str]] | None) -> dict[str, str]:
    """AWS ``[{"Key", "Value"}]`` tags as a dict."""
    return {t["Key"]: t["Value"] for t in tag_list or ()}


def belongs(tag_list: Iterable[Mapping[str, str]] | None, fleet: str, role: str | None = None) -> bool:
    """True when the tags name this fleet (and role)."""
    found = as_dict(tag_list)
    return found.get(TAG_FLEET) == fleet and (role is None or found.get(TAG_ROLE) == role)
