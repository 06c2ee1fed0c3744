"""A model's accelerator memory footprint, and whether a Triton server's devices hold its models. Pure logic
over a local model repository (Triton's layout: ``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/``).

Per model instance, a footprint is

- **declared**, when its ``config.pbtxt`` says so (exact: what the model's owner measured)::

      parameters { key: "tritonfleet_memory_mib" value: { string_value: "12288" } }

  (Triton's ``parameters`` are strings; the value is whole MiB per model instance);
- otherwise **estimated** from the artifacts of the versions Triton would serve (``version_policy``; by default
  the highest numeric version): every file in those version directories but Python sources (``model.py`` is
  the python backend's code, not weights) and hidden files, plus a ``COMPILED_MODEL`` parameter's file inside
  the model directory (gen-model's python-backend Neuron models keep it there). Neuron: their size times
  :data:`NEURON_FACTOR`; GPU: times :data:`GPU_FACTOR`. A python backend model with only ``model.py`` is 0 MiB
  unless declared.

A model's total is its footprint per instance times its accelerator instances: the ``count`` of each
``instance_group`` (default 1, and 1 when there is none), ``KIND_CPU`` groups counting no accelerator memory.
On GPU servers a ``KIND_GPU``/``KIND_AUTO`` group without ``gpus`` gets ``count`` instances on *every* GPU the
server sees (Triton's rule), so the total depends on the server's GPU count (``gpus``).

A server's capacity is its devices' memory (Neuron: ``device_memory_mib`` per device times its devices; GPU:
per-GPU memory times its GPUs) less a headroom percentage; :func:`check_fit` fails with one line when the
models do not fit.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tritonfleet.catalog import InstanceType

__all__ = [
    "NEURON_FACTOR",
    "GPU_FACTOR",
    "PARAMETER",
    "DEFAULT_HEADROOM_PCT",
    "Footprint",
    "FootprintError",
    "Capacity",
    "MemoryPlanError",
    "read_config",
    "declared_mib",
    "instance_count",
    "served_versions",
    "artifact_bytes",
    "model_footprint",
    "repository_models",
    "repository_footprints",
    "with_headroom",
    "server_capacity",
    "capacity_mib",
    "check_fit",
]

#: The ``config.pbtxt`` parameter that declares a model's memory per instance, in MiB (a string, as Triton's
#: parameters are).
PARAMETER = "tritonfleet_memory_mib"

#: Neuron estimate: device memory per instance = compiled artifacts x 1.25. An *estimate*: the runtime loads the
#: NEFF's weights and instructions into device memory and adds what the artifact does not contain (I/O tensors,
#: the scratchpad for intermediate activations, DMA rings and runtime buffers), which grows with batch size and
#: sequence length. A quarter on top covers common compiled vision and encoder models; declare
#: ``tritonfleet_memory_mib`` (measured with ``neuron-top``/``neuron-monitor``) to be exact.
NEURON_FACTOR = 1.25

#: GPU estimate: the artifacts' size (weights as stored). Also an estimate (CUDA context, workspace and
#: activations come on top; the server's headroom is meant to cover them); declare the parameter to be exact.
GPU_FACTOR = 1.0

#: Percent of a server's device memory kept free by default (runtime, fragmentation, nominal vs usable size).
DEFAULT_HEADROOM_PCT = 10.0

MIB = 1024 * 1024

_VERSION_DIR = re.compile(r"^[0-9]+$")
_WHOLE_MIB = re.compile(r"^[0-9]+$")
# Files in a version directory that are not model weights: Python sources (the python backend's model.py and
# helpers) and their bytecode.
_NOT_ARTIFACTS = (".py", ".pyc", ".pyo")

Accelerator = Literal["neuron", "gpu"]


class FootprintError(ValueError):
    """A model whose footprint cannot be told: an unreadable ``config.pbtxt``, a bad declared value, no version
    directory to estimate from. One line naming the model."""


class MemoryPlanError(ValueError):
    """A server's models need more accelerator memory than its devices hold (one line: host, server, the
    biggest models, need and capacity)."""


@dataclass(frozen=True)
class Footprint:
    """Accelerator memory of one model on one server: ``mib_each`` per instance, ``instances`` accelerator
    instances, ``total_mib = mib_each * instances``. ``source`` is ``"declared"`` or ``"estimated"``; ``why``
    says from what, in words."""

    model: str
    mib_each: int
    instances: int
    total_mib: int
    source: Literal["declared", "estimated"]
    why: str

    def describe(self) -> str:
        """``bert 2 x 12288 MiB`` (how error lines and tables show it)."""
        return f"{self.model} {self.instances} x {self.mib_each} MiB"


@dataclass(frozen=True)
class Capacity:
    """A server's accelerator memory: ``devices`` devices (``unit`` ``"device"`` or ``"GPU"``) holding
    ``raw_mib`` together, of which ``mib`` is usable once ``headroom_pct`` percent is kept free."""

    devices: int
    unit: str
    raw_mib: int
    headroom_pct: float
    mib: int

    def describe(self) -> str:
        """``its 1 device(s) hold 32768 MiB less 10% headroom = 29491 MiB``."""
        return (f"its {self.devices} {self.unit}(s) hold {self.raw_mib} MiB less {_pct(self.headroom_pct)} "
                f"headroom = {self.mib} MiB")


def _pct(value: float) -> str:
    return f"{value:g}%"


# -- config.pbtxt -------------------------------------------------------------------------------------------

def read_config(path: str | os.PathLike[str]) -> Any:
    """``config.pbtxt`` as Triton's own ``ModelConfig`` message (protobuf text format, as gen-model writes it).

    Raises :class:`FootprintError` for a file that cannot be read or parsed."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise FootprintError(f"{path}: cannot read: {exc}") from None
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        raise FootprintError(f"{path}: not a valid config.pbtxt: {' '.join(str(exc).split())}") from None


def declared_mib(config: Any, model: str = "") -> int | None:
    """The ``tritonfleet_memory_mib`` parameter in whole MiB, or None when the config does not declare it."""
    if PARAMETER not in config.parameters:
        return None
    raw = config.parameters[PARAMETER].string_value
    text = raw.strip()
    if not _WHOLE_MIB.match(text):
        who = f"{model}: " if model else ""
        raise FootprintError(f"{who}parameters {PARAMETER} {raw!r}: expected a whole number of MiB per model "
                             f'instance, e.g. string_value: "512"')
    return int(text)


def instance_count(config: Any, accelerator: Accelerator = "neuron", gpus: int = 1) -> int:
    """Accelerator instances of the model on one server: the sum of its ``instance_group`` counts (a count of
    0 is Triton's default, 1; no group at all is one group of 1); ``KIND_CPU`` groups count 0. On GPU servers a
    ``KIND_GPU`` or ``KIND_AUTO`` group without ``gpus`` makes ``count`` instances on each of the server's
    ``gpus`` GPUs, one with ``gpus`` on each GPU it lists."""
    from tritonclient.grpc import model_config_pb2 as mc

    group_kind = mc.ModelInstanceGroup
    groups = list(config.instance_group)
    if not groups:
        return max(gpus, 1) if accelerator == "gpu" else 1
    total = 0
    for group in groups:
        if group.kind == group_kind.KIND_CPU:
            continue
        count = group.count or 1
        if accelerator == "gpu" and group.kind in (group_kind.KIND_GPU, group_kind.KIND_AUTO):
            count *= len(group.gpus) if group.gpus else max(gpus, 1)
        total += count
    return total


def served_versions(model_dir: str | os.PathLike[str], config: Any) -> list[Path]:
    """The version directories Triton would serve, by the config's ``version_policy``: ``latest`` (the default,
    ``num_versions`` 1) the highest numeric ones, ``all`` every one, ``specific`` those listed that exist."""
    model_dir = Path(model_dir)
    try:
        by_number = {int(p.name): p for p in model_dir.iterdir() if p.is_dir() and _VERSION_DIR.match(p.name)}
    except OSError:
        by_number = {}
    numbers = sorted(by_number)
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice") if config.HasField("version_policy") else None
    if which == "all":
        chosen = numbers
    elif which == "specific":
        wanted = set(policy.specific.versions)
        chosen = [n for n in numbers if n in wanted]
    else:
        keep = policy.latest.num_versions if which == "latest" and policy.latest.num_versions else 1
        chosen = numbers[-keep:]
    return [by_number[n] for n in chosen]


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        out += [Path(dirpath, f) for f in sorted(filenames)
                if not f.startswith(".") and not f.endswith(_NOT_ARTIFACTS)]
    return out


def artifact_bytes(paths: Iterable[str | os.PathLike[str]]) -> int:
    """Bytes of the model artifacts under ``paths`` (files or directories): every regular file but Python
    sources, bytecode and hidden files; a file reached twice counts once."""
    seen: set[Path] = set()
    total = 0
    for p in paths:
        for f in _files(Path(p)):
            real = f.resolve()
            if real in seen or not f.is_file():
                continue
            seen.add(real)
            total += f.stat().st_size
    return total


def _compiled_model(model_dir: Path, config: Any) -> Path | None:
    """A ``COMPILED_MODEL`` parameter's file, when it is inside the model directory (gen-model's models)."""
    if "COMPILED_MODEL" not in config.parameters:
        return None
    value = config.parameters["COMPILED_MODEL"].string_value.strip()
    if not value:
        return None
    path = Path(value) if os.path.isabs(value) else model_dir / value
    try:
        path.resolve().relative_to(model_dir.resolve())
    except ValueError:
        return None
    return path if path.exists() else None


def model_footprint(model_dir: str | os.PathLike[str], accelerator: Accelerator = "neuron", *,
                    gpus: int = 1, config: Any = None) -> Footprint:
    """The footprint of the model in ``model_dir`` on a server of ``accelerator`` with ``gpus`` GPUs (GPU
    servers; see :func:`instance_count`). Raises :class:`FootprintError`."""
    model_dir = Path(model_dir)
    name = model_dir.name
    if config is None:
        config = read_config(model_dir / "config.pbtxt")
    instances = instance_count(config, accelerator, gpus)
    declared = declared_mib(config, name)
    if declared is not None:
        return Footprint(name, declared, instances, declared * instances, "declared",
                         f"declared: parameters {PARAMETER} = {declared} MiB per instance")
    versions = served_versions(model_dir, config)
    if not versions:
        raise FootprintError(f"{name}: no numeric version directory in {model_dir} to estimate its memory from "
                             f"(or declare parameters {PARAMETER} in its config.pbtxt)")
    paths: list[Path] = list(versions)
    compiled = _compiled_model(model_dir, config)
    if compiled is not None:
        paths.append(compiled)
    size = artifact_bytes(paths)
    factor = NEURON_FACTOR if accelerator == "neuron" else GPU_FACTOR
    each = math.ceil(size * factor / MIB)
    where = "version " + ",".join(v.name for v in versions) + (f" and {compiled.name}" if compiled else "")
    if size == 0:
        why = f"estimated: no artifacts but Python sources in {where} (python backend?): 0 MiB unless declared"
    else:
        why = (f"estimated: {size / MIB:.1f} MiB of artifacts in {where} x {factor:g} ({accelerator}); "
               f"declare {PARAMETER} to be exact")
    return Footprint(name, each, instances, each * instances, "estimated", why)


def repository_models(repo: str | os.PathLike[str]) -> list[str]:
    """Model directories of a local repository (those with a ``config.pbtxt``), sorted."""
    repo = Path(repo)
    if not repo.is_dir():
        raise FootprintError(f"{repo}: no such model repository directory")
    return sorted(p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file())


def repository_footprints(repo: str | os.PathLike[str], accelerator: Accelerator = "neuron", *,
                          gpus: int = 1, models: Sequence[str] | None = None) -> dict[str, Footprint]:
    """``{model: footprint}`` of every model of the local repository ``repo`` (or of ``models`` only; one that
    is not there raises :class:`FootprintError`)."""
    names = repository_models(repo)
    if models is not None:
        missing = [m for m in models if m not in names]
        if missing:
            raise FootprintError(f"model(s) {', '.join(missing)} not in the repository {repo} (it has "
                                 f"{', '.join(names) or 'no model'})")
        names = list(models)
    return {m: model_footprint(Path(repo) / m, accelerator, gpus=gpus) for m in names}


# -- capacity -----------------------------------------------------------------------------------------------

def with_headroom(raw_mib: int, headroom_pct: float) -> int:
    """``raw_mib`` less ``headroom_pct`` percent, rounded down to whole MiB."""
    if not 0 <= headroom_pct < 100:
        raise ValueError(f"headroom {headroom_pct!r}: expected a percentage from 0 to below 100")
    return math.floor(raw_mib * (100 - headroom_pct) / 100)


def server_capacity(instance_type: InstanceType, placement: Any,
                    headroom_pct: float = DEFAULT_HEADROOM_PCT) -> Capacity:
    """The :class:`Capacity` of a server placed on ``instance_type`` (a :class:`~tritonfleet.placement.Placement`
    or anything with ``devices``/``gpus``): Neuron ``device_memory_mib`` x its devices, GPU per-GPU memory x its
    GPUs, less ``headroom_pct``."""
    if instance_type.is_neuron:
        count, unit = len(placement.devices), "device"
    elif instance_type.is_gpu:
        count, unit = len(placement.gpus), "GPU"
    else:
        count, unit = 0, "device"
    raw = instance_type.device_memory_mib * count
    return Capacity(count, unit, raw, headroom_pct, with_headroom(raw, headroom_pct))


def capacity_mib(instance_type: InstanceType, placement: Any, headroom_pct: float = DEFAULT_HEADROOM_PCT) -> int:
    """Usable accelerator memory of a server, in MiB (:func:`server_capacity`'s ``mib``)."""
    return server_capacity(instance_type, placement, headroom_pct).mib


def check_fit(host: str, server: str, footprints: Iterable[Footprint], capacity: Capacity | int) -> int:
    """The free MiB left when ``footprints`` fit in ``capacity``; else :class:`MemoryPlanError`, one line::

        inf2-1: server bert: models need 30720 MiB (bert 2 x 12288 MiB, resnet 1 x 6144 MiB) but its 1
        device(s) hold 32768 MiB less 10% headroom = 29491 MiB
    """
    prints = sorted(footprints, key=lambda f: (-f.total_mib, f.model))
    need = sum(f.total_mib for f in prints)
    usable = capacity.mib if isinstance(capacity, Capacity) else int(capacity)
    if need <= usable:
        return usable - need
    shown = ", ".join(f.describe() for f in prints[:3]) + (", ..." if len(prints) > 3 else "")
    holds = capacity.describe() if isinstance(capacity, Capacity) else f"it holds {usable} MiB"
    raise MemoryPlanError(f"{host}: server {server}: models need {need} MiB ({shown}) but {holds}")
