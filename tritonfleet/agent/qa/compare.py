"""Comparing a response's outputs with the expected arrays.

- ``exact``: equal shape and every element equal (a NaN matches a NaN).
- ``close``: numpy ``allclose`` semantics per element, ``|got - want| <= atol + rtol * |want|`` (a NaN
  matches a NaN only).
- ``topk``: on the last axis (the classes), the top-k labels of ``got`` must be top-k labels of ``want``
  (ties in ``want`` at the k-th place accept either label); the order within the top k does not matter.

Every check reports the *worst* element: when it fails, the element that misses by the most (for
``close``: the largest excess over the tolerance); when it passes, the largest absolute error. ``rel`` is
``abs / |want|``, and ``None`` where ``want`` is 0 and ``abs`` is not (or the output is BYTES).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .schema import Compare


@dataclass
class Worst:
    output: str
    index: list[int]
    abs: float | None
    rel: float | None
    got: Any = None
    expected: Any = None
    failed: bool = False
    score: float = 0.0  # what ranks two worsts: excess over the tolerance, or the absolute error

    def key(self) -> tuple[bool, float]:
        return (self.failed, self.score)

    def to_json(self) -> dict:
        return {"output": self.output, "index": self.index, "abs": self.abs, "rel": self.rel}


@dataclass
class Check:
    ok: bool
    worst: Worst | None = None
    message: str | None = None  # the first problem, naming output, element, got and expected


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.9g}"
    if isinstance(value, bytes):
        return repr(value)
    return str(value)


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _rel(diff: float, want: float) -> float | None:
    if want != 0:
        return float(diff / abs(want))
    return 0.0 if diff == 0 else None


def _element(name: str, got: np.ndarray, want: np.ndarray, flat: int, diff: np.ndarray | None, failed: bool,
             score: float) -> Worst:
    index = [int(i) for i in np.unravel_index(flat, got.shape)] if got.ndim else []
    g, w = (_scalar(a.reshape(-1)[flat]) for a in (got, want))
    if diff is None:  # BYTES
        return Worst(name, index, None, None, g, w, failed, score)
    d = float(diff.reshape(-1)[flat])
    d_json = d if np.isfinite(d) else None
    rel = _rel(d, w) if np.isfinite(d) else None
    return Worst(name, index, d_json, rel, g, w, failed, score)


def _message(w: Worst, what: str = "") -> str:
    text = f"{w.output}{list(w.index)}: got {_fmt(w.got)}, expected {_fmt(w.expected)}"
    if w.abs is not None:
        text += f" (abs {w.abs:.3g}" + (f", rel {w.rel:.3g})" if w.rel is not None else ")")
    return text + (f" {what}" if what else "")


def _diff(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.asarray(np.abs(g - w))  # an array also for 0-d outputs (numpy gives a scalar there)
    diff[np.isnan(diff)] = np.inf  # one side NaN, or infinities of opposite sign
    diff[(g == w) | (np.isnan(g) & np.isnan(w))] = 0.0  # equal infinities, NaN and NaN
    return diff


def check_output(name: str, got: np.ndarray | None, want: np.ndarray, cmp: Compare) -> Check:
    """Compare one output; ``got`` None means the response did not have it."""
    if got is None:
        return Check(False, None, f"{name}: not in the response")
    if got.shape != want.shape:
        return Check(False, None, f"{name}: shape {list(got.shape)}, expected {list(want.shape)}")
    if got.size == 0:
        return Check(True)
    if want.dtype == np.object_ or got.dtype == np.object_:  # BYTES: exact only
        bad = np.flatnonzero(np.array([a != b for a, b in zip(got.reshape(-1), want.reshape(-1))], dtype=bool))  # noqa: B905
        if bad.size:
            w = _element(name, got, want, int(bad[0]), None, True, 1.0)
            return Check(False, w, _message(w))
        return Check(True, _element(name, got, want, 0, None, False, 0.0))
    if cmp.kind == "exact" and got.dtype.kind in "biu" and np.array_equal(got, want):
        return Check(True, Worst(name, [0] * got.ndim, 0.0, 0.0, failed=False, score=0.0))
    diff = _diff(got, want)
    if cmp.kind == "topk":
        return _topk(name, got, want, cmp.k, diff)
    if cmp.kind == "close":
        scale = np.nan_to_num(np.abs(want.astype(np.float64)), nan=0.0, posinf=0.0)
        excess = diff - (cmp.atol + cmp.rtol * scale)
    else:
        excess = np.where(got != want, np.maximum(diff, np.finfo(np.float64).tiny), 0.0)
        if got.dtype.kind == "f":
            excess[np.isnan(got) & np.isnan(want)] = 0.0
    if (excess > 0).any():
        flat = int(np.argmax(excess))
        w = _element(name, got, want, flat, diff, True, float(excess.reshape(-1)[flat]))
        return Check(False, w, _message(w, "" if cmp.kind == "exact" else f"beyond {cmp.describe()}"))
    flat = int(np.argmax(diff))
    return Check(True, _element(name, got, want, flat, diff, False, float(diff.reshape(-1)[flat])))


def _topk(name: str, got: np.ndarray, want: np.ndarray, k: int, diff: np.ndarray) -> Check:
    classes = got.shape[-1] if got.ndim else 0
    if got.ndim == 0 or classes < k:
        return Check(False, None, f"{name}: top-{k} of an output with {classes} classes")
    g = got.reshape(-1, classes).astype(np.float64)
    w = want.reshape(-1, classes).astype(np.float64)
    kth = np.partition(w, classes - k, axis=1)[:, classes - k]  # the k-th largest expected score
    top = np.argsort(-g, axis=1, kind="stable")[:, :k]
    valid = np.take_along_axis(w, top, axis=1) >= kth[:, None]
    rows_ok = valid.all(axis=1) & ~np.isnan(g).any(axis=1)
    if rows_ok.all():
        flat = int(np.argmax(diff))
        return Check(True, _element(name, got, want, flat, diff, False, float(diff.reshape(-1)[flat])))
    row = int(np.flatnonzero(~rows_ok)[0])
    bad = [int(x) for x in top[row][~valid[row]]] or [int(top[row][0])]
    flat = row * classes + bad[0]
    worst = _element(name, got, want, flat, diff, True, float("inf"))
    lead = [int(i) for i in np.unravel_index(row, got.shape[:-1])] if got.ndim > 1 else []
    expected_top = sorted(int(x) for x in np.argsort(-w[row], kind="stable")[:k])
    message = (f"{name}{lead}: top-{k} labels {sorted(int(x) for x in top[row])}, expected {expected_top} "
               f"(label {bad[0]}: got {_fmt(worst.got)}, expected {_fmt(worst.expected)})")
    return Check(False, worst, message)


def check_response(outputs: dict[str, np.ndarray | None], expected: dict[str, np.ndarray],
                   compares: dict[str, Compare]) -> Check:
    """All expected outputs of one response: ok if every one passes; the worst element kept, and the message
    of the worst failing output (a missing output or a wrong shape counts as the worst)."""
    ok, worst, message, message_key = True, None, None, None
    for name, want in expected.items():
        c = check_output(name, outputs.get(name), want, compares[name])
        if not c.ok:
            ok = False
            key = failure_key(c)
            if message_key is None or key > message_key:
                message, message_key = c.message, key
        if c.worst is not None and (worst is None or c.worst.key() > worst.key()):
            worst = c.worst
    return Check(ok, worst, message)


def failure_key(c: Check) -> tuple[bool, float]:
    """Ranks failed checks: one without a worst element (missing output, wrong shape) ranks first."""
    return c.worst.key() if c.worst is not None else (True, float("inf"))
