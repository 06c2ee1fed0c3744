"""A loaded suite meets a model: every tensor checked against the model's metadata, and turned into the
request and expected arrays the runner sends and compares.

Batching: for a model with ``max_batch_size > 0`` an entry whose tensors have the model's rank (batch dim
excluded) is one batch element. A request of ``batch_size`` b is made of b consecutive entries, request k
starting at entry ``k*b`` (mod the entry count), as perf_analyzer fills ``-b``; one entry given with b > 1
is repeated. Expected outputs are taken from the same entries, so every row is checked against its own
expectation (perf_analyzer 2.51 compares every row with the first row's bytes, so correct batches with
different entries fail there). An entry with one more dim carries its own batch (its first dim), and
``batch_size`` must then stay 1. A model with ``max_batch_size 0`` takes each entry as one request, and
``batch_size`` must be 1.

Everything here is checked before any inference is sent; a problem is a :class:`SuiteError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .data import DataFormatError, Raw, to_array
from .schema import DEFAULT_TIMEOUT, EXACT, Compare
from .suites import LoadedCase, LoadedSuite, SuiteError

# Triton dtype -> numpy (BF16 has no numpy type: such tensors cannot be sent or checked here)
NP_DTYPES = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
             "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
             "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_}


@dataclass(frozen=True)
class TensorMeta:
    name: str
    datatype: str
    shape: tuple[int, ...]  # as the metadata says: with the batch dim (-1) for a batched model
    optional: bool = False


@dataclass(frozen=True)
class ModelInfo:
    """What the runner needs from a model's metadata and config."""

    name: str
    versions: tuple[str, ...]
    max_batch_size: int
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]

    def element_dims(self, t: TensorMeta) -> tuple[int, ...]:
        return t.shape[1:] if self.max_batch_size > 0 else t.shape


@dataclass
class Sample:
    """One request: its input arrays and the expected output arrays (full batch)."""

    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    batch: int  # rows per request (1 for an unbatched model)


@dataclass
class Plan:
    """One case, ready to run against one model."""

    suite: str  # display path
    model: str
    version: str
    case: str
    expect: str  # pass | fail | error
    reason: str | None
    protocol: str | None  # None: the run's default
    concurrency: list[int]
    requests: int | None  # per level; None: max(samples, 4 x concurrency)
    timeout: float
    batch_size: int
    samples: list[Sample] = field(default_factory=list)
    compares: dict[str, Compare] = field(default_factory=dict)
    input_dtypes: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)  # requested outputs ([] = all)
    data_error: str | None = None

    def requests_at(self, concurrency: int) -> int:
        return self.requests if self.requests is not None else max(len(self.samples), 4 * concurrency, 1)


def _names(tensors: tuple[TensorMeta, ...]) -> str:
    return ", ".join(t.name for t in tensors)


def _np_dtype(t: TensorMeta, file: str, where: str) -> np.dtype:
    if t.datatype not in NP_DTYPES:
        raise SuiteError(file, where, f"the model's {t.name} is {t.datatype}, which numpy cannot hold")
    return np.dtype(NP_DTYPES[t.datatype])


def _fits(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    return len(shape) == len(dims) and all(d < 0 or d == s for s, d in zip(shape, dims))  # noqa: B905 - 3.9


def _array(raw: Raw, info: ModelInfo, t: TensorMeta, file: str) -> np.ndarray:
    try:
        return to_array(raw, t.datatype, _np_dtype(t, file, raw.where), info.element_dims(t))
    except DataFormatError as exc:
        raise SuiteError(file, exc.where, exc.message) from None


def _tensor_by_name(tensors: tuple[TensorMeta, ...], name: str, kind: str, file: str, where: str) -> TensorMeta:
    for t in tensors:
        if t.name == name:
            return t
    raise SuiteError(file, where, f"the model has no {kind} {name} (has {_names(tensors)})")


def _check_compare(cmp: Compare, info: ModelInfo, t: TensorMeta, file: str, where: str) -> None:
    if cmp.kind != "exact" and t.datatype in ("BYTES", "BOOL"):
        raise SuiteError(file, where, f"{cmp.describe()} needs a numeric output; {t.name} is {t.datatype}")
    if cmp.kind == "topk":
        dims = info.element_dims(t)
        if not dims:
            raise SuiteError(file, where, f"top-k needs an output with a class axis; {t.name} is a scalar")
        if dims[-1] >= 0 and cmp.k > dims[-1]:
            raise SuiteError(file, where, f"top-{cmp.k} of {dims[-1]} classes")


def _kind(arr: np.ndarray, info: ModelInfo, t: TensorMeta) -> str | None:
    """``element`` (one batch element of a batched model, or a whole request of an unbatched one), ``batch``
    (a batched model's tensor with its batch dim), or None: it does not fit the model."""
    dims, shape = info.element_dims(t), tuple(arr.shape)
    if _fits(shape, dims):
        return "element"
    if info.max_batch_size > 0 and len(shape) == len(dims) + 1 and _fits(shape[1:], dims):
        return "batch"
    return None


def _misfit(arr: np.ndarray, info: ModelInfo, t: TensorMeta, kind: str) -> str:
    text = f"shape {list(arr.shape)} does not fit: the model's {kind} {t.name} has dims {list(info.element_dims(t))}"
    return text + (f" per batch element (max_batch_size {info.max_batch_size})" if info.max_batch_size else "")


@dataclass
class _Entry:
    """One data entry: a batch element (batched model) or a whole request."""

    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    whole: bool  # a whole request (an unbatched model, or the suite gave the batch dim)
    rows: int  # the batch of a whole request of a batched model; else 1


def _entry(file: str, info: ModelInfo, step: dict[str, Raw], want: dict[str, Raw], where: str) -> _Entry:
    kinds: dict[str, str] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, raw in step.items():
        t = _tensor_by_name(info.inputs, name, "input", file, raw.where)
        arr = _array(raw, info, t, file)
        kind = _kind(arr, info, t)
        if kind is None:
            raise SuiteError(file, raw.where, _misfit(arr, info, t, "input"))
        kinds[name], arrays[name] = kind, arr
    missing = [t.name for t in info.inputs if not t.optional and t.name not in step]
    if missing:
        raise SuiteError(file, where, f"no value for input {missing[0]} (the model needs {_names(info.inputs)})")
    if len(set(kinds.values())) > 1:
        raise SuiteError(file, where, "some inputs have a batch dim and some do not")
    batched = info.max_batch_size > 0 and "batch" in kinds.values()
    rows = {n: a.shape[0] for n, a in arrays.items()} if batched else {}
    if len(set(rows.values())) > 1:
        raise SuiteError(file, where, "inputs with different batch sizes (" +
                         ", ".join(f"{n} {r}" for n, r in rows.items()) + ")")
    n_rows = next(iter(rows.values())) if rows else 1
    if n_rows > info.max_batch_size > 0:
        raise SuiteError(file, where, f"a batch of {n_rows} exceeds max_batch_size {info.max_batch_size}")
    expected: dict[str, np.ndarray] = {}
    for name, raw in want.items():
        t = _tensor_by_name(info.outputs, name, "output", file, raw.where)
        arr = _array(raw, info, t, file)
        kind = _kind(arr, info, t)
        if kind is None:
            raise SuiteError(file, raw.where, _misfit(arr, info, t, "output"))
        if (kind == "batch") != batched or (batched and arr.shape[0] != n_rows):
            raise SuiteError(file, raw.where, f"shape {list(arr.shape)} does not match the inputs' "
                             + (f"batch of {n_rows}" if batched else "batch elements"))
        expected[name] = arr
    whole = info.max_batch_size == 0 or batched
    return _Entry(arrays, expected, whole, n_rows if batched else 1)


def _windows(entries: list[_Entry], batch_size: int, file: str, where: str) -> list[Sample]:
    """The distinct requests: batch elements ``k*b .. k*b+b-1`` (mod the entry count), as perf_analyzer
    fills a batch of ``-b`` from consecutive data steps (request ``k`` starts at step ``k*b``)."""
    if entries[0].whole:
        return [Sample(e.inputs, e.expected, e.rows) for e in entries]
    n = len(entries)
    names = set(entries[0].inputs)
    for i, e in enumerate(entries):
        if set(e.inputs) != names:
            raise SuiteError(file, where, f"entry {i} has inputs {sorted(e.inputs)}, entry 0 {sorted(names)}: "
                             "batch elements need the same inputs")
    period = n // math.gcd(n, batch_size)
    size = sum(a.nbytes for a in entries[0].inputs.values()) * batch_size * period
    if size > MAX_REQUEST_BYTES:
        raise SuiteError(file, where, f"{period} distinct requests of batch {batch_size} would take "
                         f"{size >> 20} MiB; use a batch size that divides the {n} entries")
    samples = []
    for k in range(period):
        idx = [(k * batch_size + j) % n for j in range(batch_size)]
        try:
            inputs = {name: np.stack([entries[i].inputs[name] for i in idx]) for name in sorted(names)}
            common = set.intersection(*(set(entries[i].expected) for i in idx))
            expected = {name: np.stack([entries[i].expected[name] for i in idx]) for name in sorted(common)}
        except ValueError as exc:  # variable dims that differ between entries
            raise SuiteError(file, where, f"entries {idx[0]}..{idx[-1]} cannot form one batch: {exc}") from None
        samples.append(Sample(inputs, expected, batch_size))
    return samples


MAX_REQUEST_BYTES = 512 << 20


def bind_case(ls: LoadedSuite, lc: LoadedCase, info: ModelInfo) -> Plan:
    """The case against ``info``; SuiteError (one line) for the first thing that does not fit."""
    s, c, file = ls.suite, lc.case, ls.display
    at = f"cases[{lc.index}]"
    batch_size = c.batch_size or s.batch_size or 1
    batch_where = f"{at}.batch_size" if c.batch_size else "batch_size"
    if batch_size > 1 and info.max_batch_size == 0:
        raise SuiteError(file, batch_where, f"{batch_size}, but {info.name} does not batch (max_batch_size 0)")
    if batch_size > info.max_batch_size > 0:
        raise SuiteError(file, batch_where, f"{batch_size} exceeds {info.name}'s max_batch_size {info.max_batch_size}")
    plan = Plan(ls.display, ls.model, ls.version, c.name, c.expect, c.reason, c.protocol or s.protocol,
                list(c.concurrency or s.concurrency or [1]), c.requests or s.requests,
                c.timeout or s.timeout or DEFAULT_TIMEOUT, batch_size, data_error=lc.data_error)
    plan.input_dtypes = {t.name: t.datatype for t in info.inputs}
    compare_default = c.compare or s.compare or EXACT
    for name, o in (c.outputs or {}).items():
        t = _tensor_by_name(info.outputs, name, "output", file, f"{at}.outputs.{name}")
        plan.compares[name] = o.compare or compare_default
        _check_compare(plan.compares[name], info, t, file, f"{at}.outputs.{name}.compare")
    padded = lc.expected[:len(lc.inputs)] + [{}] * max(0, len(lc.inputs) - len(lc.expected))
    entries = [_entry(file, info, step, want, lc.step_where(i))
               for i, (step, want) in enumerate(zip(lc.inputs, padded))]  # noqa: B905 - equal lengths; 3.9
    for extra in lc.expected[len(lc.inputs):]:  # misaligned validation_data: its entries are still checked
        for name, raw in extra.items():
            _array(raw, info, _tensor_by_name(info.outputs, name, "output", file, raw.where), file)
    for name in sorted({n for e in entries for n in e.expected} - set(plan.compares)):
        t = _tensor_by_name(info.outputs, name, "output", file, at)
        plan.compares[name] = compare_default
        _check_compare(compare_default, info, t, file, f"{at}.compare" if c.compare else "compare")
    if any(e.whole for e in entries) and info.max_batch_size > 0:
        if not all(e.whole for e in entries):
            raise SuiteError(file, at, "some entries have a batch dim and some do not")
        if batch_size > 1:
            raise SuiteError(file, batch_where, f"{batch_size}, but the inputs already have their batch dim")
    plan.samples = _windows(entries, batch_size, file, lc.step_where(0).rsplit(": data[", 1)[0])
    least = len(entries) if entries[0].whole else -(-len(entries) // batch_size)
    if plan.requests is not None and plan.requests < least:
        where = f"{at}.requests" if c.requests else "requests"
        raise SuiteError(file, where, f"{plan.requests} requests cannot send all {len(entries)} data entries "
                         f"(needs {least})")
    for name in c.outputs or {}:
        if not any(name in smp.expected for smp in plan.samples) and lc.data_error is None:
            raise SuiteError(file, f"{at}.outputs.{name}", "a comparison, but no expected values for this output")
    plan.outputs = sorted(plan.compares)
    return plan


def bind_suite(ls: LoadedSuite, info: ModelInfo) -> list[Plan]:
    return [bind_case(ls, lc, info) for lc in ls.cases]
