"""Device/core placement of Triton servers (containers) on one host. Pure logic.

Host data ``triton_servers`` is a list of :class:`ServerSpec` (typed at the edge, by the triton role's
settings); each may set ``name``, ``devices`` (Neuron device indices), ``cores`` (global NeuronCore ids, on
the server's own devices), ``gpus`` (GPU hosts only), ``http_port``, ``grpc_port``, ``metrics_port`` and
``bind_address``, and ``models`` (the models it loads, explicit model control; omitted: the host's
``triton_models``). A spec checks what one server can get wrong on its own; :func:`place` checks it against
an :class:`~tritonfleet.catalog.InstanceType` and the other servers, and resolves defaults into
:class:`Placement` records.

Neuron rules enforced (neuron-ec2.md §3.4, §4.1): one ``--device=/dev/neuronN`` per device; a server's
devices and cores are contiguous; NeuronCores are never shared between processes/containers. This module
also keeps devices exclusive to one server (stricter than the runtime, which lets containers share a
device when their cores are disjoint). ``NEURON_RT_VISIBLE_CORES`` takes global core ids also inside a
container (``--device=/dev/neuron12 --device=/dev/neuron13 --env NEURON_RT_VISIBLE_CORES=51,52``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationInfo, field_validator

from tritonfleet.catalog import InstanceType

__all__ = ["Placement", "PlacementError", "ServerSpec", "IPAddress", "MODEL_NAME", "check_model_names", "place",
           "format_core_range"]

_PORT_KEYS = ("http_port", "grpc_port", "metrics_port")
_FIELD = "triton_servers"


def _ip(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError("expected an IPv4 or IPv6 address") from None
    return value


#: An IP address given as a string, validated once wherever a bind address is read.
IPAddress = Annotated[str, Strict(), AfterValidator(_ip)]
_Id = Annotated[int, Strict()]  # ranges are checked against the instance type by place()
_Port = Annotated[int, Strict(), Field(ge=1, le=65535)]

#: A Triton model directory name (``triton_models``, ``triton_servers[].models``).
MODEL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def check_model_names(names: Sequence[str]) -> Sequence[str]:
    """``names`` when each is a valid Triton model directory name; ValueError naming the first that is not."""
    for m in names:
        if not MODEL_NAME.match(m):
            raise ValueError(f"model name {m!r} is not a valid Triton model directory name")
    return names


class ServerSpec(BaseModel):
    """One ``triton_servers`` entry. Omitted fields take the defaults :func:`place` computes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # docker's own rule for container names: at least two characters (the sandbox e2e test named one "a")
    name: str | None = Field(None, pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$",
                             description="container name (default triton, or triton-<index>)")
    devices: list[_Id] | None = Field(None, description="Neuron device indices (contiguous)")
    cores: list[_Id] | None = Field(None, description="global NeuronCore ids on its devices")
    gpus: list[_Id] | None = Field(None, description="GPU indices (GPU hosts)")
    http_port: _Port | None = None
    grpc_port: _Port | None = None
    metrics_port: _Port | None = None
    bind_address: IPAddress | None = None
    models: list[Annotated[str, Strict()]] | None = Field(None, description=(
        "models this server loads (explicit model control); None: the host's triton_models"))

    @field_validator("models")
    @classmethod
    def _model_names(cls, names: list[str] | None) -> list[str] | None:
        return None if names is None else list(check_model_names(names))

    @field_validator("devices", "cores", "gpus")
    @classmethod
    def _unique(cls, ids: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if ids is not None:
            if not ids:
                raise ValueError(f"{info.field_name} must not be empty (omit the key for the default)")
            dupes = sorted({v for v in ids if ids.count(v) > 1})
            if dupes:
                raise ValueError(f"duplicate {info.field_name} {_fmt(dupes)}")
        return ids


@dataclass(frozen=True)
class Placement:
    """Where one Triton server runs on the host and which ports it publishes.

    ``visible_cores`` is the ``NEURON_RT_VISIBLE_CORES`` value and ``device_paths`` the ``--device`` nodes
    (Neuron hosts). ``gpus_flag`` is the ``docker run --gpus`` value, e.g. ``device=0,1`` (GPU hosts); on
    the docker CLI a multi-GPU value must be quoted as ``--gpus '"device=0,1"'`` because the CLI splits
    the flag on commas. ``models`` are the models the server loads (explicit model control): its own
    ``models``, else the host's; None: every model in the repository (``--load-model=*``).
    """

    index: int
    name: str
    devices: tuple[int, ...]
    cores: tuple[int, ...]
    visible_cores: str | None
    device_paths: tuple[str, ...]
    gpus: tuple[int, ...]
    gpus_flag: str | None
    http_port: int
    grpc_port: int
    metrics_port: int
    bind_address: str
    models: tuple[str, ...] | None = None

    def serves(self, model: str) -> bool:
        """The server loads ``model`` (every model when ``models`` is None)."""
        return self.models is None or model in self.models

    @property
    def local_address(self) -> str:
        """Where the host itself reaches this server (loopback for a wildcard bind address)."""
        return "127.0.0.1" if ipaddress.ip_address(self.bind_address).is_unspecified else self.bind_address

    @property
    def local_url(self) -> str:
        """The server's HTTP endpoint as the host itself reaches it."""
        host = f"[{self.local_address}]" if ":" in self.local_address else self.local_address
        return f"http://{host}:{self.http_port}"

    @property
    def local_grpc_url(self) -> str:
        """The server's gRPC endpoint as the host itself reaches it (the agent's live reloads use it)."""
        host = f"[{self.local_address}]" if ":" in self.local_address else self.local_address
        return f"grpc://{host}:{self.grpc_port}"

    @property
    def ports(self) -> dict[str, int]:
        """``{"http_port": …, "grpc_port": …, "metrics_port": …}``."""
        return {"http_port": self.http_port, "grpc_port": self.grpc_port, "metrics_port": self.metrics_port}


class PlacementError(ValueError):
    """Invalid ``triton_servers`` data. ``str(e)`` is ``"{field} {value}: {message}"``."""

    def __init__(self, field: str, value: Any, message: str) -> None:
        self.field = field
        self.value = value
        self.message = message
        super().__init__(f"{field} {value}: {message}")


def format_core_range(cores: Iterable[int]) -> str:
    """Compact form of a set of ids: ``[0..7]`` -> ``"0-7"``, ``[3]`` -> ``"3"``, ``[0, 1, 4]`` -> ``"0-1,4"``.

    ``NEURON_RT_VISIBLE_CORES`` accepts a single id or a range (comma lists since runtime 2.16.18).
    """
    ids = sorted(set(cores))
    if not ids:
        raise ValueError("no cores to format")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise ValueError(f"core ids must be non-negative integers, got {i!r}")
    runs: list[str] = []
    start = prev = ids[0]
    for i in ids[1:]:
        if i != prev + 1:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            start = i
        prev = i
    runs.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(runs)


def _fmt(ids: Sequence[int]) -> str:
    """``format_core_range`` that also copes with (invalid) negative ids."""
    if any(i < 0 for i in ids):
        return ",".join(str(i) for i in sorted(set(ids)))
    return format_core_range(ids)


def _contiguous(ids: Sequence[int]) -> bool:
    ordered = sorted(ids)
    return ordered == list(range(ordered[0], ordered[0] + len(ordered)))


def _have(kind: str, count: int) -> str:
    return f"{kind} 0" if count == 1 else f"{kind}s 0-{count - 1}"


def _overlaps(a: str, b: str) -> bool:
    """Two bind addresses conflict on a port if equal or if either is a wildcard address."""
    if a == b:
        return True
    return ipaddress.ip_address(a).is_unspecified or ipaddress.ip_address(b).is_unspecified


def place(
    itype: InstanceType,
    servers: Sequence[ServerSpec] | None = None,
    *,
    base_ports: tuple[int, int, int] = (8000, 8001, 8002),
    port_stride: int = 10,
    bind_address: str = "0.0.0.0",
    models: Sequence[str] | None = None,
) -> list[Placement]:
    """Check ``servers`` against ``itype`` and each other, and resolve every server's placement.

    ``None`` or ``[]`` means one server with every device/core (GPU hosts: every GPU). Servers without
    ``devices`` (``gpus`` on GPU hosts) split the devices nobody claimed evenly and contiguously, in order.
    ``cores`` defaults to all cores of the server's devices. Ports default to ``base + index * port_stride``.
    ``models``: what a server without its own ``models`` loads (None or empty: every model in the repository).
    Raises :class:`PlacementError` naming the offending field.
    """
    entries: list[ServerSpec] = list(servers or []) or [ServerSpec()]
    _check_server_count(itype, entries)
    explicit = _explicit_ids(itype, entries)
    _check_exclusive(itype, explicit)
    allocated = _split_unclaimed(itype, explicit)
    core_sets = _core_sets(itype, entries, allocated)
    _check_cores_exclusive(core_sets)
    return _placements(itype, entries, allocated, core_sets, base_ports, port_stride, bind_address,
                       tuple(models) if models else None)


def _unit(itype: InstanceType) -> tuple[str, str]:
    """What a server gets on ``itype``, and its key: ``("device", "devices")`` or ``("GPU", "gpus")``."""
    return ("device", "devices") if itype.is_neuron else ("GPU", "gpus")


def _check_server_count(itype: InstanceType, entries: Sequence[ServerSpec]) -> None:
    """Each server needs at least one device (GPU) of its own."""
    unit, _ = _unit(itype)
    if len(entries) > itype.device_count:
        raise PlacementError(_FIELD, len(entries), f"more servers than {unit}s: {itype.name} has "
                             f"{itype.device_count} {unit}(s) and each server needs at least one of its own")


def _explicit_ids(itype: InstanceType, entries: Sequence[ServerSpec]) -> list[list[int] | None]:
    """What this instance type allows per server: each explicit device (GPU) list, checked and sorted."""
    neuron = itype.is_neuron
    unit, alloc_key = _unit(itype)
    explicit: list[list[int] | None] = []
    for i, server in enumerate(entries):
        where = f"{_FIELD}[{i}]"
        for key in (("devices", "cores") if not neuron else ("gpus",)):
            if getattr(server, key) is not None:
                kind, use = ("a GPU", "gpus") if not neuron else ("a Neuron", "devices/cores")
                raise PlacementError(f"{where}.{key}", getattr(server, key),
                                     f"{key} is not valid on {itype.name}, which is {kind} host (use {use})")
        ids = getattr(server, alloc_key)
        if ids is None:
            explicit.append(None)
            continue
        field = f"{where}.{alloc_key}"
        outside = [d for d in ids if not 0 <= d < itype.device_count]
        if outside:
            noun = unit if len(outside) == 1 else f"{unit}s"
            raise PlacementError(field, ids, f"{noun} {_fmt(outside)} not on {itype.name} "
                                             f"({itype.name} has {_have(unit, itype.device_count)})")
        if neuron and not _contiguous(ids):
            raise PlacementError(field, ids, f"devices must be contiguous "
                                             f"({itype.name} has {_have(unit, itype.device_count)})")
        explicit.append(sorted(ids))
    return explicit


def _check_exclusive(itype: InstanceType, explicit: Sequence[list[int] | None]) -> None:
    """Devices (GPUs) are exclusive between servers: no two explicit lists share one."""
    unit, alloc_key = _unit(itype)
    owner: dict[int, int] = {}
    for i, ids in enumerate(explicit):
        if ids is None:
            continue
        taken = [d for d in ids if d in owner]
        if taken:
            other = owner[taken[0]]
            raise PlacementError(f"{_FIELD}[{i}].{alloc_key}", ids, f"{unit}s {format_core_range(taken)} "
                                 f"already used by {_FIELD}[{other}] (servers cannot share a {unit})")
        owner.update(dict.fromkeys(ids, i))


def _split_unclaimed(itype: InstanceType, explicit: Sequence[list[int] | None]) -> list[list[int]]:
    """Every server's devices (GPUs): its explicit list, or an even, contiguous share of the unclaimed."""
    unit, alloc_key = _unit(itype)
    auto = [i for i, ids in enumerate(explicit) if ids is None]
    allocated: list[list[int]] = [list(ids) if ids is not None else [] for ids in explicit]
    if auto:
        claimed = {d for ids in explicit if ids is not None for d in ids}
        free = [d for d in range(itype.device_count) if d not in claimed]
        if len(free) < len(auto) or len(free) % len(auto):
            free_txt = format_core_range(free) if free else "none"
            raise PlacementError(_FIELD, auto, f"{len(auto)} server(s) without {alloc_key} cannot evenly "
                                 f"split the {len(free)} unclaimed {unit}(s) of {itype.name} ({free_txt}); "
                                 f"give them explicit {alloc_key}")
        size = len(free) // len(auto)
        for n, i in enumerate(auto):
            chunk = free[n * size : (n + 1) * size]
            if itype.is_neuron and not _contiguous(chunk):
                raise PlacementError(f"{_FIELD}[{i}]", chunk, "the unclaimed devices left for this server "
                                     f"are not contiguous ({format_core_range(free)} split {len(auto)} "
                                     "ways); give it explicit devices")
            allocated[i] = chunk
    return allocated


def _core_sets(
    itype: InstanceType, entries: Sequence[ServerSpec], allocated: Sequence[list[int]]
) -> list[list[int]]:
    """Every server's cores: its explicit ``cores`` (on its devices, contiguous) or all its devices' cores."""
    neuron = itype.is_neuron
    core_sets: list[list[int]] = []
    for i, server in enumerate(entries):
        owned = [c for d in allocated[i] for c in itype.cores_of_device(d)] if neuron else []
        if not neuron or server.cores is None:
            core_sets.append(owned)
            continue
        field = f"{_FIELD}[{i}].cores"
        cores = list(server.cores)
        foreign = sorted(c for c in cores if c not in owned)
        if foreign:
            raise PlacementError(field, cores, f"cores {_fmt(foreign)} are not on this server's devices "
                                 f"{format_core_range(allocated[i])} (cores {format_core_range(owned)})")
        if not _contiguous(cores):
            raise PlacementError(field, cores, "cores must be contiguous")
        core_sets.append(sorted(cores))
    return core_sets


def _check_cores_exclusive(core_sets: Sequence[list[int]]) -> None:
    """NeuronCores are never shared between servers (unreachable while devices are exclusive; a guard)."""
    core_owner: dict[int, int] = {}
    for i, cores in enumerate(core_sets):
        shared = [c for c in cores if c in core_owner]
        if shared:
            raise PlacementError(f"{_FIELD}[{i}].cores", cores, f"cores {format_core_range(shared)} already "
                                 f"used by {_FIELD}[{core_owner[shared[0]]}] "
                                 "(NeuronCores cannot be shared between servers)")
        core_owner.update(dict.fromkeys(cores, i))


def _placements(itype: InstanceType, entries: Sequence[ServerSpec], allocated: Sequence[list[int]],
                core_sets: Sequence[list[int]], base_ports: tuple[int, int, int], port_stride: int,
                bind_address: str, models: tuple[str, ...] | None = None) -> list[Placement]:
    """Ports, names, addresses, models: each server's :class:`Placement`, its ports and container name unique
    (``models``: those of a server without its own)."""
    neuron = itype.is_neuron
    placements: list[Placement] = []
    used_ports: list[tuple[int, str, str]] = []  # (port, bind address, field)
    names: dict[str, int] = {}
    for i, server in enumerate(entries):
        where = f"{_FIELD}[{i}]"
        address = server.bind_address or bind_address
        ports = _ports(i, server, address, base_ports, port_stride, used_ports)
        used_ports.extend((port, address, f"{where}.{key}") for key, port in ports.items())
        name = server.name or ("triton" if len(entries) == 1 else f"triton-{i}")
        if name in names:
            raise PlacementError(f"{where}.name", name,
                                 f"container name already used by {_FIELD}[{names[name]}]")
        names[name] = i
        devices = tuple(allocated[i]) if neuron else ()
        cores = tuple(core_sets[i]) if neuron else ()
        gpus = tuple(allocated[i]) if not neuron else ()
        placements.append(Placement(
            index=i, name=name, devices=devices, cores=cores,
            visible_cores=format_core_range(cores) if neuron else None,
            device_paths=tuple(f"/dev/neuron{d}" for d in devices),
            gpus=gpus, gpus_flag=("device=" + ",".join(str(g) for g in gpus)) if gpus else None,
            http_port=ports["http_port"], grpc_port=ports["grpc_port"], metrics_port=ports["metrics_port"],
            bind_address=address, models=tuple(server.models) if server.models is not None else models,
        ))
    return placements


def _ports(i: int, server: ServerSpec, address: str, base_ports: tuple[int, int, int], port_stride: int,
           used_ports: Sequence[tuple[int, str, str]]) -> dict[str, int]:
    """Server ``i``'s ports (explicit, or base + i * stride), clashing with none of its own or the others'."""
    where = f"{_FIELD}[{i}]"
    ports: dict[str, int] = {}
    for key, base in zip(_PORT_KEYS, base_ports, strict=True):
        field = f"{where}.{key}"
        port = getattr(server, key)
        if port is None:
            port = base + i * port_stride
            if not 1 <= port <= 65535:
                raise PlacementError(field, port, f"default port (base {base} + {i} * {port_stride}) "
                                     "is out of range 1..65535")
        for other_key, other_port in ports.items():
            if other_port == port:
                raise PlacementError(field, port, f"same port as {where}.{other_key}")
        for other_port, other_address, other_field in used_ports:
            if other_port == port and _overlaps(address, other_address):
                raise PlacementError(field, port, f"port already used by {other_field}")
        ports[key] = port
    return ports
