"""Tensors of a suite before they meet a model: inline values, ``.npy`` arrays and perf_analyzer
``--input-data`` JSON (read as perf_analyzer reads it), and their conversion to numpy arrays.

perf_analyzer's format: ``{"data": [STEP, ...], "validation_data": [STEP, ...]}``, a STEP mapping tensor
names to a flat list of values or to ``{"content": [...] | "b64": "...", "shape": [...]}``. Without
``shape`` the model's dims are used (they must then be fixed). For a batched model a STEP is one batch
element. ``validation_data`` is optional; when present it must have one STEP per ``data`` STEP, otherwise
the case has a *data error* (perf_analyzer: "The 'validation_data' field doesn't align with 'data' field"),
which is an outcome of the case, not a malformed file.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import numpy as np

INT_KINDS = "iu"


class DataFormatError(ValueError):
    """A tensor or data file that cannot be used; ``where`` is its field path."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass
class Raw:
    """One tensor as the suite gives it (exactly one of ``values``, ``array``, ``b64``)."""

    where: str  # field path for errors, e.g. cases[0].inputs.INPUT0
    values: Any = None
    array: np.ndarray | None = None  # from an .npy file
    b64: str | None = None
    dtype: str | None = None  # Triton name, when the suite states it
    shape: tuple[int, ...] | None = None
    flat: bool = False  # perf_analyzer content: a flat list; its shape is `shape` or the model's dims


@dataclass
class DataFile:
    """A perf_analyzer input-data file: ``data`` steps, optional ``validation_data`` steps."""

    data: list[dict[str, Raw]]
    validation: list[dict[str, Raw]] | None
    error: str | None = None  # a data error (misaligned validation_data)


def _steps(obj: Any, key: str, where: str) -> list[dict[str, Raw]]:
    if not isinstance(obj, list) or not obj:
        raise DataFormatError(f"{where}{key}", "must be a non-empty list of {tensor name: values} mappings")
    steps = []
    for i, step in enumerate(obj):
        at = f"{where}{key}[{i}]"
        if isinstance(step, list):
            raise DataFormatError(at, "a list of lists (one per stream) is for sequence models; not supported")
        if not isinstance(step, dict) or not step:
            raise DataFormatError(at, "must map tensor names to values")
        steps.append({name: _tensor(value, f"{at}.{name}") for name, value in step.items()})
    return steps


def _tensor(value: Any, where: str) -> Raw:
    if isinstance(value, list):
        return Raw(where, values=value, flat=True)
    if not isinstance(value, dict):
        raise DataFormatError(where, "must be a list of values or {content|b64, shape}")
    unknown = set(value) - {"content", "b64", "shape"}
    if unknown:
        raise DataFormatError(where, f"unknown key {sorted(unknown)[0]!r} (content, b64, shape)")
    if ("content" in value) == ("b64" in value):
        raise DataFormatError(where, "give exactly one of content and b64")
    shape = value.get("shape")
    if shape is not None and (not isinstance(shape, list) or
                              not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise DataFormatError(f"{where}.shape", f"must be a list of whole numbers >= 0, got {shape!r}")
    shape_t = tuple(shape) if shape is not None else None
    if "b64" in value:
        if not isinstance(value["b64"], str):
            raise DataFormatError(f"{where}.b64", "must be a base64 string")
        return Raw(where, b64=value["b64"], shape=shape_t, flat=True)
    content = value["content"]
    if not isinstance(content, list):
        raise DataFormatError(f"{where}.content", "must be a list")
    return Raw(where, values=content, shape=shape_t, flat=True)


def parse_input_data(obj: Any, where: str = "") -> DataFile:
    """perf_analyzer input data (parsed JSON) -> :class:`DataFile`; raise DataFormatError if malformed."""
    if not isinstance(obj, dict):
        raise DataFormatError(where or "(top)", "must be a mapping with data and validation_data")
    unknown = set(obj) - {"data", "validation_data"}
    if unknown:
        raise DataFormatError(where or "(top)", f"unknown key {sorted(unknown)[0]!r} (data, validation_data)")
    if "data" not in obj:
        raise DataFormatError(where or "(top)", "no data")
    data = _steps(obj["data"], "data", where)
    validation = _steps(obj["validation_data"], "validation_data", where) if "validation_data" in obj else None
    error = None
    if validation is not None and len(validation) != len(data):
        error = (f"The 'validation_data' field doesn't align with 'data' field: {len(validation)} "
                 f"validation_data entries for {len(data)} data entries")
    return DataFile(data, validation, error)


def nested_shape(values: Any, where: str) -> tuple[int, ...]:
    """The shape of rectangular nested lists (a scalar has shape ())."""
    if not isinstance(values, list):
        return ()
    if not values:
        return (0,)
    inner = [nested_shape(v, where) for v in values]
    if any(s != inner[0] for s in inner):
        raise DataFormatError(where, "nested lists of different lengths (not a rectangular array)")
    return (len(values), *inner[0])


def _flatten(values: Any) -> list:
    if not isinstance(values, list):
        return [values]
    out: list = []
    for v in values:
        out.extend(_flatten(v))
    return out


def _numbers(flat: list, dtype: str, np_dtype: np.dtype, where: str) -> np.ndarray:
    if dtype == "BYTES":
        if not all(isinstance(v, (str, bytes)) for v in flat):
            raise DataFormatError(where, "BYTES values must be strings")
        return np.array([v.encode() if isinstance(v, str) else v for v in flat] or [], dtype=np.object_)
    if dtype == "BOOL":
        if not all(isinstance(v, bool) for v in flat):
            raise DataFormatError(where, "BOOL values must be true or false")
        return np.array(flat, dtype=np.bool_)
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in flat):
        bad = next(v for v in flat if isinstance(v, bool) or not isinstance(v, (int, float)))
        raise DataFormatError(where, f"{bad!r} is not a number ({dtype})")
    if np_dtype.kind in INT_KINDS:
        if any(isinstance(v, float) for v in flat):
            bad = next(v for v in flat if isinstance(v, float))
            raise DataFormatError(where, f"{bad!r} is not a whole number ({dtype})")
        info = np.iinfo(np_dtype)
        if flat and (min(flat) < info.min or max(flat) > info.max):
            bad = min(flat) if min(flat) < info.min else max(flat)
            raise DataFormatError(where, f"{bad} is out of range for {dtype}")
    return np.array(flat, dtype=np_dtype)


def to_array(raw: Raw, dtype: str, np_dtype: np.dtype, model_dims: tuple[int, ...]) -> np.ndarray:
    """The numpy array of ``raw`` in the model's ``dtype``. ``model_dims`` (``-1``: variable) is the shape
    perf_analyzer content without ``shape`` takes. Raise DataFormatError for a wrong dtype or size."""
    if raw.dtype is not None and raw.dtype != dtype:
        raise DataFormatError(f"{raw.where}.dtype", f"{raw.dtype}, but the model's tensor is {dtype}")
    if raw.array is not None:
        arr = raw.array
        if dtype == "BYTES" and arr.dtype.kind in "OSU":
            return np.array([v.encode() if isinstance(v, str) else v for v in arr.ravel().tolist()],
                            dtype=np.object_).reshape(arr.shape)
        if arr.dtype != np_dtype:
            raise DataFormatError(raw.where, f"the .npy file holds {arr.dtype}, the model's tensor is {dtype} "
                                  f"({np.dtype(np_dtype).name})")
        return arr
    if raw.shape is not None:
        shape = raw.shape
    elif raw.flat:
        if any(d < 0 for d in model_dims):
            raise DataFormatError(raw.where, f"needs a shape: the model's dims {list(model_dims)} are not fixed")
        shape = model_dims
    else:
        shape = nested_shape(raw.values, raw.where)
    size = int(np.prod(shape, dtype=np.int64))
    if raw.b64 is not None:
        try:
            blob = base64.b64decode(raw.b64, validate=True)
        except (binascii.Error, ValueError):
            raise DataFormatError(f"{raw.where}.b64", "not valid base64") from None
        if dtype == "BYTES":
            raise DataFormatError(f"{raw.where}.b64", "b64 for BYTES tensors is not supported; use content")
        itemsize = np.dtype(np_dtype).itemsize
        if len(blob) != size * itemsize:
            raise DataFormatError(raw.where, f"b64 holds {len(blob)} bytes, shape {list(shape)} of {dtype} "
                                  f"needs {size * itemsize}")
        return np.frombuffer(blob, dtype=np_dtype).reshape(shape)
    if not raw.flat and raw.shape is None:
        nested_shape(raw.values, raw.where)  # ragged lists fail here
    flat = _flatten(raw.values)
    if len(flat) != size:
        raise DataFormatError(raw.where, f"has {len(flat)} values, shape {list(shape)} needs {size}")
    return _numbers(flat, dtype, np.dtype(np_dtype), raw.where).reshape(shape)
