"""Accelerator memory: a model's footprint and whether a Triton server's devices hold its models. The rules
live here, in the host agent (standard library only, Python 3.9), so that the controller's preflight
(``tritonfleet.footprint``, ``roles/triton.py``) and the agent's check before it switches ``current`` apply
the very same ones.

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

A server's capacity is its devices' memory less a headroom percentage; :func:`check_fit` fails with one line
when the models do not fit.

**Reading config.pbtxt without protobuf.** The controller parses ``config.pbtxt`` with protobuf and Triton's
``ModelConfig`` (``tritonfleet.footprint.read_config``) and hands the rules a :class:`Config`; the agent, which has
no protobuf, reads it with :mod:`tritonfleet.agent.pbtxt` (the two are held equal by
tests/unit/test_memory_config.py).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tritonfleet.agent.pbtxt import KINDS, Config, ConfigSyntaxError, Group, config_from_text  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    _Path = str | os.PathLike[str]

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


class FootprintError(ValueError):
    """A model whose footprint cannot be told: an unreadable ``config.pbtxt``, a bad declared value, no version
    directory to estimate from. One line naming the model."""


class MemoryPlanError(ValueError):
    """A server's models need more accelerator memory than its devices hold (one line: host, server, the
    biggest models, need and capacity)."""


# -- config.pbtxt (the reader: tritonfleet/agent/pbtxt.py) -----------------------------------------------


def read_config(path: _Path) -> Config:
    """``config.pbtxt`` read with :func:`config_from_text`. Raises :class:`FootprintError` (one line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise FootprintError(f"{path}: cannot read: {exc}") from None
    try:
        return config_from_text(text)
    except ConfigSyntaxError as exc:
        raise FootprintError(f"{path}: not a valid config.pbtxt: {' '.join(str(exc).split())}") from None


# -- footprints ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Footprint:
    """Accelerator memory of one model on one server: ``mib_each`` per instance, ``instances`` accelerator
    instances, ``total_mib = mib_each * instances``. ``source`` is ``"declared"`` or ``"estimated"``; ``why``
    says from what, in words."""

    model: str
    mib_each: int
    instances: int
    total_mib: int
    source: str  # "declared" or "estimated"
    why: str

    def describe(self) -> str:
        """``bert 2 x 12288 MiB`` (how error lines and tables show it)."""
        return f"{self.model} {self.instances} x {self.mib_each} MiB"


def declared_mib(config: Config, model: str = "") -> int | None:
    """The ``tritonfleet_memory_mib`` parameter in whole MiB, or None when the config does not declare it."""
    if PARAMETER not in config.parameters:
        return None
    raw = config.parameters[PARAMETER]
    text = raw.strip()
    if not _WHOLE_MIB.match(text):
        who = f"{model}: " if model else ""
        raise FootprintError(f"{who}parameters {PARAMETER} {raw!r}: expected a whole number of MiB per model "
                             f'instance, e.g. string_value: "512"')
    return int(text)


def instance_count(config: Config, accelerator: str = "neuron", gpus: int = 1) -> int:
    """Accelerator instances of the model on one server: the sum of its ``instance_group`` counts (a count of
    0 is Triton's default, 1; no group at all is one group of 1); ``KIND_CPU`` groups count 0. On GPU servers a
    ``KIND_GPU`` or ``KIND_AUTO`` group without ``gpus`` makes ``count`` instances on each of the server's
    ``gpus`` GPUs, one with ``gpus`` on each GPU it lists."""
    if not config.groups:
        return max(gpus, 1) if accelerator == "gpu" else 1
    total = 0
    for group in config.groups:
        if group.kind == "KIND_CPU":
            continue
        count = group.count or 1
        if accelerator == "gpu" and group.kind in ("KIND_GPU", "KIND_AUTO"):
            count *= len(group.gpus) if group.gpus else max(gpus, 1)
        total += count
    return total


def served_versions(model_dir: _Path, config: Config) -> list[Path]:
    """The version directories Triton would serve, by the config's ``version_policy``: ``latest`` (the default,
    ``num_versions`` 1) the highest numeric ones, ``all`` every one, ``specific`` those listed that exist."""
    model_dir = Path(model_dir)
    try:
        by_number = {int(p.name): p for p in model_dir.iterdir() if p.is_dir() and _VERSION_DIR.match(p.name)}
    except OSError:
        by_number = {}
    numbers = sorted(by_number)
    if config.policy == "all":
        chosen = numbers
    elif config.policy == "specific":
        wanted = set(config.versions)
        chosen = [n for n in numbers if n in wanted]
    else:
        keep = config.num_versions if config.policy == "latest" and config.num_versions else 1
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


def artifact_bytes(paths: Iterable[_Path]) -> int:
    """Bytes of the model artifacts under ``paths`` (files or directories): every regular file but Python
    sources, bytecode and hidden files; a file reached twice counts once."""
    seen = set()
    total = 0
    for p in paths:
        for f in _files(Path(p)):
            real = f.resolve()
            if real in seen or not f.is_file():
                continue
            seen.add(real)
            total += f.stat().st_size
    return total


def _compiled_model(model_dir: Path, config: Config) -> Path | None:
    """A ``COMPILED_MODEL`` parameter's file, when it is inside the model directory (gen-model's models)."""
    value = config.parameters.get("COMPILED_MODEL", "").strip()
    if not value:
        return None
    path = Path(value) if os.path.isabs(value) else model_dir / value
    try:
        path.resolve().relative_to(model_dir.resolve())
    except ValueError:
        return None
    return path if path.exists() else None


def model_footprint(model_dir: _Path, config: Config, accelerator: str = "neuron",
                    gpus: int = 1) -> Footprint:
    """The footprint of the model in ``model_dir`` (whose ``config.pbtxt`` says ``config``) on a server of
    ``accelerator`` with ``gpus`` GPUs (GPU servers; see :func:`instance_count`). Raises :class:`FootprintError`."""
    model_dir = Path(model_dir)
    name = model_dir.name
    instances = instance_count(config, accelerator, gpus)
    declared = declared_mib(config, name)
    if declared is not None:
        return Footprint(name, declared, instances, declared * instances, "declared",
                         f"declared: parameters {PARAMETER} = {declared} MiB per instance")
    versions = served_versions(model_dir, config)
    if not versions:
        raise FootprintError(f"{name}: no numeric version directory in {model_dir} to estimate its memory from "
                             f"(or declare parameters {PARAMETER} in its config.pbtxt)")
    paths = list(versions)
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


def model_dirs(repo: _Path) -> list[str]:
    """Model directories of a local repository (those with a ``config.pbtxt``), sorted."""
    repo = Path(repo)
    if not repo.is_dir():
        raise FootprintError(f"{repo}: no such model repository directory")
    return sorted(p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file())


def server_footprints(repo: _Path, models: Iterable[str] | None, accelerator: str,
                      gpus: int = 1, read: Callable[[Path], Config] = read_config) -> list[Footprint]:
    """The footprints of what one server loads from the local repository ``repo``, biggest first: ``models``
    (those of them that are directories there; one without a ``config.pbtxt`` has Triton's defaults), or every
    model directory with a ``config.pbtxt`` (None). ``read`` reads a ``config.pbtxt`` (the controller's reads
    it with protobuf). Raises :class:`FootprintError`."""
    root = Path(repo)
    names = model_dirs(root) if models is None else sorted({m for m in models if (root / m).is_dir()})
    prints = []
    for m in names:
        path = root / m / "config.pbtxt"
        prints.append(model_footprint(root / m, read(path) if path.is_file() else Config(), accelerator, gpus))
    return sorted(prints, key=lambda f: (-f.total_mib, f.model))


# -- capacity -----------------------------------------------------------------------------------------------

def _pct(value: float) -> str:
    return f"{value:g}%"


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


def with_headroom(raw_mib: int, headroom_pct: float) -> int:
    """``raw_mib`` less ``headroom_pct`` percent, rounded down to whole MiB."""
    if not 0 <= headroom_pct < 100:
        raise ValueError(f"headroom {headroom_pct!r}: expected a percentage from 0 to below 100")
    return math.floor(raw_mib * (100 - headroom_pct) / 100)


def capacity(devices: int, mib_each: int, accelerator: str = "neuron",
             headroom_pct: float = DEFAULT_HEADROOM_PCT) -> Capacity:
    """The :class:`Capacity` of ``devices`` devices (GPUs) of ``mib_each`` MiB, less ``headroom_pct``."""
    raw = devices * mib_each
    return Capacity(devices, "GPU" if accelerator == "gpu" else "device", raw, headroom_pct,
                    with_headroom(raw, headroom_pct))


def does_not_fit(server: str, footprints: Iterable[Footprint], capacity: Capacity | int) -> str | None:
    """None when ``footprints`` fit in ``capacity``, else what is wrong (``server bert: models need ...``)."""
    prints = sorted(footprints, key=lambda f: (-f.total_mib, f.model))
    need = sum(f.total_mib for f in prints)
    usable = capacity.mib if isinstance(capacity, Capacity) else int(capacity)
    if need <= usable:
        return None
    shown = ", ".join(f.describe() for f in prints[:3]) + (", ..." if len(prints) > 3 else "")
    holds = capacity.describe() if isinstance(capacity, Capacity) else f"it holds {usable} MiB"
    return f"server {server}: models need {need} MiB ({shown}) but {holds}"


def check_fit(host: str, server: str, footprints: Iterable[Footprint], capacity: Capacity | int) -> int:
    """The free MiB left when ``footprints`` fit in ``capacity``; else :class:`MemoryPlanError`, one line::

        inf2-1: server bert: models need 30720 MiB (bert 2 x 12288 MiB, resnet 1 x 6144 MiB) but its 1
        device(s) hold 32768 MiB less 10% headroom = 29491 MiB
    """
    prints = list(footprints)
    problem = does_not_fit(server, prints, capacity)
    if problem is not None:
        raise MemoryPlanError(f"{host}: {problem}")
    usable = capacity.mib if isinstance(capacity, Capacity) else int(capacity)
    return usable - sum(f.total_mib for f in prints)


# -- the agent's check before a switch ----------------------------------------------------------------------

@dataclass(frozen=True)
class ServerMemory:
    """One server of the host: ``devices`` devices (GPUs) of ``mib_each`` MiB; ``models`` those it loads (None:
    every model of the repository)."""

    name: str
    devices: int
    mib_each: int
    models: frozenset[str] | None = None


@dataclass(frozen=True)
class MemoryPlan:
    """What the agent checks a version against before it switches ``current`` to it (``--server-capacity``)."""

    host: str
    servers: tuple[ServerMemory, ...]
    accelerator: str = "neuron"
    headroom_pct: float = DEFAULT_HEADROOM_PCT

    def check(self, repo: _Path) -> None:
        """Every server's models of the version in ``repo`` fit its devices; else :class:`MemoryPlanError` (one
        line, the first server that does not fit), also for a model whose footprint cannot be told."""
        for s in self.servers:
            cap = capacity(s.devices, s.mib_each, self.accelerator, self.headroom_pct)
            gpus = s.devices if self.accelerator == "gpu" else 1
            try:
                prints = server_footprints(repo, s.models, self.accelerator, gpus)
            except FootprintError as exc:
                raise MemoryPlanError(f"{self.host}: server {s.name}: {exc}") from None
            check_fit(self.host, s.name, prints, cap)
