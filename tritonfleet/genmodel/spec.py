"""What `tritonfleet gen-model` generates: the spec model, its parsers and its validation.

Everything here is pure: parse the upstream `gen_triton_model.py` option values, build a
:class:`GenModelSpec`, then :func:`validate` it. Validation collects *all* problems, each a single
line, so the CLI can print them and exit without writing anything.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

ModelType = Literal["pytorch", "tensorflow", "transformers-neuronx"]
Target = Literal["inf1", "inf2", "trn1", "trn2", "cpu"]

MODEL_TYPES: tuple[str, ...] = ("pytorch", "tensorflow", "transformers-neuronx")
TARGETS: tuple[str, ...] = ("inf1", "inf2", "trn1", "trn2", "cpu")
NEURON_V2_TARGETS: frozenset[str] = frozenset({"inf2", "trn1", "trn2"})

# Triton's data types (model_config.proto `DataType`, without TYPE_INVALID), as the suffix after TYPE_.
TRITON_DTYPES: tuple[str, ...] = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "STRING",
    "BF16",
)
INTEGER_DTYPES: frozenset[str] = frozenset(
    {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"}
)

# Largest NeuronCore count of any size in a family (Neuron docs; trn2 counted with LNC=1, which
# exposes 128 cores on trn2.48xlarge; the default LNC=2 exposes 64). Used only when no
# --instance-type narrows it down.
FAMILY_MAX_CORES: dict[str, int] = {"inf1": 64, "inf2": 24, "trn1": 32, "trn2": 128}
# Instance families each target accepts for --instance-type.
TARGET_FAMILIES: dict[Target, tuple[str, ...]] = {
    "inf1": ("inf1",),
    "inf2": ("inf2",),
    "trn1": ("trn1", "trn1n"),
    "trn2": ("trn2", "trn2u", "trn2n"),
}
TNX_AMP: tuple[str, ...] = ("f32", "f16", "bf16")
DEFAULT_TNX_MODEL_CLASS = "transformers_neuronx.opt.model.OPTForSampling"

_PYTORCH_NAME = re.compile(r"^(?P<base>.+)__(?P<index>[0-9]+)$")
_NAME = re.compile(r"^[^\s,]+$")


class SpecError(ValueError):
    """A single-line problem with the requested model (or a list of them, one per line)."""

    def __init__(self, errors: list[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("; ".join(self.errors))


class TensorSpec(BaseModel):
    """One `--triton_input` / `--triton_output`: `NAME,DTYPE,D0xD1x...`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    dtype: str  # Triton suffix, e.g. "INT64" (config gets TYPE_INT64)
    dims: tuple[int, ...]

    @property
    def triton_type(self) -> str:
        return f"TYPE_{self.dtype}"


class TnxOptions(BaseModel):
    """transformers-neuronx load parameters; they go into config.pbtxt, not into model.py."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_class: str = DEFAULT_TNX_MODEL_CLASS
    tp_degree: int | None = None  # None: all cores of an instance
    n_positions: int = 2048
    amp: str = "bf16"
    batch_size: int = 1


class GenModelSpec(BaseModel):
    """A fully parsed `gen-model` request (upstream options plus tritonfleet's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_type: ModelType
    target: Target = "inf1"
    instance_type: str | None = None
    triton_model_dir: Path
    model_version: int = 1
    compiled_model: str
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    core_start: int
    core_end: int
    instance_count: int = 1
    threads_per_core: int = 1
    max_batch_size: int = 0
    dynamic_batching: bool = False
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_microseconds: int | None = None
    batch_requests_to_neuron: bool = True
    tag_set: str = "serve"
    signature_def_key: str = "serving_default"
    tnx: TnxOptions | None = None

    @property
    def model_dir(self) -> Path:
        return Path(os.path.abspath(self.triton_model_dir))

    @property
    def model_name(self) -> str:
        return self.model_dir.name

    @property
    def total_cores(self) -> int:
        return self.core_end - self.core_start + 1

    @property
    def cores_per_instance(self) -> int:
        return self.total_cores // self.instance_count if self.instance_count > 0 else 0

    def instance_cores(self) -> list[tuple[int, int]]:
        return allocate_cores(self.core_start, self.core_end, self.instance_count)


@dataclass
class Report:
    """Outcome of :func:`validate`: single-line errors and warnings, plus derived values."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compiled_model_value: str = ""  # what goes into COMPILED_MODEL
    core_limit: int | None = None  # cores the range must fit in, when known

    @property
    def ok(self) -> bool:
        return not self.errors


# --------------------------------------------------------------------------- parsing


def parse_tensor_spec(text: str, option: str = "--triton_input") -> TensorSpec:
    """Parse `NAME,DTYPE,D0xD1...`; raise SpecError with a one-line message."""
    fields = text.split(",")
    if len(fields) != 3:
        raise SpecError(f"{option} {text!r}: expected NAME,DTYPE,DIMS (e.g. INPUT__0,INT64,-1x4)")
    name, dtype, dims_text = (f.strip() for f in fields)
    if not name or not _NAME.match(name):
        raise SpecError(f"{option} {text!r}: the tensor name must be non-empty and contain no spaces")
    dt = dtype.upper()
    if dt.startswith("TYPE_"):
        dt = dt[len("TYPE_") :]
    if dt not in TRITON_DTYPES:
        raise SpecError(
            f"{option} {text!r}: unknown data type {dtype!r}; Triton's are {', '.join(TRITON_DTYPES)}"
        )
    if not dims_text:
        raise SpecError(f"{option} {text!r}: no dims; give them as D0xD1x... (e.g. -1x4)")
    dims: list[int] = []
    for part in dims_text.split("x"):
        try:
            value = int(part)
        except ValueError:
            raise SpecError(
                f"{option} {text!r}: dim {part!r} is not an integer; dims are positive integers or -1 joined by 'x'"
            ) from None
        if value == 0 or value < -1:
            raise SpecError(f"{option} {text!r}: dim {value} is invalid; dims are positive integers or -1")
        dims.append(value)
    return TensorSpec(name=name, dtype=dt, dims=tuple(dims))


def parse_core_range(text: str) -> tuple[int, int]:
    """Parse `--neuron_core_range start:end` (inclusive)."""
    parts = text.split(":")
    if len(parts) != 2:
        raise SpecError(f"--neuron_core_range {text!r}: expected START:END, e.g. 0:3")
    try:
        start, end = int(parts[0]), int(parts[1])
    except ValueError:
        raise SpecError(f"--neuron_core_range {text!r}: START and END must be integers, e.g. 0:3") from None
    return start, end


def allocate_cores(start: int, end: int, count: int) -> list[tuple[int, int]]:
    """Contiguous equal core blocks per instance, as the generated model.py computes them."""
    if count < 1 or end < start:
        return []
    per = (end - start + 1) // count
    if per < 1:
        return []
    return [(start + i * per, start + (i + 1) * per - 1) for i in range(count)]


def family_of(instance_type: str) -> str:
    return instance_type.split(".", 1)[0].lower()


def target_for_instance_type(instance_type: str) -> Target | None:
    fam = family_of(instance_type)
    for target, families in TARGET_FAMILIES.items():
        if fam in families:
            return target
    return None


def instance_cores(instance_type: str) -> tuple[int, str | None]:
    """(NeuronCores, Neuron arch) of an instance type from tritonfleet.catalog (imported lazily).

    The arch is ``inf1``/``inf2``/``trn1``/``trn2``, or None for a non-Neuron (GPU) type, whose
    core count is then 0.
    """
    try:
        from tritonfleet import catalog
    except ImportError as exc:  # pragma: no cover - catalog ships with tritonfleet
        raise SpecError(f"--instance-type needs the instance catalog (tritonfleet.catalog): {exc}") from None
    try:
        info = catalog.get(instance_type)
    except ValueError as exc:  # catalog.UnknownInstanceType is a ValueError
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "unknown instance type"
        raise SpecError(f"--instance-type {instance_type!r}: {detail}") from None
    if getattr(info, "accelerator", "neuron") != "neuron":
        return 0, None
    arch = getattr(info, "neuron_arch", None) or target_for_instance_type(instance_type)
    return int(info.core_count), arch
