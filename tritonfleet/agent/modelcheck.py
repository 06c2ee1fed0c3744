"""Can this host's Triton image load the Neuron models of a staged version? (the runtime -> model link, host side)

Before the sync switches ``current`` (``sync.py``), each model of the version about to be served is read with
:mod:`tritonfleet.agent.artifacts` (the compiler and NEFF versions of its artifacts, the strictest one kept by
:func:`~tritonfleet.agent.artifacts.summarize`) and judged against the *limits* of the image: a JSON file the
models role writes (``/etc/tritonfleet/model-compat.json``), computed on the controller by
``tritonfleet.compat.model_limits`` from the image's ``aws-neuronx-runtime-lib`` and the host's architecture. The
rule stays there; this module applies it without the table, giving the verdict, line and fix
``tritonfleet.compat.check_model`` gives (tests/unit/test_compat_limits.py holds the two equal), e.g.::

    model bert: compiled by neuronx-cc 2.27.5334.0 (NEFF 2.0), needs runtime >= 2.34 (Neuron SDK 2.32.0); the
    image has 2.33.10.0: set neuron_sdk_release to 2.32.0 or later, or recompile with the image's compiler
    (neuronx-cc 2.26.6360.0)

Verdicts: ``ok``; ``warn`` for anything unknown (no compiler version in the artifacts, a compiler or NEFF
version the table does not have, an unknown runtime); ``fail`` when the image cannot load the model. A model
without Neuron artifacts (a CPU or python-backend model) gets no line. Standard library only (the agent runs on
the hosts, Python 3.9 to 3.12).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artifacts import KIND_UNKNOWN, NEURON_CC, NEURONX_CC, ArtifactInfo, scan_model, summarize

#: the limits' format this agent reads (``tritonfleet.compat.MODEL_LIMITS_FORMAT``)
FORMAT = 1
OK = "ok"
WARN = "warn"
FAIL = "fail"
VERDICTS = (OK, WARN, FAIL)
RUNTIME_LIB = "aws-neuronx-runtime-lib"
MAX_LIMITS_BYTES = 64 * 1024  # a larger limits file is refused

_VERSION = re.compile(r"^\s*(?:\d+:)?(\d+(?:\.\d+)*)(?:\.\*|\*)?(?:[-+~].*)?\s*$")


class LimitsError(ValueError):
    """The limits file cannot be read or is not limits of :data:`FORMAT` (one line)."""


def _parts(text: object) -> tuple[int, ...] | None:
    """The numbers of a dotted version (``2.16.345.0+4a9b`` -> (2, 16, 345, 0)); None for anything else (as
    ``tritonfleet.compat.parse_version`` reads versions)."""
    if not isinstance(text, str):
        return None
    m = _VERSION.match(text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _key(parts: tuple[int, ...]) -> tuple[int, ...]:
    """Equal versions have equal keys: trailing zeros do not count (2.0 == 2)."""
    out = list(parts)
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)


def _series(parts: tuple[int, ...], n: int = 2) -> tuple[int, ...]:
    """The first ``n`` numbers, zero-padded (2.34.10.0 -> (2, 34)), as ``compat.Version.series``."""
    return (parts + (0,) * n)[:n]


@dataclass(frozen=True)
class Release:
    """One Neuron SDK release for neuronx-cc models: its compiler, its runtime series, and whether the image's
    runtime is at least (``loads``) or newer than (``newer``) that runtime."""

    sdk: str
    compiler: str
    runtime: str
    loads: bool
    newer: bool

    @property
    def series(self) -> tuple[int, ...]:
        """The release's neuronx-cc major.minor."""
        return _series(_parts(self.compiler) or ())


@dataclass(frozen=True)
class Limits:
    """What the image loads (``tritonfleet.compat.model_limits``, read by :func:`limits_from_dict`)."""

    runtime: str | None
    neuron_arch: str | None
    sdk_release: str | None
    runtime_known: bool
    neff_versions: tuple[str, ...]
    compiler_archs: Mapping[str, tuple[str, ...]]
    inf1_support: bool
    neuron_cc_builds: tuple[tuple[int, ...], ...]
    neuron_cc_newest: str
    image_compiler: str | None
    releases: tuple[Release, ...]  # oldest first


@dataclass(frozen=True)
class Line:
    """One model judged: ``str(line)`` is ``"model <name>: <line>[: <fix>]"``, as ``compat.Finding`` prints;
    ``artifact`` is the file judged, relative to the model directory."""

    model: str
    verdict: str
    line: str
    fix: str | None = None
    artifact: str | None = None

    def __str__(self) -> str:
        text = f"model {self.model}: {self.line}"
        return f"{text}: {self.fix}" if self.fix else text


def _field(data: Mapping[str, Any], name: str, kind: Any, optional: bool = False) -> Any:
    """``data[name]`` when it is a ``kind`` (or missing/null and ``optional``); else :class:`LimitsError`."""
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise LimitsError(f"{name}: expected {getattr(kind, '__name__', kind)}, got {value!r}"[:200])
    return value


def _strings(value: Any, name: str) -> tuple[str, ...]:
    """``value`` when it is a list of strings (as a tuple); else :class:`LimitsError` naming ``name``."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise LimitsError(f"{name}: expected a list of strings")
    return tuple(value)


def limits_from_dict(data: Any) -> Limits:
    """The limits of ``tritonfleet.compat.model_limits``' dict; :class:`LimitsError` for anything else."""
    if not isinstance(data, dict):
        raise LimitsError("not a JSON object")
    if data.get("format") != FORMAT or isinstance(data.get("format"), bool):
        raise LimitsError(f"format {data.get('format')!r}, this agent reads format {FORMAT}")
    cc = _field(data, "neuron_cc", dict)
    ncc = _field(data, "neuronx_cc", dict)
    archs = _field(data, "compiler_archs", dict)
    builds = _field(cc, "builds", list)
    if not all(isinstance(b, list) and b and all(isinstance(n, int) and not isinstance(n, bool) for n in b)
               for b in builds):
        raise LimitsError("neuron_cc.builds: expected lists of numbers")
    releases = []
    for row in _field(ncc, "releases", list):
        if not isinstance(row, dict):
            raise LimitsError("neuronx_cc.releases: expected objects")
        release = Release(_field(row, "sdk", str), _field(row, "compiler", str), _field(row, "runtime", str),
                          _field(row, "loads", bool), _field(row, "newer", bool))
        if _parts(release.compiler) is None:
            raise LimitsError(f"neuronx_cc.releases: compiler {release.compiler!r} is not a version")
        releases.append(release)
    return Limits(
        runtime=_field(data, "runtime", str, optional=True),
        neuron_arch=_field(data, "neuron_arch", str, optional=True),
        sdk_release=_field(data, "sdk_release", str, optional=True),
        runtime_known=_field(data, "runtime_known", bool),
        neff_versions=_strings(data.get("neff_versions"), "neff_versions"),
        compiler_archs={str(k): _strings(v, f"compiler_archs.{k}") for k, v in archs.items()},
        inf1_support=_field(cc, "inf1_support", bool),
        neuron_cc_builds=tuple(tuple(b) for b in builds),
        neuron_cc_newest=_field(cc, "newest", str),
        image_compiler=_field(ncc, "image_compiler", str, optional=True),
        releases=tuple(releases),
    )


def load_limits(path: str | os.PathLike[str]) -> Limits:
    """The limits file (JSON) at ``path``; :class:`LimitsError` (one line) when it cannot be used."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_LIMITS_BYTES + 1)
    except OSError as exc:
        raise LimitsError(f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_LIMITS_BYTES:
        raise LimitsError(f"larger than {MAX_LIMITS_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise LimitsError(f"not JSON ({' '.join(str(exc).split())})") from None
    return limits_from_dict(data)


def judge(model: str, info: ArtifactInfo, limits: Limits) -> Line:
    """The runtime -> model link for ``model`` whose strictest artifact is ``info``: the same decision, line and
    fix as ``tritonfleet.compat.check_model(model, info, limits.runtime, neuron_arch=limits.neuron_arch)``."""

    def line(verdict: str, text: str, fix: str | None = None) -> Line:
        return Line(model, verdict, text, fix, info.path)

    compiler, version, neff = info.compiler, info.compiler_version, info.neff_version
    runtime, arch = limits.runtime, limits.neuron_arch
    neff_text = f" (NEFF {neff})" if neff else ""
    built = f"compiled by {compiler} {version}{neff_text}" if compiler and version else ""
    archs = limits.compiler_archs
    if arch and compiler is not None and compiler in archs and arch not in archs[compiler]:
        other = NEURON_CC if arch == "inf1" else NEURONX_CC
        return line(FAIL, f"{built or f'compiled by {compiler}'} for {'/'.join(archs[compiler])}; the host is {arch}",
                    f"recompile with {other} for {arch}")
    neff_note = ""
    if neff:
        n = _parts(neff)
        if n is None or not any(_key(n) == _key(_parts(k) or ()) for k in limits.neff_versions):
            neff_note = f"; NEFF {neff} is not in the NEFF support table ({', '.join(limits.neff_versions)})"
    if not compiler or not version:
        what = f"NEFF {neff}" if neff else "nothing"
        return line(WARN, f"no compiler version found ({what} read from {info.source}, {info.kind}){neff_note}",
                    "recompile with the image's compiler, or keep the compiler version with the model")
    v = _parts(version)
    if v is None or compiler not in archs:
        return line(WARN, f"cannot judge {compiler} {version} ({info.source})",
                    f"recompile with {NEURONX_CC} or {NEURON_CC} of a release in tritonfleet/compatchain.py CHAIN")
    if compiler == NEURON_CC:
        if not limits.inf1_support:
            return line(FAIL, f"{built}, an Inf1 model; {RUNTIME_LIB} {runtime} has no Inf1 support",
                        f"serve it on inf1 with the runtime inside torch-neuron, or recompile with {NEURONX_CC}")
        if not any(v[:len(b)] == b for b in limits.neuron_cc_builds):
            return line(WARN, f"{built}, which is not in the compatibility table{neff_note}",
                        f"recompile with {NEURON_CC} {limits.neuron_cc_newest}")
        return line(WARN if neff_note else OK, f"{built}, the Inf1 compiler of the table's releases{neff_note}",
                    "recompile with the image's compiler" if neff_note else None)
    if not limits.runtime_known:
        return line(WARN, f"{built}; the image's {RUNTIME_LIB} version is unknown",
                    "declare it with the image label or triton_neuron_runtime_version")
    c = _series(v)
    image_compiler = f" ({NEURONX_CC} {limits.image_compiler})" if limits.image_compiler else ""
    exact = [row for row in limits.releases if row.series == c]
    if exact:
        row = exact[0]
        needs = f"{built}, needs runtime >= {row.runtime} (Neuron SDK {row.sdk})"
        if row.loads:
            return line(WARN if neff_note else OK, f"{needs}; the image has {runtime}{neff_note}",
                        "recompile with the image's compiler" if neff_note else None)
        return line(FAIL, f"{needs}; the image has {runtime}",
                    f"set neuron_sdk_release to {row.sdk} or later, or recompile with the image's "
                    f"compiler{image_compiler}")
    older = [row for row in limits.releases if row.series < c]
    newer = [row for row in limits.releases if row.series > c]
    if older and not older[-1].newer:
        low = older[-1]
        return line(FAIL, f"{built}, newer than {NEURONX_CC} {low.compiler} of Neuron SDK {low.sdk}, needs a runtime "
                          f"newer than {low.runtime}; the image has {runtime}",
                    f"set neuron_sdk_release to a release after {low.sdk}, or recompile with the image's "
                    f"compiler{image_compiler}")
    where = (f"between Neuron SDK {older[-1].sdk} and {newer[0].sdk}" if older and newer
             else f"newer than Neuron SDK {older[-1].sdk}'s" if older else f"older than Neuron SDK {newer[0].sdk}'s")
    return line(WARN, f"{built} is not in the compatibility table ({where}), so the runtime it needs is unknown; "
                      f"the image has {runtime}{neff_note}",
                f"add its Neuron SDK release to tritonfleet/compatchain.py CHAIN, or recompile with the image's "
                f"compiler{image_compiler}")


def _neuron_artifact(info: ArtifactInfo) -> bool:
    """An artifact that is (or claims to be) a Neuron one, even when its versions could not be read."""
    return info.kind != KIND_UNKNOWN or info.compiler is not None or info.path.lower().endswith(".neff")


def check_model_dir(model_dir: str | os.PathLike[str], model: str, limits: Limits) -> Line | None:
    """``model`` (its directory) judged by its strictest artifact; None when it has no Neuron artifact. A Neuron
    artifact whose versions could not be read is judged as it is: a warning (never a silent pass)."""
    infos = scan_model(Path(model_dir))
    best = summarize(infos)
    if best is None:
        best = next((i for i in infos if _neuron_artifact(i)), None)
    return judge(model, best, limits) if best is not None else None


def check_staged(staged_dir: str | os.PathLike[str], models: Iterable[str] | None, limits: Limits) -> list[Line]:
    """One :class:`Line` per model of the staged tree that has Neuron artifacts (sorted by name): ``models``
    names them (those absent from the tree are skipped), None means every model directory of the tree."""
    root = Path(staged_dir)
    present = sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and p.is_dir()
                     and not p.is_symlink())
    wanted = present if models is None else sorted(set(models) & set(present))
    lines = []
    for name in wanted:
        found = check_model_dir(root / name, name, limits)
        if found is not None:
            lines.append(found)
    return lines


def worst(lines: Iterable[Line]) -> str:
    """The worst verdict of ``lines`` (:data:`OK` for none)."""
    return max((line.verdict for line in lines), key=VERDICTS.index, default=OK)
