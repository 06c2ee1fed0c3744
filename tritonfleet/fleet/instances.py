"""EC2 instances of a fleet: launch (with partial-launch handling), wait until SSH answers, list, terminate.

A launch asks EC2 for the missing count in the first subnet (``MinCount=1``, so EC2 may start fewer);
after a capacity error (``InsufficientInstanceCapacity``, ``Unsupported``) it goes on in the next
subnet, after a limit error it stops. When some instances started and the rest could not, that is a
partial launch: the started ones are terminated (``on_partial="terminate"``) or kept, tagged, for a
later ``up`` to complete or ``down`` to remove (``"keep"``); either way the error says so in one line.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from botocore.exceptions import ClientError

from tritonfleet.fleet.ami import Image
from tritonfleet.fleet.aws import Clients, error_code, one_line, poll
from tritonfleet.fleet.errors import is_capacity, launch_advice
from tritonfleet.fleet.tags import (
    TAG_FLEET,
    TAG_OS,
    TAG_ROLE,
    TAG_SSH_USER,
    FleetError,
    as_dict,
    fleet_filters,
    tag_specs,
)

LIVE_STATES = ("pending", "running")
ON_PARTIAL = ("terminate", "keep")
Probe = Callable[[str, int], bool]


class PartialLaunch(FleetError):
    """Some instances started, the rest did not; ``kept`` are the ids left running (empty: terminated)."""

    def __init__(self, message: str, kept: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.kept = list(kept)


@dataclass(frozen=True)
class LaunchRequest:
    """Everything one RunInstances call needs but the count and the subnet."""

    fleet: str
    role: str
    instance_type: str
    image: Image
    os_name: str
    security_group: str
    key_name: str
    instance_profile: str
    volume_size: int = 500
    subnets: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    public_ip: bool | None = None
    # IMDSv2's hop limit: 1 keeps the instance profile away from containers (Triton's Python-backend model
    # code, DCGM); 2 only when a container must reach it (models_s3_direct: Triton reads S3 itself)
    hop_limit: int = 1

    def params(self, subnet: str | None, count: int) -> dict:
        extra = {TAG_SSH_USER: self.image.ssh_user, TAG_OS: self.os_name}
        params = {
            "ImageId": self.image.image_id, "InstanceType": self.instance_type, "MinCount": 1, "MaxCount": count,
            "KeyName": self.key_name, "IamInstanceProfile": {"Name": self.instance_profile},
            "ClientToken": uuid.uuid4().hex,
            "BlockDeviceMappings": [{"DeviceName": self.image.root_device, "Ebs": {
                "VolumeSize": self.volume_size, "VolumeType": "gp3", "DeleteOnTermination": True, "Encrypted": True}}],
            # IMDSv2 only, and (hop limit 1) from the host only, unless a container must reach the profile
            "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": self.hop_limit,
                                "HttpEndpoint": "enabled"},
            "TagSpecifications": tag_specs(self.fleet, self.role, ["instance", "volume"], **extra),
        }
        if self.public_ip is not None:
            params["NetworkInterfaces"] = [{"DeviceIndex": 0, "Groups": [self.security_group],
                                            "AssociatePublicIpAddress": self.public_ip,
                                            **({"SubnetId": subnet} if subnet else {})}]
        else:
            params["SecurityGroupIds"] = [self.security_group]
            if subnet:
                params["SubnetId"] = subnet
        return params


def _run(clients: Clients, req: LaunchRequest, subnet: str | None, count: int,
         sleep: Callable[[float], None], profile_retries: int) -> list[dict]:
    for attempt in range(profile_retries + 1):
        try:
            return clients.ec2.run_instances(**req.params(subnet, count))["Instances"]
        except ClientError as exc:
            # a new instance profile takes a few seconds to be usable by EC2
            propagating = error_code(exc) == "InvalidParameterValue" and "iamInstanceProfile" in str(exc)
            if not propagating or attempt == profile_retries:
                raise
            sleep(5)
    raise AssertionError("unreachable")


def launch(clients: Clients, req: LaunchRequest, count: int, *, on_partial: str = "terminate",
           sleep: Callable[[float], None] = time.sleep, profile_retries: int = 6) -> list[dict]:
    """Start ``count`` instances; see the module docstring for errors and partial launches."""
    if on_partial not in ON_PARTIAL:
        raise FleetError(f"--on-partial {on_partial!r}: expected keep or terminate")
    launched: list[dict] = []
    failure: tuple[ClientError, str | None] | None = None
    subnets: list[str | None] = [*req.subnets] or [None]
    for subnet in subnets:
        while len(launched) < count:
            try:
                launched += _run(clients, req, subnet, count - len(launched), sleep, profile_retries)
            except ClientError as exc:
                failure = (exc, subnet)
                break
        if len(launched) >= count or (failure and not is_capacity(failure[0])):
            break
    if len(launched) >= count or failure is None:
        return launched
    error, failed_in = failure
    where = None
    if failed_in:
        zones = dict(zip(req.subnets, req.zones, strict=False))
        where = f"{zones[failed_in]} ({failed_in})" if failed_in in zones else failed_in
    advice = launch_advice(error, req.instance_type, clients.region, where)
    if not launched:
        raise FleetError(advice)
    ids = [i["InstanceId"] for i in launched]
    head = f"partial launch: {len(ids)} of {count} {req.instance_type} started, then {advice}"
    if on_partial == "terminate":
        terminate(clients, ids, sleep=sleep)
        raise PartialLaunch(f"{head}; terminated {', '.join(ids)} (--on-partial keep keeps them)")
    raise PartialLaunch(f"{head}; kept {', '.join(ids)} in fleet {req.fleet} (run up again to add the rest, "
                        "or down to remove them)", kept=ids)


def tcp_ssh_probe(address: str, port: int = 22, timeout: float = 5.0) -> bool:
    """True when ``address:port`` accepts a TCP connection and sends an SSH banner."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            return conn.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def address_of(instance: Mapping) -> str | None:
    """Where SSH reaches an instance: its public IP, else its private IP."""
    return instance.get("PublicIpAddress") or instance.get("PrivateIpAddress")


def describe(clients: Clients, *, ids: Sequence[str] = (), fleet: str | None = None,
             states: Sequence[str] | None = None) -> list[dict]:
    """Instances by id or fleet tag (any fleet when both are empty), optionally in ``states``."""
    filters = fleet_filters(fleet) if fleet or not ids else []
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    kwargs: dict = {"Filters": filters} if filters else {}
    if ids:
        kwargs["InstanceIds"] = list(ids)
    pages = clients.ec2.get_paginator("describe_instances").paginate(**kwargs)
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def wait_ready(clients: Clients, ids: Sequence[str], *, probe: Probe | None = None, timeout: float = 900,
               interval: float = 10, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> dict[str, str]:
    """Wait until every instance is running and its SSH port answers; ``{id: address}``."""
    probe = probe or tcp_ssh_probe
    ready: dict[str, str] = {}
    last: dict[str, str] = {i: "pending" for i in ids}

    def check() -> dict[str, str] | None:
        try:
            found = describe(clients, ids=[i for i in ids if i not in ready])
        except ClientError as exc:
            if error_code(exc) == "InvalidInstanceID.NotFound":  # not visible yet (eventual consistency)
                return None
            raise FleetError(f"cannot describe {', '.join(ids)}: {one_line(exc)}") from None
        for inst in found:
            iid, state = inst["InstanceId"], inst["State"]["Name"]
            last[iid] = state
            if state not in LIVE_STATES:
                reason = inst.get("StateReason", {}).get("Message", "no reason given")
                raise FleetError(f"instance {iid} is {state} while starting ({reason})")
            address = address_of(inst)
            if state == "running" and address:
                if probe(address, 22):
                    ready[iid] = address
                else:
                    last[iid] = "running, SSH not answering"
        return dict(ready) if len(ready) == len(ids) else None

    try:
        return poll(check, timeout=timeout, interval=interval, sleep=sleep, clock=clock, what="SSH")
    except FleetError as exc:
        if "timed out" not in str(exc):
            raise
        waiting = ", ".join(f"{i} ({last[i]})" for i in ids if i not in ready)
        raise FleetError(f"not SSH-ready after {timeout:.0f} s: {waiting}; they stay in the fleet "
                         "(list shows them, down removes them)") from None


def terminate(clients: Clients, ids: Sequence[str], *, wait: bool = True, timeout: float = 600,
              interval: float = 5, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> None:
    """Terminate instances and (by default) wait until EC2 reports them terminated."""
    if not ids:
        return
    try:
        clients.ec2.terminate_instances(InstanceIds=list(ids))
    except ClientError as exc:
        raise FleetError(f"cannot terminate {', '.join(ids)}: {one_line(exc)}") from None
    if wait:
        def gone() -> bool | None:
            states = {i["State"]["Name"] for i in describe(clients, ids=ids)}
            return True if states <= {"terminated"} else None
        poll(gone, timeout=timeout, interval=interval, sleep=sleep, clock=clock, what="instances to terminate")


def rows(instances: Sequence[dict]) -> list[dict]:
    """Table rows: id, type, AZ, state, public/private IP, role, fleet."""
    out = []
    for inst in instances:
        tags = as_dict(inst.get("Tags"))
        out.append({"id": inst["InstanceId"], "type": inst["InstanceType"],
                    "az": inst.get("Placement", {}).get("AvailabilityZone", "-"), "state": inst["State"]["Name"],
                    "public_ip": inst.get("PublicIpAddress") or "-", "private_ip": inst.get("PrivateIpAddress") or "-",
                    "role": tags.get(TAG_ROLE, "-"), "fleet": tags.get(TAG_FLEET, "-")})
    return sorted(out, key=lambda r: (r["fleet"], r["role"], r["id"]))
