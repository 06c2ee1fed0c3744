"""Which device serves which model: first-fit-decreasing bin packing of model replicas onto accelerator devices.
Pure logic.

Input: :class:`Demand` per model (footprint in MiB per replica, replica count, optionally the Neuron
architecture it was compiled for or ``gpu_only``) and the fleet's :class:`Bin` per device (host, device index,
architecture, usable MiB). A replica is placed whole on one device (a model replica does not span devices),
and a device holds at most one replica of a model (each used device becomes one Triton server, which loads a
model once). Replicas go in decreasing size (ties: model name, then replica number) onto the first bin, in the
fleet's order, that is compatible, has room and does not hold the model yet: deterministic for a given input.

Output: a :class:`Packing`: each bin's replicas and utilisation, and the replicas left unplaced with the reason
(no compatible device / too big for any compatible device / out of room). :func:`proposed_servers` turns it
into ``triton_servers`` host data (one server per used device, with its ``devices``/``gpus`` and ``models``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonfleet.catalog import InstanceType
from tritonfleet.footprint import DEFAULT_HEADROOM_PCT, with_headroom

__all__ = [
    "RUNS_ON",
    "GPU",
    "Demand",
    "Bin",
    "Replica",
    "BinUse",
    "Unplaced",
    "Packing",
    "compatible",
    "host_bins",
    "pack",
    "proposed_servers",
]

#: The architecture of a GPU bin (Neuron bins carry ``InstanceType.neuron_arch``).
GPU = "gpu"

#: Where an artifact compiled for a Neuron architecture runs. inf2 and trn1 share the NeuronCore-v2 (neuronx-cc
#: compiles for both; a NEFF built on one loads on the other); inf1 (NeuronCore-v1, neuron-cc) runs only on inf1
#: and trn2 (NeuronCore-v3) only on trn2.
RUNS_ON: Mapping[str, frozenset[str]] = {
    "inf1": frozenset({"inf1"}),
    "inf2": frozenset({"inf2", "trn1"}),
    "trn1": frozenset({"inf2", "trn1"}),
    "trn2": frozenset({"trn2"}),
}


@dataclass(frozen=True)
class Demand:
    """A model to place: ``replicas`` replicas of ``mib`` MiB each (what one server needs for it: its footprint
    per instance times its instances). ``neuron_arch``: compiled for that Neuron architecture (see
    :data:`RUNS_ON`); ``gpu_only``: GPU devices only; neither: any device."""

    name: str
    mib: int
    replicas: int = 1
    neuron_arch: str | None = None
    gpu_only: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a model needs a name")
        if isinstance(self.mib, bool) or not isinstance(self.mib, int) or self.mib < 0:
            raise ValueError(f"{self.name}: footprint {self.mib!r}: expected whole MiB >= 0")
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"{self.name}: replicas {self.replicas!r}: expected a whole number >= 1")
        if self.neuron_arch is not None and self.neuron_arch not in RUNS_ON:
            raise ValueError(f"{self.name}: neuron_arch {self.neuron_arch!r}: expected one of "
                             f"{', '.join(RUNS_ON)}")
        if self.neuron_arch is not None and self.gpu_only:
            raise ValueError(f"{self.name}: neuron_arch and gpu_only exclude each other")


@dataclass(frozen=True)
class Bin:
    """One device of the fleet a replica can be placed on whole: ``host``, its ``devices`` (one index; a group
    of several when a replica may span them), ``arch`` (``inf1``/``inf2``/``trn1``/``trn2`` or :data:`GPU`) and
    its usable ``capacity_mib`` (headroom already taken off)."""

    host: str
    devices: tuple[int, ...]
    arch: str
    capacity_mib: int

    @property
    def is_gpu(self) -> bool:
        return self.arch == GPU

    @property
    def label(self) -> str:
        kind = "gpu" if self.is_gpu else "device"
        return f"{self.host} {kind} {','.join(str(d) for d in self.devices)}"


@dataclass(frozen=True)
class Replica:
    """Replica ``index`` (0-based) of ``model``, ``mib`` MiB."""

    model: str
    index: int
    mib: int


@dataclass(frozen=True)
class BinUse:
    """A bin and the replicas placed on it."""

    bin: Bin
    replicas: tuple[Replica, ...] = ()

    @property
    def used_mib(self) -> int:
        return sum(r.mib for r in self.replicas)

    @property
    def free_mib(self) -> int:
        return self.bin.capacity_mib - self.used_mib

    @property
    def utilisation(self) -> float:
        """Used share of the usable capacity, 0.0 to 1.0 (0.0 for a bin of no capacity)."""
        return self.used_mib / self.bin.capacity_mib if self.bin.capacity_mib else 0.0

    @property
    def models(self) -> list[str]:
        return sorted(r.model for r in self.replicas)


@dataclass(frozen=True)
class Unplaced:
    """A replica no bin took, and why."""

    model: str
    index: int
    mib: int
    reason: str


@dataclass(frozen=True)
class Packing:
    """Every bin of the fleet (in its order) with its replicas, and the replicas left over."""

    bins: tuple[BinUse, ...]
    unplaced: tuple[Unplaced, ...] = ()

    @property
    def used(self) -> list[BinUse]:
        """The bins that hold a replica."""
        return [b for b in self.bins if b.replicas]

    def by_host(self) -> dict[str, list[BinUse]]:
        """``{host: [its bins]}`` in fleet order."""
        out: dict[str, list[BinUse]] = {}
        for b in self.bins:
            out.setdefault(b.bin.host, []).append(b)
        return out


def compatible(demand: Demand, b: Bin) -> bool:
    """May a replica of ``demand`` go on ``b`` (architecture only, not room)?"""
    if demand.gpu_only:
        return b.is_gpu
    if demand.neuron_arch is not None:
        return b.arch in RUNS_ON[demand.neuron_arch]
    return True


def host_bins(host: str, instance_type: InstanceType, headroom_pct: float = DEFAULT_HEADROOM_PCT) -> list[Bin]:
    """One bin per device (GPU) of ``instance_type``: its memory less ``headroom_pct``; none without an
    accelerator."""
    if not instance_type.has_accelerator:
        return []
    arch = instance_type.neuron_arch if instance_type.is_neuron else GPU
    if arch is None:
        raise ValueError(f"{instance_type.name}: unknown Neuron architecture")
    capacity = with_headroom(instance_type.device_memory_mib, headroom_pct)
    return [Bin(host, (d,), arch, capacity) for d in range(instance_type.device_count)]


def _demand_text(d: Demand) -> str:
    if d.gpu_only:
        return "gpu_only"
    if d.neuron_arch is not None:
        return f"compiled for {d.neuron_arch}, runs on {'/'.join(sorted(RUNS_ON[d.neuron_arch]))}"
    return "any device"


def pack(demands: Sequence[Demand], bins: Sequence[Bin]) -> Packing:
    """First-fit-decreasing placement of every replica of ``demands`` onto ``bins`` (see the module docstring).
    Raises ``ValueError`` for two demands of one name or two bins of one host and device."""
    names = [d.name for d in demands]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"model(s) {', '.join(dupes)} listed more than once")
    keys = [(b.host, b.devices) for b in bins]
    if len(set(keys)) != len(keys):
        raise ValueError("a device is listed twice in the fleet")
    by_name = {d.name: d for d in demands}
    replicas = sorted((Replica(d.name, i, d.mib) for d in demands for i in range(d.replicas)),
                      key=lambda r: (-r.mib, r.model, r.index))
    placed: list[list[Replica]] = [[] for _ in bins]
    free = [b.capacity_mib for b in bins]
    unplaced: list[Unplaced] = []
    for r in replicas:
        demand = by_name[r.model]
        fits = [i for i, b in enumerate(bins) if compatible(demand, b)]
        for i in fits:
            if r.mib <= free[i] and all(p.model != r.model for p in placed[i]):
                placed[i].append(r)
                free[i] -= r.mib
                break
        else:
            holding = sum(1 for i in fits if any(p.model == r.model for p in placed[i]))
            reason = _reason(demand, r, [bins[i] for i in fits], bins, holding)
            unplaced.append(Unplaced(r.model, r.index, r.mib, reason))
    return Packing(tuple(BinUse(b, tuple(p)) for b, p in zip(bins, placed, strict=True)), tuple(unplaced))


def _reason(demand: Demand, r: Replica, fits: Sequence[Bin], bins: Sequence[Bin], holding: int) -> str:
    if not fits:
        have = ", ".join(sorted({b.arch for b in bins})) or "no devices"
        return f"no compatible device ({_demand_text(demand)}; the fleet has {have})"
    largest = max(b.capacity_mib for b in fits)
    if r.mib > largest:
        return f"too big for any device: needs {r.mib} MiB, the largest compatible device holds {largest} MiB"
    if holding == len(fits):
        return (f"out of room: each of the {len(fits)} compatible device(s) already holds a replica of {r.model} "
                f"(a device serves a model once)")
    return f"out of room: no compatible device without a replica of {r.model} has {r.mib} MiB free"


def proposed_servers(packing: Packing) -> dict[str, list[dict[str, Any]]]:
    """``{host: triton_servers}``: one server per used bin, in device order, with its ``devices`` (Neuron) or
    ``gpus`` (GPU) and the ``models`` it loads; hosts with no used bin are left out. Ready to paste as host
    data (devices nobody uses stay unclaimed)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for host, uses in packing.by_host().items():
        servers = []
        for use in sorted((u for u in uses if u.replicas), key=lambda u: u.bin.devices):
            key = "gpus" if use.bin.is_gpu else "devices"
            servers.append({key: list(use.bin.devices), "models": use.models})
        if servers:
            out[host] = servers
    return out

