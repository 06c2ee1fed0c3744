"""EC2 launch errors as one line of advice: capacity (another AZ or type) and limits (which quota)."""

from __future__ import annotations

import re

from botocore.exceptions import ClientError

from tritonfleet import catalog
from tritonfleet.fleet.aws import error_code, one_line

#: On-Demand vCPU quotas (Service Quotas, service code ec2) by instance family prefix.
QUOTAS = {
    "inf": ("Running On-Demand Inf instances", "L-1945791B"),
    "trn": ("Running On-Demand Trn instances", "L-2C3B7624"),
    "g": ("Running On-Demand G and VT instances", "L-DB2E81BA"),
    "vt": ("Running On-Demand G and VT instances", "L-DB2E81BA"),
    "p": ("Running On-Demand P instances", "L-417A185B"),
    "dl": ("Running On-Demand DL instances", "L-6E869C2A"),
    "f": ("Running On-Demand F instances", "L-74FC7D96"),
    "x": ("Running On-Demand X instances", "L-7295265B"),
}
STANDARD_QUOTA = ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "L-1216C47A")

#: Errors after which another subnet (AZ) may still work.
CAPACITY_CODES = {"InsufficientInstanceCapacity", "Unsupported", "InsufficientCapacity"}
#: Account limits: no other AZ helps.
LIMIT_CODES = {"VcpuLimitExceeded", "InstanceLimitExceeded"}


def quota_for(instance_type: str) -> tuple[str, str]:
    """``(quota name, quota code)`` of the On-Demand quota an instance type counts against."""
    letters = re.match(r"[a-z]+", instance_type.lower())
    return QUOTAS.get(letters.group(0) if letters else "", STANDARD_QUOTA)


def _vcpus(instance_type: str) -> str:
    try:
        return f" ({catalog.get(instance_type).vcpus} vCPUs each)"
    except catalog.UnknownInstanceType:
        return ""


def launch_advice(exc: BaseException, instance_type: str, region: str, where: str | None = None) -> str:
    """One line saying what failed and what to do about it."""
    code = error_code(exc)
    place = where or region
    if code in ("InsufficientInstanceCapacity", "InsufficientCapacity"):
        return (f"EC2 has no {instance_type} capacity in {place} right now ({code}): try another availability "
                f"zone (--subnet in another AZ), another instance type, or again later")
    if code == "Unsupported":
        return (f"{instance_type} is not offered in {place} (Unsupported): pick a subnet in an AZ that offers it "
                f"(aws ec2 describe-instance-type-offerings --location-type availability-zone "
                f"--filters Name=instance-type,Values={instance_type} --region {region})")
    if code in LIMIT_CODES:
        name, quota = quota_for(instance_type)
        what = "vCPU quota" if code == "VcpuLimitExceeded" else "instance limit"
        return (f"{what} reached for {instance_type}{_vcpus(instance_type)} in {region} ({code}): request an "
                f"increase of the Service Quota '{name}' ({quota}) in {region}, or stop other instances that use it")
    return one_line(exc)


def is_capacity(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and error_code(exc) in CAPACITY_CODES
