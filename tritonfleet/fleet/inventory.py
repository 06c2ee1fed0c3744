"""Host groups of an EC2 fleet from its tags, for ``inventories/ec2.py``.

Hosts are the fleet's running instances, named by instance id. Groups: the family (``inf1``, ``inf2``,
``trn1``, ``trn2``, ``gpu``), ``fleet_<fleet>`` and ``role_<role>`` (``-`` becomes ``_``). Host data:

- ``instance_type`` (so preflight needs no IMDS round trip), ``ssh_hostname`` (public IP, else private),
  ``ssh_user`` (the AMI's, recorded at launch: ``ubuntu`` or ``ec2-user``), ``_sudo``;
- ``ssh_key``: ``TRITONFLEET_SSH_KEY``, else the private key ``fleet up`` created, if present;
- ``ssh_known_hosts_file``: one per fleet, ``ssh_strict_host_key_checking`` ``accept-new`` (a host's key is
  learnt on first contact and checked afterwards);
- ``ec2_instance_id``, ``ec2_availability_zone``, ``ec2_private_ip``, ``ec2_public_ip``, ``ec2_fleet``, ``ec2_role``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from tritonfleet import catalog
from tritonfleet.fleet import keys
from tritonfleet.fleet.aws import Clients, one_line
from tritonfleet.fleet.instances import address_of, describe
from tritonfleet.fleet.tags import TAG_ROLE, TAG_SSH_USER, FleetError, as_dict, check_fleet_name

ENV_REGION, ENV_FLEET, ENV_KEY = "TRITONFLEET_REGION", "TRITONFLEET_FLEET", "TRITONFLEET_SSH_KEY"


def family_group(instance_type: str) -> str | None:
    """``inf1``/``inf2``/``trn1``/``trn2`` for Neuron types, ``gpu`` for GPU types, None when unknown."""
    try:
        itype = catalog.get(instance_type)
    except catalog.UnknownInstanceType:
        return None
    return itype.neuron_arch if itype.is_neuron else "gpu"


def _group_name(prefix: str, value: str) -> str:
    return f"{prefix}_{re.sub(r'[^A-Za-z0-9_]', '_', value)}"


def host_data(instance: Mapping, fleet: str, environ: Mapping[str, str] = os.environ) -> dict:
    tags = as_dict(instance.get("Tags"))
    data = {
        "instance_type": instance["InstanceType"],
        "ssh_hostname": address_of(instance),
        "ssh_user": tags.get(TAG_SSH_USER, "ubuntu"),
        "_sudo": True,
        "ssh_known_hosts_file": str(keys.known_hosts_path(fleet)),
        "ssh_strict_host_key_checking": "accept-new",
        "ec2_instance_id": instance["InstanceId"],
        "ec2_availability_zone": instance.get("Placement", {}).get("AvailabilityZone"),
        "ec2_private_ip": instance.get("PrivateIpAddress"),
        "ec2_public_ip": instance.get("PublicIpAddress"),
        "ec2_fleet": fleet,
        "ec2_role": tags.get(TAG_ROLE),
    }
    pem = keys.private_key_path(fleet)
    key = environ.get(ENV_KEY) or (str(pem) if pem.exists() else None)
    if key:
        data["ssh_key"] = key
    return data


def fleet_groups(clients: Clients, fleet: str, environ: Mapping[str, str] = os.environ) -> dict[str, list]:
    """``{group: [(instance id, data), ...]}`` of the fleet's running instances."""
    groups: dict[str, list] = {}
    for inst in sorted(describe(clients, fleet=fleet, states=["running"]), key=lambda i: i["InstanceId"]):
        entry = (inst["InstanceId"], host_data(inst, fleet, environ))
        names = [_group_name("fleet", fleet), _group_name("role", entry[1]["ec2_role"] or "none")]
        family = family_group(inst["InstanceType"])
        for name in ([family] if family else []) + names:
            groups.setdefault(name, []).append(entry)
    return groups


def groups_from_env(environ: Mapping[str, str] = os.environ, clients: Clients | None = None) -> dict[str, list]:
    """:func:`fleet_groups` for ``TRITONFLEET_REGION`` and ``TRITONFLEET_FLEET``; SystemExit (one line) when
    they are unset, AWS cannot be asked, or the fleet has no running instance."""
    region, fleet = environ.get(ENV_REGION), environ.get(ENV_FLEET)
    if not region or not fleet:
        missing = " and ".join(n for n, v in ((ENV_REGION, region), (ENV_FLEET, fleet)) if not v)
        raise SystemExit(f"inventories/ec2.py: set {missing} (e.g. {ENV_REGION}=us-east-1 {ENV_FLEET}=prod)")
    try:
        check_fleet_name(fleet)
        groups = fleet_groups(clients or Clients(region), fleet, environ)
    except FleetError as exc:
        raise SystemExit(f"inventories/ec2.py: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - botocore errors of any kind become one line
        raise SystemExit(f"inventories/ec2.py: cannot list fleet {fleet} in {region}: {one_line(exc)}") from None
    if not groups:
        raise SystemExit(f"inventories/ec2.py: fleet {fleet} has no running instances in {region} "
                         f"(tritonfleet fleet list --fleet {fleet} --region {region})")
    return groups
