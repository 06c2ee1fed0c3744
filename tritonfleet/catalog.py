"""Instance catalog: accelerator facts for the EC2 instance types tritonfleet provisions.

The static table covers every size of inf1, inf2, trn1, trn1n and trn2, the usual NVIDIA GPU
families (g4dn, g5, g6, g6e, p4d, p5) and a few general-purpose families without an accelerator (m5, m6i,
c6i, t3: ``accelerator == "none"``, no devices) for hosts that run no Triton, such as the HAProxy load
balancers of the ``lb`` group (``roles/lb.py``). Sources (see the research note neuron-ec2.md §2):

- Neuron sizes: the Neuron SDK architecture pages (inf1/inf2/trn1/trn2-arch.rst).
- GPU sizes: the AWS Batch "GPU jobs" table and the EC2 accelerated-computing docs.
- General-purpose sizes: the EC2 general-purpose and compute-optimized instance docs (vCPUs, memory).
- ``efa`` and the figures the notes mark unverified (g6 12/24/48xlarge, trn2.3xlarge, all of g6e)
  were checked against a ``DescribeInstanceTypes`` snapshot (the one bundled with moto 5.2).

Per-GPU memory is the nominal size (A10G/L4 24 GiB, L40S 48 GiB); EC2 reports the usable size
(22888 / 45776 MiB), which is what :func:`refresh_from_ec2` returns.

Specs change, so callers may refresh entries from the EC2 API (:func:`refresh_from_ec2`) and pass
them to :func:`get` as ``extra``; refreshed entries win over the static table.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "InstanceType",
    "UnknownInstanceType",
    "CATALOG",
    "get",
    "known",
    "from_ec2_description",
    "refresh_from_ec2",
]

GIB = 1024  # MiB per GiB

#: Neuron device name (as EC2 spells it) -> Neuron architecture label used by the toolkit.
_NEURON_ARCH_BY_DEVICE = {
    "Inferentia": "inf1",
    "Inferentia2": "inf2",
    "Trainium": "trn1",
    "Trainium2": "trn2",
}

#: Trn2 exposes 8 physical NeuronCore-v3 per device; with the default LNC=2 they appear as 4 logical cores.
_TRN2_DEFAULT_LNC = 2


@dataclass(frozen=True)
class InstanceType:
    """Accelerator facts of one EC2 instance type.

    ``device_count`` counts Neuron devices (chips, ``/dev/neuronN``) or GPUs. ``cores_per_device`` is the
    number of NeuronCores per device as the runtime numbers them (logical cores on trn2, LNC=2 default);
    it is 1 for GPUs. General-purpose types (``accelerator == "none"``) have no devices and no cores: no
    Triton server can be placed on them. Memory figures are MiB.
    """

    name: str
    family: str
    accelerator: str
    device_name: str
    device_count: int
    cores_per_device: int
    device_memory_mib: int
    vcpus: int
    memory_mib: int
    efa: bool
    logical_neuroncore_config: int | None = None

    def __post_init__(self) -> None:
        if self.accelerator not in ("neuron", "gpu", "none"):
            raise ValueError(f"{self.name}: accelerator must be 'neuron', 'gpu' or 'none', not {self.accelerator!r}")
        if self.accelerator == "none":
            if self.device_count or self.cores_per_device or self.device_memory_mib or self.device_name:
                raise ValueError(f"{self.name}: an instance type without an accelerator has no devices")
        elif self.device_count < 1 or self.cores_per_device < 1:
            raise ValueError(f"{self.name}: device_count and cores_per_device must be >= 1")
        if self.accelerator == "gpu" and self.cores_per_device != 1:
            raise ValueError(f"{self.name}: GPU instance types have cores_per_device == 1")

    @property
    def core_count(self) -> int:
        """Total NeuronCores on the instance (GPUs: the GPU count)."""
        return self.device_count * self.cores_per_device

    @property
    def is_neuron(self) -> bool:
        """True for Inferentia/Trainium instance types."""
        return self.accelerator == "neuron"

    @property
    def is_gpu(self) -> bool:
        """True for NVIDIA GPU instance types."""
        return self.accelerator == "gpu"

    @property
    def has_accelerator(self) -> bool:
        """False for general-purpose instance types (no Neuron device, no GPU): they serve no Triton."""
        return self.accelerator != "none"

    @property
    def neuron_arch(self) -> str | None:
        """``"inf1"``, ``"inf2"``, ``"trn1"`` or ``"trn2"`` (trn1n -> trn1, trn2u -> trn2); None for GPUs."""
        if self.accelerator != "neuron":
            return None
        arch = _NEURON_ARCH_BY_DEVICE.get(self.device_name)
        if arch is not None:
            return arch
        match = re.match(r"(inf|trn)\d+", self.family)
        return match.group(0) if match else None

    @property
    def runtime_in_framework(self) -> bool:
        """inf1 only: the Neuron runtime ships inside the framework (torch-neuron), the host driver stays on
        the last line that supports inf1, and no aws-neuronx-runtime-lib goes into images or onto hosts."""
        return self.neuron_arch == "inf1"

    @property
    def device_memory_bytes(self) -> int:
        """Memory of one device in bytes."""
        return self.device_memory_mib * 1024 * 1024

    def cores_of_device(self, index: int) -> range:
        """Global core ids of device ``index``: ``index * cores_per_device + local`` (neuron-ec2.md §3.4)."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"device index must be an int, not {type(index).__name__}")
        if not 0 <= index < self.device_count:
            raise ValueError(f"{self.name} has devices 0-{self.device_count - 1}, not {index}")
        start = index * self.cores_per_device
        return range(start, start + self.cores_per_device)

    def device_of_core(self, core: int) -> int:
        """Device index holding global core id ``core``."""
        if isinstance(core, bool) or not isinstance(core, int):
            raise TypeError(f"core id must be an int, not {type(core).__name__}")
        if not 0 <= core < self.core_count:
            raise ValueError(f"{self.name} has cores 0-{self.core_count - 1}, not {core}")
        return core // self.cores_per_device


class UnknownInstanceType(ValueError):
    """Raised by :func:`get` for a name that is neither in the catalog nor in ``extra``."""

    def __init__(self, name: str, suggestions: list[str], families: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        if suggestions:
            hint = "closest known: " + ", ".join(suggestions)
        else:
            hint = "known families: " + ", ".join(families)
        super().__init__(f"unknown instance type {name!r}; {hint}")


def _neuron(
    name: str,
    device_name: str,
    devices: int,
    cores: int,
    device_gib: int,
    vcpus: int,
    mem_gib: int,
    efa: bool,
    lnc: int | None = None,
) -> InstanceType:
    return InstanceType(
        name=name,
        family=name.split(".", 1)[0],
        accelerator="neuron",
        device_name=device_name,
        device_count=devices,
        cores_per_device=cores,
        device_memory_mib=device_gib * GIB,
        vcpus=vcpus,
        memory_mib=mem_gib * GIB,
        efa=efa,
        logical_neuroncore_config=lnc,
    )


def _general(name: str, vcpus: int, mem_gib: int) -> InstanceType:
    return InstanceType(
        name=name,
        family=name.split(".", 1)[0],
        accelerator="none",
        device_name="",
        device_count=0,
        cores_per_device=0,
        device_memory_mib=0,
        vcpus=vcpus,
        memory_mib=mem_gib * GIB,
        efa=False,
    )


def _gpu(
    name: str, device_name: str, gpus: int, gpu_gib: int, vcpus: int, mem_gib: int, efa: bool
) -> InstanceType:
    return InstanceType(
        name=name,
        family=name.split(".", 1)[0],
        accelerator="gpu",
        device_name=device_name,
        device_count=gpus,
        cores_per_device=1,
        device_memory_mib=gpu_gib * GIB,
        vcpus=vcpus,
        memory_mib=mem_gib * GIB,
        efa=efa,
    )


_TABLE: tuple[InstanceType, ...] = (
    # name, device, devices, cores/device, GiB/device, vCPU, host GiB, EFA
    _neuron("inf1.xlarge", "Inferentia", 1, 4, 8, 4, 8, False),
    _neuron("inf1.2xlarge", "Inferentia", 1, 4, 8, 8, 16, False),
    _neuron("inf1.6xlarge", "Inferentia", 4, 4, 8, 24, 48, False),
    _neuron("inf1.24xlarge", "Inferentia", 16, 4, 8, 96, 192, True),
    _neuron("inf2.xlarge", "Inferentia2", 1, 2, 32, 4, 16, False),
    _neuron("inf2.8xlarge", "Inferentia2", 1, 2, 32, 32, 128, False),
    _neuron("inf2.24xlarge", "Inferentia2", 6, 2, 32, 96, 384, False),
    _neuron("inf2.48xlarge", "Inferentia2", 12, 2, 32, 192, 768, False),
    _neuron("trn1.2xlarge", "Trainium", 1, 2, 32, 8, 32, False),
    _neuron("trn1.32xlarge", "Trainium", 16, 2, 32, 128, 512, True),
    _neuron("trn1n.32xlarge", "Trainium", 16, 2, 32, 128, 512, True),
    _neuron("trn2.3xlarge", "Trainium2", 1, 4, 96, 12, 128, True, lnc=_TRN2_DEFAULT_LNC),
    _neuron("trn2.48xlarge", "Trainium2", 16, 4, 96, 192, 2048, True, lnc=_TRN2_DEFAULT_LNC),
    _neuron("trn2u.48xlarge", "Trainium2", 16, 4, 96, 192, 2048, True, lnc=_TRN2_DEFAULT_LNC),
    # name, GPU, GPUs, GiB/GPU, vCPU, host GiB, EFA
    _gpu("g4dn.xlarge", "T4", 1, 16, 4, 16, False),
    _gpu("g4dn.2xlarge", "T4", 1, 16, 8, 32, False),
    _gpu("g4dn.4xlarge", "T4", 1, 16, 16, 64, False),
    _gpu("g4dn.8xlarge", "T4", 1, 16, 32, 128, True),
    _gpu("g4dn.12xlarge", "T4", 4, 16, 48, 192, True),
    _gpu("g4dn.16xlarge", "T4", 1, 16, 64, 256, True),
    _gpu("g5.xlarge", "A10G", 1, 24, 4, 16, False),
    _gpu("g5.2xlarge", "A10G", 1, 24, 8, 32, False),
    _gpu("g5.4xlarge", "A10G", 1, 24, 16, 64, False),
    _gpu("g5.8xlarge", "A10G", 1, 24, 32, 128, True),
    _gpu("g5.12xlarge", "A10G", 4, 24, 48, 192, True),
    _gpu("g5.16xlarge", "A10G", 1, 24, 64, 256, True),
    _gpu("g5.24xlarge", "A10G", 4, 24, 96, 384, True),
    _gpu("g5.48xlarge", "A10G", 8, 24, 192, 768, True),
    _gpu("g6.xlarge", "L4", 1, 24, 4, 16, False),
    _gpu("g6.2xlarge", "L4", 1, 24, 8, 32, False),
    _gpu("g6.4xlarge", "L4", 1, 24, 16, 64, False),
    _gpu("g6.8xlarge", "L4", 1, 24, 32, 128, True),
    _gpu("g6.12xlarge", "L4", 4, 24, 48, 192, True),
    _gpu("g6.16xlarge", "L4", 1, 24, 64, 256, True),
    _gpu("g6.24xlarge", "L4", 4, 24, 96, 384, True),
    _gpu("g6.48xlarge", "L4", 8, 24, 192, 768, True),
    _gpu("g6e.xlarge", "L40S", 1, 48, 4, 32, False),
    _gpu("g6e.2xlarge", "L40S", 1, 48, 8, 64, False),
    _gpu("g6e.4xlarge", "L40S", 1, 48, 16, 128, False),
    _gpu("g6e.8xlarge", "L40S", 1, 48, 32, 256, True),
    _gpu("g6e.12xlarge", "L40S", 4, 48, 48, 384, True),
    _gpu("g6e.16xlarge", "L40S", 1, 48, 64, 512, True),
    _gpu("g6e.24xlarge", "L40S", 4, 48, 96, 768, True),
    _gpu("g6e.48xlarge", "L40S", 8, 48, 192, 1536, True),
    _gpu("p4d.24xlarge", "A100", 8, 40, 96, 1152, True),
    _gpu("p5.48xlarge", "H100", 8, 80, 192, 2048, True),
    # general purpose, no accelerator (load balancers and other hosts that run no Triton): name, vCPU, host GiB
    _general("m5.large", 2, 8),
    _general("m5.xlarge", 4, 16),
    _general("m5.2xlarge", 8, 32),
    _general("m5.4xlarge", 16, 64),
    _general("m6i.large", 2, 8),
    _general("m6i.xlarge", 4, 16),
    _general("m6i.2xlarge", 8, 32),
    _general("m6i.4xlarge", 16, 64),
    _general("c6i.large", 2, 4),
    _general("c6i.xlarge", 4, 8),
    _general("c6i.2xlarge", 8, 16),
    _general("c6i.4xlarge", 16, 32),
    _general("t3.medium", 2, 4),
    _general("t3.large", 2, 8),
    _general("t3.xlarge", 4, 16),
    _general("t3.2xlarge", 8, 32),
)

#: The static catalog, keyed by instance type name.
CATALOG: Mapping[str, InstanceType] = {itype.name: itype for itype in _TABLE}


def known(extra: Mapping[str, InstanceType] | None = None) -> list[str]:
    """Sorted names of every known instance type (static catalog plus ``extra``)."""
    names = set(CATALOG)
    if extra:
        names.update(extra)
    return sorted(names, key=_sort_key)


def _sort_key(name: str) -> tuple[str, int, str]:
    family, _, size = name.partition(".")
    match = re.match(r"(\d*)(.*)", size)
    assert match is not None  # the pattern matches every string
    digits, rest = match.groups()
    return family, int(digits) if digits else (1 if rest == "xlarge" else 0), rest


def get(name: str, extra: Mapping[str, InstanceType] | None = None) -> InstanceType:
    """Look up an instance type by name (case-insensitive); ``extra`` (refreshed entries) is consulted first.

    Raises :class:`UnknownInstanceType` naming the closest known names.
    """
    if not isinstance(name, str):
        raise TypeError(f"instance type name must be a string, not {type(name).__name__}")
    key = name.strip().lower()
    if extra and key in extra:
        return extra[key]
    if key in CATALOG:
        return CATALOG[key]
    names = known(extra)
    suggestions = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    families = sorted({n.split(".", 1)[0] for n in names})
    raise UnknownInstanceType(name, suggestions, families)


def _require(item: Mapping[str, Any], *path: str, owner: str | None = None) -> Any:
    value: Any = item
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            name = owner or (item.get("InstanceType", "?") if isinstance(item, Mapping) else "?")
            raise ValueError(f"DescribeInstanceTypes entry {name}: missing {'.'.join(path)}")
        value = value[key]
    return value


def _device_count(entry: Mapping[str, Any], owner: str) -> int:
    """Whole devices of one ``NeuronDevices[]``/``Gpus[]`` entry.

    Fractional GPU sizes (g6f: ``Count`` 0, ``GpuPartitionSize`` < 1) report ``LogicalGpuCount`` instead;
    the partition shows up as one GPU in the instance, so that count is used.
    """
    count = int(_require(entry, "Count", owner=owner))
    if count == 0:
        count = int(entry.get("LogicalGpuCount", 0))
    return count


def _single_kind(entries: list[Mapping[str, Any]], what: str, owner: str) -> tuple[str, int]:
    names = {str(_require(e, "Name", owner=owner)) for e in entries}
    if len(names) != 1:
        raise ValueError(f"{owner}: mixed {what} kinds {sorted(names)} are not supported")
    count = sum(_device_count(e, owner) for e in entries)
    if count < 1:
        raise ValueError(f"{owner}: DescribeInstanceTypes reports no whole {what}s")
    return names.pop(), count


def from_ec2_description(item: Mapping[str, Any]) -> InstanceType:
    """Convert one ``DescribeInstanceTypes`` ``InstanceTypes[]`` entry into an :class:`InstanceType`.

    Trainium2 reports its 8 physical NeuronCore-v3 per device; they are converted to the 4 logical
    cores the runtime exposes with the default LNC=2. Raises ``ValueError`` for an entry with neither
    ``NeuronInfo`` nor ``GpuInfo`` devices.
    """
    name = str(_require(item, "InstanceType"))
    family = name.split(".", 1)[0]
    vcpus = int(_require(item, "VCpuInfo", "DefaultVCpus"))
    memory_mib = int(_require(item, "MemoryInfo", "SizeInMiB"))
    efa = bool(item.get("NetworkInfo", {}).get("EfaSupported", False))

    neuron_devices = (item.get("NeuronInfo") or {}).get("NeuronDevices") or []
    gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
    if neuron_devices:
        device_name, count = _single_kind(neuron_devices, "Neuron device", name)
        first = neuron_devices[0]
        cores = int(_require(first, "CoreInfo", "Count", owner=name))
        core_version = first.get("CoreInfo", {}).get("Version")
        lnc: int | None = None
        if device_name == "Trainium2" or core_version == 3:
            lnc = _TRN2_DEFAULT_LNC
            cores = max(1, cores // lnc)
        return InstanceType(
            name=name,
            family=family,
            accelerator="neuron",
            device_name=device_name,
            device_count=count,
            cores_per_device=cores,
            device_memory_mib=int(_require(first, "MemoryInfo", "SizeInMiB", owner=name)),
            vcpus=vcpus,
            memory_mib=memory_mib,
            efa=efa,
            logical_neuroncore_config=lnc,
        )
    if gpus:
        device_name, count = _single_kind(gpus, "GPU", name)
        return InstanceType(
            name=name,
            family=family,
            accelerator="gpu",
            device_name=device_name,
            device_count=count,
            cores_per_device=1,
            device_memory_mib=int(_require(gpus[0], "MemoryInfo", "SizeInMiB", owner=name)),
            vcpus=vcpus,
            memory_mib=memory_mib,
            efa=efa,
        )
    raise ValueError(f"{name} has no Neuron devices or GPUs in its DescribeInstanceTypes entry")


def _chunks(names: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(names), size):
        yield names[start : start + size]


def refresh_from_ec2(ec2_client: Any, names: list[str] | None = None) -> dict[str, InstanceType]:
    """Describe instance types through ``ec2_client`` (a boto3 EC2 client) and convert the accelerated ones.

    ``names`` limits the call to those types (asked in batches of 100, the API maximum); ``None`` describes
    every type in the region. Types without Neuron devices or GPUs are skipped, so :func:`get` falls back
    to the static table for them. API errors (e.g. an invalid name) propagate as botocore ``ClientError``.
    """
    paginator = ec2_client.get_paginator("describe_instance_types")
    requests: list[dict[str, Any]]
    if names is None:
        requests = [{}]
    else:
        wanted = sorted({n.strip().lower() for n in names})
        requests = [{"InstanceTypes": batch} for batch in _chunks(wanted, 100)]
    result: dict[str, InstanceType] = {}
    for kwargs in requests:
        for page in paginator.paginate(**kwargs):
            for item in page.get("InstanceTypes", []):
                if not (
                    (item.get("NeuronInfo") or {}).get("NeuronDevices")
                    or (item.get("GpuInfo") or {}).get("Gpus")
                ):
                    continue
                itype = from_ec2_description(item)
                result[itype.name] = itype
    return result
