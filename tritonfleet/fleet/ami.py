"""AMI resolution: Neuron and GPU Deep Learning base AMIs from their public SSM parameters.

- Neuron (inf2, trn1, trn1n, trn2): ``/aws/service/neuron/dlami/base/<os>/latest/image_id``, the
  Deep Learning Base Neuron AMI (driver, EFA, tools; Docker hosts need no more).
- GPU: ``/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-<os>/latest/ami-id`` (driver,
  CUDA, nvidia-container-toolkit, Docker).
- inf1: no DLAMI supports it since Neuron SDK 2.26.1; an explicit AMI is required.

An explicit ``ami`` always wins: an ``ami-...`` id, or an SSM parameter path (``/...`` or
``resolve:ssm:/...``). Sources: research note neuron-ec2.md §5 and §6.1.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from tritonfleet import catalog
from tritonfleet.fleet.aws import Clients, error_code, one_line
from tritonfleet.fleet.tags import FleetError

NEURON_PARAMETER = "/aws/service/neuron/dlami/base/{os}/latest/image_id"
GPU_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-{os}/latest/ami-id"

#: OS -> (SSH user, has a Neuron base DLAMI, has a GPU base DLAMI).
OSES = {
    "ubuntu-24.04": ("ubuntu", True, True),
    "ubuntu-22.04": ("ubuntu", False, True),  # Neuron publishes no Ubuntu 22.04 DLAMIs since SDK 2.30
    "amazon-linux-2023": ("ec2-user", True, True),
}
DEFAULT_OS = "ubuntu-24.04"


@dataclass(frozen=True)
class Image:
    """A resolved AMI: id, where it came from, root device, and the SSH user of its OS."""

    image_id: str
    source: str
    root_device: str
    ssh_user: str
    name: str = ""


def parameter_for(itype: catalog.InstanceType, os_name: str) -> str:
    """The SSM parameter of the base DLAMI for this instance type and OS (FleetError when there is none)."""
    if os_name not in OSES:
        raise FleetError(f"--os {os_name!r}: expected one of {', '.join(OSES)}")
    _user, neuron_ok, gpu_ok = OSES[os_name]
    if itype.runtime_in_framework:
        raise FleetError(f"{itype.name}: Neuron DLAMIs dropped inf1 after SDK 2.26; pass --ami with a pinned "
                         "AMI (a DLAMI of SDK <= 2.26, or your own image with aws-neuronx-dkms 2.24.*)")
    if itype.is_neuron:
        if not neuron_ok:
            raise FleetError(f"no Deep Learning Base Neuron AMI for {os_name}; use --os ubuntu-24.04 or "
                             "amazon-linux-2023, or pass --ami")
        return NEURON_PARAMETER.format(os=os_name)
    if not gpu_ok:
        raise FleetError(f"no GPU base DLAMI for {os_name}; pass --ami")
    return GPU_PARAMETER.format(os=os_name)


def _from_parameter(clients: Clients, name: str) -> str:
    try:
        return clients.ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as exc:
        if error_code(exc) == "ParameterNotFound":
            raise FleetError(f"SSM parameter {name} does not exist in {clients.region}; pass --ami") from None
        raise FleetError(f"cannot read SSM parameter {name}: {one_line(exc)}") from None


def ssh_user_for(image_name: str, os_name: str) -> str:
    """The SSH user of an image: from its name when it says (Amazon Linux, Ubuntu), else the OS's."""
    lowered = image_name.lower()
    if "amazon linux" in lowered or "al2023" in lowered or "amzn" in lowered:
        return "ec2-user"
    if "ubuntu" in lowered:
        return "ubuntu"
    return OSES.get(os_name, ("ubuntu",))[0]


def resolve(clients: Clients, itype: catalog.InstanceType, os_name: str = DEFAULT_OS,
            ami: str | None = None, ssh_user: str | None = None) -> Image:
    """Resolve the AMI to launch and check it exists in the region (its root device name sizes the root
    volume; its architecture must be x86_64, like every type in the catalog)."""
    if ami:
        parameter = ami.removeprefix("resolve:ssm:")
        if parameter.startswith("/"):
            image_id, source = _from_parameter(clients, parameter), f"ssm:{parameter}"
        elif ami.startswith("ami-"):
            image_id, source = ami, "--ami"
        else:
            raise FleetError(f"--ami {ami!r}: expected ami-... or an SSM parameter path /...")
    else:
        parameter = parameter_for(itype, os_name)
        image_id, source = _from_parameter(clients, parameter), f"ssm:{parameter}"
    try:
        images = clients.ec2.describe_images(ImageIds=[image_id])["Images"]
    except ClientError as exc:
        raise FleetError(f"AMI {image_id} ({source}): {one_line(exc)}") from None
    if not images:
        raise FleetError(f"AMI {image_id} ({source}) is not available in {clients.region}")
    image = images[0]
    arch = image.get("Architecture", "x86_64")
    if arch != "x86_64":
        raise FleetError(f"AMI {image_id} is {arch}; {itype.name} needs an x86_64 image")
    name = image.get("Name") or ""
    return Image(image_id=image_id, source=source, root_device=image.get("RootDeviceName") or "/dev/sda1",
                 ssh_user=ssh_user or ssh_user_for(name, os_name), name=name)
