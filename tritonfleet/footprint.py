"""A model's accelerator memory footprint, and whether a Triton server's devices hold its models: the
controller's side. The rules (declared ``tritonfleet_memory_mib`` or estimated from the artifacts, the Neuron
factor, instance counts, capacity less headroom, the one-line fit error) are :mod:`tritonfleet.agent.memory`'s,
which the host agent applies too before it switches ``current``; see its docstring. This module reads
``config.pbtxt`` with protobuf and Triton's own ``ModelConfig`` (:func:`read_config`) and hands the rules what
they read of it (:func:`config_view`); it adds what needs the instance catalog (:func:`server_capacity`).

Per model instance, a footprint is **declared** (``parameters { key: "tritonfleet_memory_mib" value:
{ string_value: "12288" } }``, whole MiB per instance) or **estimated** from the artifacts of the versions
Triton would serve (Neuron: their size x :data:`NEURON_FACTOR`; GPU: x :data:`GPU_FACTOR`); a model's total is
that times its accelerator instances (``instance_group`` counts; ``KIND_CPU`` counts none; on GPU servers a
``KIND_GPU``/``KIND_AUTO`` group without ``gpus`` has ``count`` on every GPU the server sees). A server's
capacity is its devices' memory (Neuron: ``device_memory_mib`` per device; GPU: per GPU) less a headroom
percentage; :func:`check_fit` fails with one line when the models do not fit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from tritonfleet.agent import memory
from tritonfleet.agent.memory import (
    DEFAULT_HEADROOM_PCT,
    GPU_FACTOR,
    MIB,
    NEURON_FACTOR,
    PARAMETER,
    Capacity,
    Config,
    Footprint,
    FootprintError,
    MemoryPlanError,
    artifact_bytes,
    check_fit,
    does_not_fit,
    with_headroom,
)
from tritonfleet.catalog import InstanceType

__all__ = [
    "NEURON_FACTOR",
    "GPU_FACTOR",
    "PARAMETER",
    "DEFAULT_HEADROOM_PCT",
    "MIB",
    "Config",
    "Footprint",
    "FootprintError",
    "Capacity",
    "MemoryPlanError",
    "read_config",
    "config_view",
    "read_view",
    "declared_mib",
    "instance_count",
    "served_versions",
    "artifact_bytes",
    "model_footprint",
    "repository_models",
    "repository_footprints",
    "server_footprints",
    "with_headroom",
    "server_capacity",
    "capacity_mib",
    "check_fit",
    "does_not_fit",
]

Accelerator = Literal["neuron", "gpu"]


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


def config_view(config: Any) -> Config:
    """What the footprint rules read of a ``ModelConfig`` message (a :class:`~tritonfleet.agent.memory.Config`
    is taken as it is)."""
    if isinstance(config, Config):
        return config
    kinds = memory.KINDS
    policy = config.version_policy
    return Config(
        parameters={key: value.string_value for key, value in config.parameters.items()},
        groups=tuple(memory.Group(kinds[g.kind] if 0 <= g.kind < len(kinds) else str(g.kind), g.count,
                                  tuple(g.gpus)) for g in config.instance_group),
        policy=policy.WhichOneof("policy_choice"),  # None: unset (or set empty)
        num_versions=policy.latest.num_versions,
        versions=tuple(policy.specific.versions),
    )


def read_view(path: str | os.PathLike[str]) -> Config:
    """:func:`read_config` (protobuf), as the rules read it."""
    return config_view(read_config(path))


def declared_mib(config: Any, model: str = "") -> int | None:
    """The ``tritonfleet_memory_mib`` parameter in whole MiB, or None when the config does not declare it."""
    return memory.declared_mib(config_view(config), model)


def instance_count(config: Any, accelerator: Accelerator = "neuron", gpus: int = 1) -> int:
    """Accelerator instances of the model on one server (:func:`tritonfleet.agent.memory.instance_count`)."""
    return memory.instance_count(config_view(config), accelerator, gpus)


def served_versions(model_dir: str | os.PathLike[str], config: Any) -> list[Path]:
    """The version directories Triton would serve, by the config's ``version_policy``."""
    return memory.served_versions(model_dir, config_view(config))


def model_footprint(model_dir: str | os.PathLike[str], accelerator: Accelerator = "neuron", *,
                    gpus: int = 1, config: Any = None) -> Footprint:
    """The footprint of the model in ``model_dir`` on a server of ``accelerator`` with ``gpus`` GPUs (GPU
    servers; see :func:`instance_count`). Raises :class:`FootprintError`."""
    model_dir = Path(model_dir)
    view = read_view(model_dir / "config.pbtxt") if config is None else config_view(config)
    return memory.model_footprint(model_dir, view, accelerator, gpus)


def repository_models(repo: str | os.PathLike[str]) -> list[str]:
    """Model directories of a local repository (those with a ``config.pbtxt``), sorted."""
    return memory.model_dirs(repo)


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


def server_footprints(repo: str | os.PathLike[str], models: Sequence[str] | None, accelerator: Accelerator,
                      gpus: int = 1) -> list[Footprint]:
    """What one server loads from ``repo``, biggest first, as the agent counts it
    (:func:`tritonfleet.agent.memory.server_footprints`), each ``config.pbtxt`` read with protobuf."""
    return memory.server_footprints(repo, models, accelerator, gpus, read=read_view)


# -- capacity -----------------------------------------------------------------------------------------------

def server_capacity(instance_type: InstanceType, placement: Any,
                    headroom_pct: float = DEFAULT_HEADROOM_PCT) -> Capacity:
    """The :class:`Capacity` of a server placed on ``instance_type`` (a :class:`~tritonfleet.placement.Placement`
    or anything with ``devices``/``gpus``): Neuron ``device_memory_mib`` x its devices, GPU per-GPU memory x its
    GPUs, less ``headroom_pct``."""
    if instance_type.is_neuron:
        count, accelerator = len(placement.devices), "neuron"
    elif instance_type.is_gpu:
        count, accelerator = len(placement.gpus), "gpu"
    else:
        count, accelerator = 0, "neuron"
    return memory.capacity(count, instance_type.device_memory_mib, accelerator, headroom_pct)


def capacity_mib(instance_type: InstanceType, placement: Any, headroom_pct: float = DEFAULT_HEADROOM_PCT) -> int:
    """Usable accelerator memory of a server, in MiB (:func:`server_capacity`'s ``mib``)."""
    return server_capacity(instance_type, placement, headroom_pct).mib
