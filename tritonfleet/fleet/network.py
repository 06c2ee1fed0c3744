"""Networking of a fleet: its VPC and subnets, and one security group.

The security group admits SSH (22/tcp) only from the caller's CIDR (``--ssh-cidr``; there is no
reliable way to detect it offline, so it is required) and Triton's ports only from a given source
security group (a load balancer's or the clients'): 8000-8002 for the first server and +10 per further
server (``tritonfleet.placement``), for as many servers as the instance type can hold (one per device).
Without a source group no Triton port is open. ``up`` reconciles the rules: missing ones are added,
others removed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from tritonfleet.fleet.aws import Clients, error_code, one_line, poll
from tritonfleet.fleet.tags import ROLE_SG, FleetError, belongs, fleet_filters, resource_name, tag_specs

TRITON_BASE_PORTS = (8000, 8002)
TRITON_PORT_STRIDE = 10


@dataclass(frozen=True)
class Network:
    """Where instances go: the VPC and the subnets to try in order (empty: EC2's default subnet)."""

    vpc_id: str
    subnets: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()


def resolve_network(clients: Clients, subnets: tuple[str, ...] = ()) -> Network:
    """The subnets' VPC (all must be in one), else the region's default VPC."""
    ec2 = clients.ec2
    if subnets:
        try:
            found = {s["SubnetId"]: s for s in ec2.describe_subnets(SubnetIds=list(subnets))["Subnets"]}
        except ClientError as exc:
            raise FleetError(f"--subnet: {one_line(exc)}") from None
        vpcs = {s["VpcId"] for s in found.values()}
        if len(vpcs) != 1:
            raise FleetError(f"--subnet: subnets are in {len(vpcs)} VPCs ({', '.join(sorted(vpcs))}); use one VPC")
        return Network(vpcs.pop(), tuple(subnets), tuple(found[s]["AvailabilityZone"] for s in subnets))
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise FleetError(f"{clients.region} has no default VPC: pass --subnet (one or more, in one VPC)")
    return Network(vpcs[0]["VpcId"])


#: The widest SSH source accepted without ``--allow-wide-ssh``: an IPv4 /16 (65536 addresses), an IPv6 /48 (a site).
WIDEST_SSH = {4: 16, 6: 48}


def check_cidr(cidr: str, allow_wide: bool = False) -> str:
    """A CIDR SSH is opened to: the whole internet is refused, and anything wider than WIDEST_SSH unless
    ``allow_wide`` (``--allow-wide-ssh``)."""
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise FleetError(f"--ssh-cidr {cidr!r}: expected a CIDR such as 203.0.113.7/32") from None
    if net.prefixlen == 0:
        raise FleetError(f"--ssh-cidr {cidr}: refusing to open SSH to the whole internet; give your own address/32")
    widest = WIDEST_SSH[net.version]
    if net.prefixlen < widest and not allow_wide:
        raise FleetError(f"--ssh-cidr {cidr}: {net.num_addresses:.3g} addresses, wider than a /{widest}; give your "
                         "own address/32 (or your network), or pass --allow-wide-ssh")
    return str(net)


def triton_port_ranges(servers: int) -> list[tuple[int, int]]:
    """``[(8000, 8002), (8010, 8012), ...]`` for ``servers`` Triton servers per host."""
    low, high = TRITON_BASE_PORTS
    return [(low + i * TRITON_PORT_STRIDE, high + i * TRITON_PORT_STRIDE) for i in range(max(0, servers))]


Rule = tuple[str, int, int, str, str]  # protocol, from, to, kind (cidr4|cidr6|sg), source


#: The exporters' ports as the monitoring role sets them by default (monitoring_node_exporter_port,
#: monitoring_neuron_exporter_port, monitoring_dcgm_port; tests/unit/test_mut_network.py checks they agree).
NODE_EXPORTER_PORT, NEURON_EXPORTER_PORT, DCGM_EXPORTER_PORT = 9100, 9010, 9400


def metrics_ports(servers: int, neuron: bool, gpu: bool) -> list[int]:
    """What Prometheus scrapes on a host: each Triton server's metrics port, the node exporter, and the
    Neuron or DCGM exporter."""
    ports = [hi for _lo, hi in triton_port_ranges(servers)] + [NODE_EXPORTER_PORT]
    return ports + ([NEURON_EXPORTER_PORT] if neuron else []) + ([DCGM_EXPORTER_PORT] if gpu else [])


def source_kind(source: str, what: str = "--metrics-source", allow_wide: bool = False) -> tuple[str, str]:
    """``(kind, source)`` of a rule's source: a security group (sg-...), a managed prefix list (pl-...) or a
    CIDR (normalised; the whole internet refused, and wider than a /16 or /48 unless ``allow_wide``)."""
    if re.fullmatch(r"sg-[0-9a-f]{8,17}", source):
        return "sg", source
    if re.fullmatch(r"pl-[0-9a-f]{8,17}", source):
        return "pl", source
    try:
        cidr = check_cidr(source, allow_wide)
    except FleetError as exc:
        raise FleetError(str(exc).replace("--ssh-cidr", what).replace("--allow-wide-ssh", "--allow-wide-ssh (any "
                         "source)") + "; or a security group sg-... or a prefix list pl-...") from None
    return ("cidr6" if ":" in cidr else "cidr4"), cidr


def desired_rules(ssh_cidr: str, source_sg: str | None, servers: int, metrics_sources: tuple[str, ...] = (),
                  metric_ports: tuple[int, ...] | list[int] = ()) -> set[Rule]:
    kind = "cidr6" if ":" in ssh_cidr else "cidr4"
    rules: set[Rule] = {("tcp", 22, 22, kind, ssh_cidr)}
    if source_sg:
        rules |= {("tcp", lo, hi, "sg", source_sg) for lo, hi in triton_port_ranges(servers)}
    for source in metrics_sources:
        kind, value = source_kind(source, allow_wide=True)
        rules |= {("tcp", port, port, kind, value) for port in metric_ports}
    return rules


def _current_rules(group: dict) -> dict[Rule, dict]:
    """The group's ingress rules, each with the permission that names exactly it (for revoking)."""
    out: dict[Rule, dict] = {}
    for perm in group.get("IpPermissions", []):
        key = (perm.get("IpProtocol", "-1"), perm.get("FromPort", -1), perm.get("ToPort", -1))
        for field, kind, source in (("IpRanges", "cidr4", "CidrIp"), ("Ipv6Ranges", "cidr6", "CidrIpv6"),
                                    ("UserIdGroupPairs", "sg", "GroupId"), ("PrefixListIds", "pl", "PrefixListId")):
            for item in perm.get(field, []):
                single = {k: v for k, v in perm.items() if k in ("IpProtocol", "FromPort", "ToPort")}
                out[(*key, kind, item[source])] = {**single, field: [item]}
    return out


def _permission(rule: Rule, description: str | None = None) -> dict:
    proto, lo, hi, kind, source = rule
    entry = {"cidr4": ("IpRanges", "CidrIp"), "cidr6": ("Ipv6Ranges", "CidrIpv6"),
             "sg": ("UserIdGroupPairs", "GroupId"), "pl": ("PrefixListIds", "PrefixListId")}[kind]
    item = {entry[1]: source, **({"Description": description} if description else {})}
    return {"IpProtocol": proto, "FromPort": lo, "ToPort": hi, entry[0]: [item]}


def find_group(clients: Clients, fleet: str, vpc_id: str | None = None) -> dict | None:
    filters = fleet_filters(fleet, ROLE_SG) + ([{"Name": "vpc-id", "Values": [vpc_id]}] if vpc_id else [])
    groups = clients.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
    return groups[0] if groups else None


def ensure_security_group(clients: Clients, fleet: str, network: Network, ssh_cidr: str,
                          source_sg: str | None, servers: int, metrics_sources: tuple[str, ...] = (),
                          metric_ports: tuple[int, ...] | list[int] = ()) -> str:
    """Create or reconcile the fleet's security group (every ingress rule: SSH, Triton, the exporters;
    rules it does not want are revoked, prefix-list ones included); returns its id."""
    ec2 = clients.ec2
    if source_sg and not source_sg.startswith("sg-"):
        raise FleetError(f"--triton-source-sg {source_sg!r}: expected a security group id sg-...")
    group = find_group(clients, fleet, network.vpc_id)
    if group is None:
        name = resource_name(fleet)
        try:
            group_id = ec2.create_security_group(
                GroupName=name, VpcId=network.vpc_id,
                Description=f"tritonfleet fleet {fleet}: SSH from one CIDR, Triton from one security group",
                TagSpecifications=tag_specs(fleet, ROLE_SG, ["security-group"]))["GroupId"]
        except ClientError as exc:
            if error_code(exc) == "InvalidGroup.Duplicate":
                raise FleetError(f"security group {name} exists in {network.vpc_id} but is not tagged for fleet "
                                 f"{fleet}; remove or rename it") from None
            raise FleetError(f"cannot create security group {name}: {one_line(exc)}") from None
        group = {"GroupId": group_id, "IpPermissions": []}
    group_id = group["GroupId"]
    want = desired_rules(ssh_cidr, source_sg, servers, metrics_sources, metric_ports)
    have = _current_rules(group)
    extra, missing = sorted(set(have) - want), sorted(want - set(have))
    try:
        if extra:
            ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=[have[r] for r in extra])
        if missing:
            ec2.authorize_security_group_ingress(
                GroupId=group_id, IpPermissions=[_permission(r, _describe(r)) for r in missing])
    except ClientError as exc:
        raise FleetError(f"security group {group_id}: {one_line(exc)}") from None
    return group_id


def _describe(rule: Rule) -> str:
    if rule[1] == 22:
        return "SSH (tritonfleet)"
    return f"Triton {rule[1]}-{rule[2]} (tritonfleet)" if rule[1] != rule[2] else f"metrics {rule[1]} (tritonfleet)"


def delete_security_groups(clients: Clients, fleet: str, *, timeout: float = 300, interval: float = 10,
                           sleep: Callable[[float], None] | None = None) -> list[str]:
    """Delete the fleet's security groups (retrying while terminated instances still hold them)."""
    deleted = []
    groups = clients.ec2.describe_security_groups(Filters=fleet_filters(fleet, ROLE_SG))["SecurityGroups"]
    for group in groups:
        if not belongs(group.get("Tags"), fleet, ROLE_SG):
            continue
        group_id = group["GroupId"]

        def attempt(group_id: str = group_id) -> bool | None:
            try:
                clients.ec2.delete_security_group(GroupId=group_id)
                return True
            except ClientError as exc:
                if error_code(exc) == "InvalidGroup.NotFound":
                    return True
                if error_code(exc) != "DependencyViolation":
                    raise FleetError(f"cannot delete security group {group_id}: {one_line(exc)}") from None
                return None

        extra: dict[str, Any] = {"sleep": sleep} if sleep else {}
        poll(attempt, timeout=timeout, interval=interval, what=f"security group {group_id} to be released", **extra)
        deleted.append(group_id)
    return deleted
