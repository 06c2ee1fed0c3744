"""Finding and loading suite files: YAML or JSON, schema-checked, their ``.npy`` and data files read.

``--suites DIR`` takes every ``*.yaml``, ``*.yml`` and ``*.json`` directly in DIR (not below it); a JSON file
there with ``data`` and no ``cases`` is a perf_analyzer data file, not a suite, and is left alone.
``--suites FILE`` takes one file. Paths in a suite are relative to the suite file. Every problem is a
:class:`SuiteError`: one line, ``FILE: FIELD PATH: message``. What needs the model (dtypes, shapes, names)
is checked later, by :mod:`.bind`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from .data import DataFormatError, Raw, parse_input_data
from .schema import NAME, Case, Suite, first_error

SUFFIXES = (".yaml", ".yml", ".json")


class SuiteError(Exception):
    """A bad suite: ``file: path: message`` (path may be empty)."""

    def __init__(self, file: str, path: str, message: str) -> None:
        super().__init__(f"{file}: {path}: {message}" if path else f"{file}: {message}")
        self.file, self.path, self.message = file, path, message


@dataclass
class LoadedCase:
    index: int
    case: Case
    inputs: list[dict[str, Raw]]  # one mapping per request template (data step)
    expected: list[dict[str, Raw]]  # aligned with inputs (empty mappings: nothing to compare)
    data_error: str | None = None  # misaligned validation_data: an outcome of the case
    where: list[str] = field(default_factory=list)  # field path of each input mapping

    def step_where(self, i: int) -> str:
        return self.where[i] if i < len(self.where) else f"cases[{self.index}].inputs"


@dataclass
class LoadedSuite:
    path: Path
    display: str  # as reported: the --suites argument joined with the file name
    suite: Suite
    model: str
    version: str  # "" = the server's choice
    cases: list[LoadedCase]


class _Loader(yaml.SafeLoader):
    """Safe YAML that rejects duplicate keys and reads ``1e-4`` as a float (YAML 1.1 wants ``1.0e-4``)."""


def _mapping(loader: _Loader, node: yaml.MappingNode) -> dict:
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def read_document(path: Path, display: str) -> Any:
    """The parsed YAML or JSON document; SuiteError for a missing file or bad syntax."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(display, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(display, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if path.suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as exc:
            raise SuiteError(display, "", f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        except ValueError as exc:
            raise SuiteError(display, "", str(exc)) from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteError(display, "", f"{where}{problem}") from None


def discover(paths: list[str]) -> list[tuple[Path, str]]:
    """``(file, display)`` of every suite under the ``--suites`` arguments; SuiteError if one has none."""
    found: list[tuple[Path, str]] = []
    for arg in paths:
        p = Path(arg)
        if p.is_file():
            found.append((p, arg))
            continue
        if not p.is_dir():
            raise SuiteError(arg, "", "no such file or directory")
        files = sorted(f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file())
        suites = [f for f in files if not _is_data_file(f)]
        if not suites:
            raise SuiteError(arg, "", "no suite files (*.yaml, *.yml, *.json) in this directory")
        found += [(f, os.path.join(arg, f.name)) for f in suites]
    return found


def _is_data_file(path: Path) -> bool:
    if path.suffix != ".json":
        return False
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # reported when it is loaded as a suite
    return isinstance(doc, dict) and "data" in doc and "cases" not in doc


def _relative(display: str, rel: str) -> str:
    return os.path.normpath(os.path.join(os.path.dirname(display), rel))


def _npy(path: Path, shown: str, file: str, where: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise SuiteError(file, where, f"no such file: {shown}") from None
    except (OSError, ValueError) as exc:
        raise SuiteError(file, where, f"not a readable .npy file: {shown} ({str(exc).splitlines()[0]})") from None


def _load_case(index: int, case: Case, path: Path, display: str) -> LoadedCase:
    at = f"cases[{index}]"
    base = path.parent
    if case.data is not None:
        shown = _relative(display, case.data)
        doc = read_document_or_case_error(base / case.data, shown, display, f"{at}.data")
        try:
            df = parse_input_data(doc, f"{at}.data: {shown}: ")
        except DataFormatError as exc:
            raise SuiteError(display, exc.where, exc.message) from None
        # misaligned entries are kept too: their dtypes and shapes are still checked
        expected = df.validation if df.validation is not None else [{} for _ in df.data]
        steps = [f"{at}.data: {shown}: data[{i}]" for i in range(len(df.data))]
        return LoadedCase(index, case, df.data, expected, df.error, steps)
    inputs: dict[str, Raw] = {}
    for name, t in (case.inputs or {}).items():
        where = f"{at}.inputs.{name}"
        if t.npy is not None:
            arr = _npy(base / t.npy, _relative(display, t.npy), display, f"{where}.npy")
            inputs[name] = Raw(where, array=arr, dtype=t.dtype)
        else:
            inputs[name] = Raw(where, values=t.values, dtype=t.dtype, shape=tuple(t.shape) if t.shape else None)
    outputs: dict[str, Raw] = {}
    for name, o in (case.outputs or {}).items():
        where = f"{at}.outputs.{name}"
        if o.npy is not None:
            outputs[name] = Raw(where, array=_npy(base / o.npy, _relative(display, o.npy), display, f"{where}.npy"),
                                 dtype=o.dtype)
        elif o.values is not None:
            outputs[name] = Raw(where, values=o.values, dtype=o.dtype, shape=tuple(o.shape) if o.shape else None)
    return LoadedCase(index, case, [inputs], [outputs], where=[f"{at}.inputs"])


def read_document_or_case_error(path: Path, shown: str, file: str, where: str) -> Any:
    try:
        return read_document(path, shown)
    except SuiteError as exc:
        raise SuiteError(file, where, f"{shown}: {exc.message}") from None


def load_suite(path: Path, display: str) -> LoadedSuite:
    """Parse, schema-check and read the files of one suite; SuiteError (one line) on the first problem."""
    doc = read_document(path, display)
    if not isinstance(doc, dict):
        raise SuiteError(display, "", "a suite is a mapping with model and cases")
    try:
        suite = Suite.model_validate(doc)
    except ValidationError as exc:
        where, message = first_error(exc)
        raise SuiteError(display, where, message) from None
    model = suite.model or path.stem
    if suite.model is None and not NAME.match(model):
        raise SuiteError(display, "model", f"the file name {path.stem!r} is not a model name; set model")
    cases = [_load_case(i, c, path, display) for i, c in enumerate(suite.cases)]
    version = "" if suite.version is None else str(suite.version)
    return LoadedSuite(path, display, suite, model, version, cases)


def load_all(paths: list[str]) -> tuple[list[LoadedSuite], list[SuiteError]]:
    """Every suite under ``paths``; a bad suite does not stop the others from being checked."""
    suites: list[LoadedSuite] = []
    errors: list[SuiteError] = []
    for path, display in discover(paths):
        try:
            suites.append(load_suite(path, display))
        except SuiteError as exc:
            errors.append(exc)
    return suites, errors
