"""The suite file format (pydantic 2): one suite = one model, a list of cases.

Suite-level keys (``protocol``, ``concurrency``, ``requests``, ``batch_size``, ``timeout``, ``compare``) are
defaults for the cases that do not set them. Every mapping rejects unknown keys. A validation error becomes
one line naming the file and the field path (:func:`first_error`), e.g.
``qa/add_sub.yaml: cases[2].concurrency[1]: Input should be less than or equal to 256``.

Annotations use ``Optional``/``Union``: pydantic evaluates them at run time, and ``X | None`` does not
exist on Python 3.9.
"""

# ruff: noqa: UP007, UP045 - pydantic evaluates annotations; Python 3.9 has no X | None
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)

MAX_CONCURRENCY = 256
MAX_REQUESTS = 100_000  # per concurrency level
MAX_BATCH = 65_536
MAX_TIMEOUT = 3600.0
DEFAULT_TIMEOUT = 60.0  # seconds per concurrency level
DTYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32",
          "FP64", "BYTES", "BF16")
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")  # a model directory name


@dataclass(frozen=True)
class Compare:
    """How one output is compared: ``exact``; ``close`` (numpy allclose: ``|got - want| <= atol +
    rtol * |want|``); ``topk`` (the top-k labels on the last axis agree)."""

    kind: str  # exact | close | topk
    atol: float = 0.0
    rtol: float = 0.0
    k: int = 0

    def describe(self) -> str:
        if self.kind == "close":
            return f"atol={self.atol:g}, rtol={self.rtol:g}"
        return f"top-{self.k}" if self.kind == "topk" else "exact"


EXACT = Compare("exact")


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return float(value)


def parse_compare(value: Any) -> Compare:
    """``"exact"``, ``{atol: X, rtol: Y}`` (either may be left out: 0) or ``{topk: K}``."""
    if isinstance(value, Compare):
        return value
    if value == "exact":
        return EXACT
    if isinstance(value, dict) and value and set(value) <= {"atol", "rtol"}:
        return Compare("close", atol=_number(value.get("atol", 0), "atol"), rtol=_number(value.get("rtol", 0), "rtol"))
    if isinstance(value, dict) and set(value) == {"topk"}:
        k = value["topk"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"topk must be a whole number >= 1, got {k!r}")
        return Compare("topk", k=k)
    raise ValueError(f"unknown comparison {value!r} (use exact, {{atol: X, rtol: Y}} or {{topk: K}})")


def _dtype(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    name = value.strip().upper()
    name = name[5:] if name.startswith("TYPE_") else name
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {value!r} (one of {', '.join(DTYPES)})")
    return name


def _concurrency(value: Any) -> Any:
    return [value] if isinstance(value, int) and not isinstance(value, bool) else value


def _unique(values: list[int]) -> list[int]:
    if len(set(values)) != len(values):
        raise ValueError(f"repeated concurrency level in {values}")
    return values


CompareField = Annotated[Compare, PlainValidator(parse_compare)]
DType = Annotated[str, BeforeValidator(_dtype)]
Shape = list[Annotated[int, Field(strict=True, ge=0)]]
Level = Annotated[int, Field(strict=True, ge=1, le=MAX_CONCURRENCY)]
Concurrency = Annotated[list[Level], BeforeValidator(_concurrency), Field(min_length=1)]
Requests = Annotated[int, Field(strict=True, ge=1, le=MAX_REQUESTS)]
Batch = Annotated[int, Field(strict=True, ge=1, le=MAX_BATCH)]
Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT)]
Protocol = Literal["grpc", "http"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputTensor(_Strict):
    """An input: inline ``values`` (with ``dtype``; ``shape`` defaults to the nesting) or an ``npy`` file."""

    values: Any = None
    npy: Optional[str] = None
    dtype: Optional[DType] = None
    shape: Optional[Shape] = None

    @model_validator(mode="after")
    def _one_source(self) -> InputTensor:
        if (self.values is None) == (self.npy is None):
            raise ValueError("give exactly one of values and npy")
        if self.npy is not None and self.shape is not None:
            raise ValueError("an npy file has its own shape; leave shape out")
        if self.values is not None and self.dtype is None:
            raise ValueError("inline values need a dtype")
        return self


class OutputTensor(_Strict):
    """An expected output (inline ``values`` or an ``npy`` file) and/or how to compare it."""

    values: Any = None
    npy: Optional[str] = None
    dtype: Optional[DType] = None
    shape: Optional[Shape] = None
    compare: Optional[CompareField] = None

    @model_validator(mode="after")
    def _sources(self) -> OutputTensor:
        if self.values is not None and self.npy is not None:
            raise ValueError("give values or npy, not both")
        if self.npy is not None and self.shape is not None:
            raise ValueError("an npy file has its own shape; leave shape out")
        if self.values is None and self.npy is None and (self.shape is not None or self.dtype is not None):
            raise ValueError("shape and dtype describe values; there are none")
        return self

    @property
    def has_values(self) -> bool:
        return self.values is not None or self.npy is not None


class _Defaults(_Strict):
    protocol: Optional[Protocol] = None
    concurrency: Optional[Concurrency] = None
    requests: Optional[Requests] = None
    batch_size: Optional[Batch] = None
    timeout: Optional[Timeout] = None
    compare: Optional[CompareField] = None

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, value: Optional[list[int]]) -> Optional[list[int]]:
        return None if value is None else _unique(value)


class Case(_Defaults):
    """One case. ``expect``: ``pass`` (every response matches), ``fail`` (a mismatch must be detected) or
    ``error`` (a data error must be reported, e.g. misaligned data/validation_data); ``reason`` is a
    substring the failure or error message must contain."""

    name: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\n\r]+$")]
    data: Optional[str] = None  # a perf_analyzer --input-data JSON file (data + validation_data)
    inputs: Optional[dict[str, InputTensor]] = None
    outputs: Optional[dict[str, OutputTensor]] = None
    expect: Literal["pass", "fail", "error"] = "pass"
    reason: Optional[Annotated[str, Field(min_length=1)]] = None

    @model_validator(mode="after")
    def _shape_of_case(self) -> Case:
        if self.data is not None and self.inputs is not None:
            raise ValueError("give inputs or data (a perf_analyzer JSON file), not both")
        if self.data is None and not self.inputs:
            raise ValueError("a case needs inputs or data (a perf_analyzer JSON file)")
        if self.data is not None:
            for name, out in (self.outputs or {}).items():
                if out.has_values:
                    raise ValueError(f"outputs.{name}: a data case takes its expected values from the file's "
                                     "validation_data; give only compare here")
        if self.reason is not None and self.expect == "pass":
            raise ValueError("reason is for expect: fail or expect: error")
        return self


class Suite(_Defaults):
    """A suite file. ``model`` defaults to the file name without its extension; ``neuron_cores`` is what
    the model needs (a host with fewer skips the suite)."""

    model: Optional[Annotated[str, Field(pattern=NAME.pattern)]] = None
    version: Optional[Union[Annotated[str, Field(pattern=r"^[0-9]{1,18}$")],
                            Annotated[int, Field(strict=True, ge=1)]]] = None
    description: Optional[str] = None
    neuron_cores: Optional[Annotated[int, Field(strict=True, ge=0, le=1024)]] = None
    cases: Annotated[list[Case], Field(min_length=1)]

    @field_validator("cases")
    @classmethod
    def _unique_names(cls, cases: list[Case]) -> list[Case]:
        seen: set[str] = set()
        for case in cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}")
            seen.add(case.name)
        return cases


def format_loc(loc: tuple) -> str:
    """``('cases', 2, 'outputs', 'OUTPUT9')`` -> ``cases[2].outputs.OUTPUT9``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_MESSAGES = {"extra_forbidden": "unknown field", "missing": "required field missing"}


def first_error(exc: ValidationError) -> tuple[str, str]:
    """``(field path, message)`` of the first error, with ``(+N more)`` when there are others."""
    errors = exc.errors(include_url=False)
    err = errors[0]
    msg = _MESSAGES.get(err["type"], err["msg"])
    msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
    if len(errors) > 1:
        msg += f" (+{len(errors) - 1} more)"
    return format_loc(tuple(err["loc"])), msg
