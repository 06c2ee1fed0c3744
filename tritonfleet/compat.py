"""Neuron SDK versions table and the host-driver / container-runtime compatibility gate.

Rule (neuron-ec2.md §4.4, SDK:neuron-runtime/nrt-troubleshoot.rst): the driver stays backwards compatible
with older runtimes, but a newer runtime may need a newer driver. So the host's ``aws-neuronx-dkms`` must be
at least the driver released in the same Neuron SDK release as the container's ``aws-neuronx-runtime-lib``.
Upgrade the host driver first, then roll containers.

Inf1: the last driver that supports Inf1 is 2.24 (pin ``aws-neuronx-dkms=2.24.*``, neuron-ec2.md §1.5), so
an Inf1 host cannot run a runtime newer than the one of SDK 2.26.0 (the last release shipping a 2.24 driver).

The table is data, not constants: add a row per Neuron SDK release (versions from the SDK release notes,
``release-notes/components/runtime.rst``).

The second half of the module is the whole compatibility chain (docs/compatibility.md): :data:`CHAIN`, one
:class:`ReleaseChain` per Neuron SDK release (kernels the driver was tested on, the driver/runtime range, NEFF
and compiler versions the runtime loads, framework versions), :data:`NGC_TRITON` for GPU hosts (CUDA and the
driver branch each NGC Triton release needs), each datum with its source; and the pure rules over them
(:func:`check_kernel`, :func:`check_driver_runtime_finding`, :func:`check_model`, :func:`check_framework`,
:func:`check_gpu`), which return a one-line :class:`Finding` per link: ok, warn (anything unknown) or fail.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import total_ordering
from typing import Any, Protocol

# the chain's data (tritonfleet/compatchain.py), read by the rules below and re-exported from here
from tritonfleet.compatchain import (  # noqa: F401
    _NEFF_ALL,
    _SRC_COMPAT_IDS,
    _SRC_INF1_RUNTIME,
    _SRC_KERNEL_MIN,
    CHAIN,
    COMPILER_ARCHS,
    DRIVER_COMPAT_IDS,
    DRIVER_RUNTIME,
    FAIL,
    FRAMEWORK_KEY_PARTS,
    FRAMEWORK_RUNTIME,
    GPU_DRIVER_IMAGE,
    INF1,
    INF1_PACKAGES,
    INF1_RUNTIME_REMOVED,
    KERNEL_BREAKS,
    KERNEL_DRIVER,
    KERNEL_MIN,
    NEURON_CC,
    NEURON_LINKS,
    NEURONX_CC,
    NGC_TRITON,
    OK,
    RUNTIME_MODEL,
    TENSORFLOW_NEURON,
    TORCH_NEURON,
    TORCH_NEURONX,
    VERDICTS,
    WARN,
    GpuChain,
    KernelBreak,
    ReleaseChain,
)

__all__ = [
    "Version",
    "parse_version",
    "NEURON_RELEASES",
    "DEFAULT_SDK_RELEASE",
    "INF1_DKMS_PIN",
    "DKMS",
    "RUNTIME_LIB",
    "COLLECTIVES",
    "TOOLS",
    "CompatibilityError",
    "release_for_runtime",
    "min_driver_for_runtime",
    "check_driver_runtime",
    "driver_pin",
    "version_pin",
    "at_least",
    # the compatibility chain (docs/compatibility.md)
    "OK",
    "WARN",
    "FAIL",
    "VERDICTS",
    "KERNEL_DRIVER",
    "DRIVER_RUNTIME",
    "RUNTIME_MODEL",
    "FRAMEWORK_RUNTIME",
    "GPU_DRIVER_IMAGE",
    "NEURON_LINKS",
    "INF1",
    "NEURONX_CC",
    "NEURON_CC",
    "TORCH_NEURONX",
    "TORCH_NEURON",
    "TENSORFLOW_NEURON",
    "COMPILER_ARCHS",
    "INF1_PACKAGES",
    "FRAMEWORK_KEY_PARTS",
    "KERNEL_MIN",
    "INF1_RUNTIME_REMOVED",
    "KernelBreak",
    "KERNEL_BREAKS",
    "DRIVER_COMPAT_IDS",
    "ReleaseChain",
    "CHAIN",
    "GpuChain",
    "NGC_TRITON",
    "Finding",
    "worst",
    "ArtifactInfo",
    "chain_releases",
    "chain_for_release",
    "chain_for_runtime",
    "chain_for_driver",
    "releases_for_package",
    "check_kernel",
    "check_driver_runtime_finding",
    "parse_compat_id_error",
    "check_compat_id",
    "check_model",
    "MODEL_LIMITS_FORMAT",
    "model_limits",
    "check_framework",
    "ngc_release_of",
    "check_gpu",
]

DKMS = "aws-neuronx-dkms"
RUNTIME_LIB = "aws-neuronx-runtime-lib"
COLLECTIVES = "aws-neuronx-collectives"
TOOLS = "aws-neuronx-tools"

#: Neuron SDK release -> component package versions (neuron-ec2.md §1.7). Components the notes do not give
#: are omitted; two-part values ("2.33") are the precision the notes give.
NEURON_RELEASES: dict[str, dict[str, str]] = {
    "2.32.0": {DKMS: "2.30.2.0", RUNTIME_LIB: "2.34.10.0", COLLECTIVES: "2.34.10.0", TOOLS: "2.32.28.0"},
    "2.31.0": {DKMS: "2.29", RUNTIME_LIB: "2.33"},
    "2.30.0": {DKMS: "2.28.0.0", RUNTIME_LIB: "2.32.31.0"},
    "2.29.0": {DKMS: "2.27.4.0", RUNTIME_LIB: "2.31.24.0"},
    # the release shipped 2.26.5.0; 2.26.10.0 is a later patch of the same driver line
    "2.28.0": {DKMS: "2.26.5.0", RUNTIME_LIB: "2.30.50.0"},
    # 2.24.13.0 is the later Inf1 patch (kernel 6.18) of this driver line
    "2.26.0": {DKMS: "2.24.7.0", RUNTIME_LIB: "2.28.19.0"},
    # runtime 2.23.110 (and .112); this release removed Inf1 support from the runtime library
    "2.21.0": {RUNTIME_LIB: "2.23.110"},
}

DEFAULT_SDK_RELEASE = "2.32.0"

#: pip packages baked into a built Triton image, pinned so that one Dockerfile (one image tag) always
#: resolves to the same frameworks. inf2/trn: the SDK 2.32 documentation's pins (torch-neuronx is the 2.31
#: build; 2.32.0 shipped none). inf1: the frozen last series (Inf1 frameworks get no new releases).
FRAMEWORK_PINS: dict[str, list[str]] = {
    "inf1": ["torch-neuron==1.13.1.*", "neuron-cc[tensorflow]==1.*"],
    "neuronx": ["torch-neuronx==2.9.0.2.15.32035", "neuronx-cc==2.27.5334.0"],
}

#: Last aws-neuronx-dkms line that supports Inf1 (correction announcement 2026-03-12, neuron-ec2.md §1.5).
INF1_DKMS_PIN = "2.24.*"

_VERSION_RE = re.compile(r"^\s*(?:\d+:)?(\d+(?:\.\d+)*)(\.\*|\*)?(?:[-+~].*)?\s*$")


@total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A dotted numeric version, e.g. ``2.30.2.0``; ``wildcard`` is True for a pin such as ``2.24.*``.

    Ordering and equality use the numeric parts with trailing zeros ignored (``2.24 == 2.24.0.0``); a
    wildcard pin compares as its prefix. Use :func:`at_least` for "does this (possibly wildcard) version
    satisfy a minimum".
    """

    parts: tuple[int, ...]
    wildcard: bool = False
    text: str = ""

    @property
    def _key(self) -> tuple[int, ...]:
        parts = list(self.parts)
        while parts and parts[-1] == 0:
            parts.pop()
        return tuple(parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key == other._key

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key < other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        return ".".join(map(str, self.parts)) + (".*" if self.wildcard else "")

    def matches(self, pin: Version | str) -> bool:
        """True if this version is selected by ``pin`` (``2.24.13.0`` matches ``2.24.*`` and ``2.24.13.0*``)."""
        pin = parse_version(pin)
        if pin.wildcard:
            return self.parts[: len(pin.parts)] == pin.parts
        return self == pin

    def series(self, n: int = 2) -> tuple[int, ...]:
        """The first ``n`` parts, zero-padded (``2.34.10.0`` -> ``(2, 34)``)."""
        return (self.parts + (0,) * n)[:n]


def parse_version(text: str | Version) -> Version:
    """Parse ``2.30.2.0``, ``2.30.2.0-dkms``, ``2.24.*``, ``2.34.10.0*`` (a dpkg epoch ``1:`` is dropped)."""
    if isinstance(text, Version):
        return text
    if not isinstance(text, str):
        raise TypeError(f"version must be a string, not {type(text).__name__}")
    match = _VERSION_RE.match(text)
    if not match:
        raise ValueError(f"invalid version {text!r}")
    parts = tuple(int(p) for p in match.group(1).split("."))
    return Version(parts=parts, wildcard=match.group(2) is not None, text=text.strip())


def at_least(version: Version | str, minimum: Version | str) -> bool:
    """True if ``version`` is >= ``minimum``.

    A wildcard ``version`` (a pin such as ``2.24.*``) stands for the newest version with that prefix, so it is
    compared with ``minimum`` cut to the same length: ``2.24.*`` satisfies ``>= 2.24.7.0``.
    """
    v, m = parse_version(version), parse_version(minimum)
    if v.wildcard:
        n = len(v.parts)
        return v.parts >= (m.parts + (0,) * n)[:n]
    return v >= m


class CompatibilityError(ValueError):
    """The host driver is too old for the container's Neuron runtime (or cannot be upgraded, on Inf1)."""


def release_for_runtime(runtime_version: str) -> str | None:
    """The Neuron SDK release whose ``aws-neuronx-runtime-lib`` has the same major.minor as ``runtime_version``.

    Runtime-lib minor versions are unique per SDK release (2.34 -> 2.32.0, 2.33 -> 2.31.0, ...). None if the
    table has no such release.
    """
    wanted = parse_version(runtime_version).series(2)
    for release, components in NEURON_RELEASES.items():
        runtime = components.get(RUNTIME_LIB)
        if runtime is not None and parse_version(runtime).series(2) == wanted:
            return release
    return None


def min_driver_for_runtime(runtime_version: str) -> str | None:
    """The ``aws-neuronx-dkms`` version shipped in the same SDK release as ``runtime_version``.

    None if the runtime is not in :data:`NEURON_RELEASES` or the release's driver is not recorded (the
    caller may warn).
    """
    release = release_for_runtime(runtime_version)
    if release is None:
        return None
    return NEURON_RELEASES[release].get(DKMS)


def _sorted_releases() -> list[str]:
    return sorted(NEURON_RELEASES, key=lambda r: parse_version(r))


def _last_release_with_driver_in(pin: str) -> str | None:
    """Newest SDK release whose recorded driver matches ``pin`` (e.g. ``2.24.*`` -> ``2.26.0``)."""
    candidates = [r for r in _sorted_releases() if DKMS in NEURON_RELEASES[r]]
    matching = [r for r in candidates if parse_version(NEURON_RELEASES[r][DKMS]).matches(pin)]
    return matching[-1] if matching else None


def _driver_runtime_problem(
    driver_version: str, runtime_version: str, neuron_arch: str | None
) -> tuple[str, str] | None:
    """What is wrong between the host driver and the container runtime, as (what was found, what to do).

    The one implementation of the :func:`check_driver_runtime` rule; None when the pair is allowed (or the
    runtime is unknown). :func:`check_driver_runtime` joins the two parts with ``": "``.
    """
    driver = parse_version(driver_version)
    inf1 = neuron_arch == "inf1"
    if inf1 and not at_least(INF1_DKMS_PIN, driver):
        return (
            f"host driver {DKMS} {driver_version} does not support inf1 (the last inf1 driver is "
            f"{INF1_DKMS_PIN})",
            f"pin {DKMS}={INF1_DKMS_PIN} on inf1 hosts (deploys/neuron.py)",
        )
    minimum = min_driver_for_runtime(runtime_version)
    if minimum is None or at_least(driver, minimum):
        return None
    release = release_for_runtime(runtime_version)
    needs = (
        f"container runtime {RUNTIME_LIB} {runtime_version} (Neuron SDK {release}) needs host driver "
        f"{DKMS} >= {minimum}, host has {driver_version}"
    )
    if inf1:
        last = _last_release_with_driver_in(INF1_DKMS_PIN)
        return (
            needs,
            f"inf1 hosts cannot run a driver newer than {INF1_DKMS_PIN}, so use an image built for "
            f"Neuron SDK {last} or older",
        )
    return needs, "upgrade the host driver (deploys/neuron.py) or use an image built for an older Neuron SDK"


def check_driver_runtime(
    driver_version: str, runtime_version: str, *, neuron_arch: str | None = None
) -> None:
    """Raise :class:`CompatibilityError` unless the host driver can run the container's runtime-lib.

    ``driver_version`` is the host's ``aws-neuronx-dkms`` (e.g. ``2.30.2.0`` or ``2.30.2.0-dkms``, or a pin such
    as ``2.24.*``); ``runtime_version`` the container's ``aws-neuronx-runtime-lib``. With
    ``neuron_arch="inf1"`` the host driver cannot go past :data:`INF1_DKMS_PIN`, so the advice is to use an
    older image, and a host driver newer than 2.24 is itself an error. An unknown runtime is not an error
    (call :func:`min_driver_for_runtime` to warn about it, or :func:`check_driver_runtime_finding`, which
    also knows the rest of the chain and reports unknown versions as warnings).
    """
    problem = _driver_runtime_problem(driver_version, runtime_version, neuron_arch)
    if problem is not None:
        raise CompatibilityError(": ".join(problem))


def version_pin(version: str) -> str:
    """The apt/dnf version pattern that selects ``version``, matching whole components only.

    A full four-part version keeps a suffix open (``2.30.2.0`` -> ``2.30.2.0*``, for ``-dkms``-style
    revisions); a shorter one becomes a component prefix (``2.29`` -> ``2.29.*``, which does not match
    ``2.290``). A value that already is a pattern gets the same treatment (``2.24.*`` stays, ``2.26*``
    becomes ``2.26.*``, ``2.26.10.0*`` stays). This is the one rule for every package pin.
    """
    v = parse_version(version)
    text = ".".join(map(str, v.parts))
    return f"{text}*" if len(v.parts) >= 4 else f"{text}.*"


def driver_pin(neuron_arch: str | None, release: str = DEFAULT_SDK_RELEASE,
               releases: dict[str, dict[str, str]] | None = None, inf1_pin: str = INF1_DKMS_PIN) -> str:
    """The ``aws-neuronx-dkms`` apt/dnf version pin for a host: ``2.24.*`` on inf1, else the release's driver
    through :func:`version_pin`.

    Raises ``KeyError`` for a release not in the table or without a recorded driver.
    """
    if neuron_arch == "inf1":
        return inf1_pin
    return version_pin((releases or NEURON_RELEASES)[release][DKMS])


# ---------------------------------------------------------------------------------------------------------
# The compatibility chain (docs/compatibility.md): kernel -> driver -> runtime -> compiled model, the framework
# packages baked into the image -> runtime, and on GPU hosts the NVIDIA driver -> NGC Triton image.
#
# Citations ("sources") use these prefixes, so that each names a file a reader can open:
#   SDK:<path>           github.com/aws-neuron/aws-neuron-sdk at 81ce03ae261e (2026-08-21, docs of Neuron 2.32.0)
#   SDK@<commit>:<path>  the same repository at an older commit (pages the 2.28.0 restructure removed)
#   DRV:<path>           github.com/aws-neuron/aws-neuron-driver at fca19f7df31b (aws-neuronx-dkms 2.24.7.0 sources)
#   <owner>/<repo>#<n>   a GitHub issue;  <owner>/<repo>@<commit>:<path>  a file of another repository
#   https://...          a public page
# A datum no source confirms is left out (None or an empty tuple, said so in its source line), and the rules
# report it as unknown: a warning, never a silent pass.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One link of the chain judged for one subject (``"host inf2-a"``, ``"model bert"``).

    ``line`` says what was found and what is needed, ``fix`` what to do (None when there is nothing to do);
    both are one line. ``str(finding)`` is ``"<subject>: <line>: <fix>"``.
    """

    subject: str
    link: str
    verdict: str
    line: str
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.verdict!r}")
        if "\n" in self.line or (self.fix is not None and "\n" in self.fix):
            raise ValueError("a finding is one line")

    def __str__(self) -> str:
        text = f"{self.subject}: {self.line}"
        return f"{text}: {self.fix}" if self.fix else text


def worst(findings: Iterable[Finding]) -> str:
    """The worst verdict of ``findings`` (:data:`OK` for none)."""
    return max((f.verdict for f in findings), key=VERDICTS.index, default=OK)


class ArtifactInfo(Protocol):
    """What was read from a compiled model (the artifact reader's result satisfies this).

    ``compiler``: ``"neuronx-cc"``, ``"neuron-cc"`` or None; ``compiler_version`` and ``neff_version``
    (``"2.0"``) as read, None when not found; ``kind``: what the artifact is; ``source``: how it was read
    (shown in warnings). Callers pass Neuron artifacts only.
    """

    @property
    def compiler(self) -> str | None: ...

    @property
    def compiler_version(self) -> str | None: ...

    @property
    def neff_version(self) -> str | None: ...

    @property
    def kind(self) -> str: ...

    @property
    def source(self) -> str: ...


def _v(text: str | Version | None) -> Version | None:
    """``parse_version`` that answers None for what it cannot read."""
    if text is None:
        return None
    try:
        return parse_version(text)
    except (TypeError, ValueError):
        return None


def _series(version: str | Version, n: int = 2) -> tuple[int, ...]:
    return parse_version(version).series(n)


def _series_text(version: str | Version, n: int = 2) -> str:
    return ".".join(map(str, _series(version, n)))


def chain_releases() -> list[ReleaseChain]:
    """The rows of :data:`CHAIN`, oldest release first."""
    return sorted(CHAIN.values(), key=lambda row: parse_version(row.sdk))


def chain_for_release(sdk_release: str) -> ReleaseChain | None:
    """The chain of a Neuron SDK release (``"2.32.0"``, ``"2.32"``); None if the table does not have it."""
    wanted = _v(sdk_release)
    return next((row for row in CHAIN.values() if wanted is not None and parse_version(row.sdk) == wanted), None)


def chain_for_runtime(runtime_version: str) -> ReleaseChain | None:
    """The release whose ``aws-neuronx-runtime-lib`` has the same major.minor as ``runtime_version``."""
    wanted = _v(runtime_version)
    return next((row for row in CHAIN.values() if wanted is not None and _series(row.runtime) == wanted.series(2)),
                None)


def chain_for_driver(driver_version: str) -> ReleaseChain | None:
    """The release whose ``aws-neuronx-dkms`` line (major.minor) is that of ``driver_version`` (2.26.10.0 ->
    2.28.0, which shipped 2.26.5.0)."""
    wanted = _v(driver_version)
    return next((row for row in CHAIN.values() if wanted is not None and _series(row.driver) == wanted.series(2)),
                None)


def _package_versions(row: ReleaseChain, package: str) -> tuple[str, ...]:
    if package in row.compilers:
        return (row.compilers[package],)
    return row.frameworks.get(package, ())


def _package_key(package: str, version: str | Version) -> tuple[int, ...]:
    n = FRAMEWORK_KEY_PARTS.get(package, 2)
    return tuple(parse_version(version).parts[:n])


def releases_for_package(package: str, version: str) -> list[ReleaseChain]:
    """Releases (oldest first) that ship ``package`` (a compiler or framework of :data:`FRAMEWORK_KEY_PARTS`)
    at ``version``'s Neuron build (``torch-neuronx 2.9.0.2.13.26312`` -> 2.29.0, which shipped 2.9.0.2.13.24727)."""
    wanted = _v(version)
    if wanted is None:
        return []
    key = _package_key(package, wanted)
    return [row for row in chain_releases() if any(_package_key(package, v) == key for v in
                                                   _package_versions(row, package))]


def _needed(brk: KernelBreak, driver: Version) -> str | None:
    """The fixed driver ``driver`` lacks for ``brk``, None if it has the fix."""
    same_line = [f for f in brk.fixed_in if _series(f) == driver.series(2)]
    newest = max(brk.fixed_in, key=parse_version)
    if any(at_least(driver, f) for f in same_line) or at_least(driver, newest):
        return None
    return same_line[0] if same_line else newest


def check_kernel(kernel: str, driver: str, dkms_built: bool | None, *, subject: str = "host") -> Finding:
    """The kernel -> driver link: does ``aws-neuronx-dkms`` ``driver`` build and work on ``kernel``?

    ``kernel`` as ``uname -r`` prints it; ``dkms_built``: whether DKMS built the module for it (None: not
    known). Fails below :data:`KERNEL_MIN`, on a known break (:data:`KERNEL_BREAKS`) the driver has no fix for
    (a warning if the module built anyway) and when the module is not built; passes on a kernel the driver
    was tested on; warns on any other kernel and on a driver the table does not know.
    """

    def finding(verdict: str, line: str, fix: str | None = None) -> Finding:
        return Finding(subject, KERNEL_DRIVER, verdict, line, fix)

    k, d = _v(kernel), _v(driver)
    if k is None:
        return finding(WARN, f"cannot read the kernel version {kernel!r}", "check `uname -r` on the host")
    if d is None:
        return finding(WARN, f"cannot read the {DKMS} version {driver!r}", f"check `dpkg -s {DKMS}` on the host")
    series = _series_text(k)
    if k.series(2) < _series(KERNEL_MIN):
        return finding(FAIL, f"kernel {kernel} is older than {KERNEL_MIN}, the oldest the Neuron driver supports",
                       f"boot a kernel {KERNEL_MIN} or newer (AL2: the kernel-5.10 extra)")
    for brk in sorted(KERNEL_BREAKS, key=lambda b: parse_version(b.kernel), reverse=True):
        needed = _needed(brk, d) if k.series(2) >= _series(brk.kernel) else None
        if needed is not None:
            built = "; DKMS built it all the same, check dmesg" if dkms_built else ""
            return finding(
                WARN if dkms_built else FAIL,
                f"kernel {kernel} needs {DKMS} {needed} or later ({brk.what}); the host has {driver}{built}",
                f"upgrade {DKMS} to {needed} or later, or boot a kernel older than {brk.kernel}",
            )
    if dkms_built is False:
        return finding(FAIL, f"{DKMS} {driver} is not built for kernel {kernel}",
                       f"install the kernel headers (linux-headers-$(uname -r)) and reinstall {DKMS}")
    row = chain_for_driver(driver)
    if row is None:
        return finding(WARN, f"{DKMS} {driver} is not in the compatibility table, so the kernels it supports are "
                             f"unknown (kernel {kernel})",
                       "add its Neuron SDK release to tritonfleet/compatchain.py CHAIN, or set neuron_sdk_release to "
                       f"{DEFAULT_SDK_RELEASE}")
    if not row.kernels_tested:
        inf1_line = parse_version(row.driver).matches(INF1_DKMS_PIN)
        return finding(WARN, f"Neuron published no tested kernels for {DKMS} {row.driver} (Neuron SDK {row.sdk}); "
                             f"kernel {kernel} is untested",
                       "check the module with `dkms status` and dmesg" + (
                           f" (inf1 hosts stay on {DKMS} {INF1_DKMS_PIN})" if inf1_line else
                           ", or set neuron_sdk_release to a release with a published kernel table"))
    if series in row.kernels_tested:
        return finding(OK, f"kernel {kernel} is one {DKMS} {row.driver} (Neuron SDK {row.sdk}) was tested on")
    tested = ", ".join(row.kernels_tested)
    newer = [r for r in chain_releases()
             if series in r.kernels_tested and parse_version(r.sdk) > parse_version(row.sdk)]
    fix = (f"set neuron_sdk_release to {newer[0].sdk} (tested on {series}), or boot a tested kernel" if newer
           else "boot a tested kernel, or check the module with `dkms status` and dmesg")
    return finding(WARN, f"kernel {series} is not one {DKMS} {row.driver} (Neuron SDK {row.sdk}) was tested on "
                         f"({tested})", fix)


def _driver_min_runtime(driver: Version) -> tuple[ReleaseChain, bool] | None:
    """The release whose driver needs the newest runtime among drivers up to ``driver``'s line, and whether
    that limit is published for ``driver``'s own line (True) or only inferred (compatibility ids only grow)."""
    limits = [row for row in chain_releases()
              if row.driver_min_runtime is not None and _series(row.driver) <= driver.series(2)]
    if not limits:
        return None
    row = max(limits, key=lambda r: parse_version(r.driver_min_runtime or "0"))
    return row, _series(row.driver) == driver.series(2)


def check_driver_runtime_finding(driver: str, runtime: str, neuron_arch: str | None = None, *,
                                 subject: str = "host") -> Finding:
    """The driver -> runtime link as a :class:`Finding`: :func:`check_driver_runtime`'s rule, plus what the
    chain knows beyond it: Inf1 has no ``aws-neuronx-runtime-lib`` from 2.23 on, the minimum runtime a driver
    accepts (driver 2.29 needs runtime 2.33), drivers :data:`NEURON_RELEASES` does not record, and a runtime the
    table does not know (a warning)."""

    def finding(verdict: str, line: str, fix: str | None = None) -> Finding:
        return Finding(subject, DRIVER_RUNTIME, verdict, line, fix)

    d, r = _v(driver), _v(runtime)
    if d is None:
        return finding(WARN, f"cannot read the host {DKMS} version {driver!r}", f"check `dpkg -s {DKMS}` on the host")
    if r is None:
        return finding(WARN, f"cannot read the image's {RUNTIME_LIB} version {runtime!r}",
                       "declare it with the image label or triton_neuron_runtime_version")
    problem = _driver_runtime_problem(driver, runtime, neuron_arch)
    if problem is not None:
        return finding(FAIL, *problem)
    if neuron_arch == "inf1" and at_least(r, INF1_RUNTIME_REMOVED):
        return finding(FAIL, f"{RUNTIME_LIB} {runtime} has no Inf1 support (removed in {INF1_RUNTIME_REMOVED}, "
                             "Neuron SDK 2.21.0)",
                       f"inf1 images use the runtime inside torch-neuron/tensorflow-neuron, without {RUNTIME_LIB}")
    row = chain_for_runtime(runtime)
    if row is None:
        newest = chain_releases()[-1]
        age = "newer than any release" if r.series(2) > _series(newest.runtime) else "not a release"
        return finding(WARN, f"{RUNTIME_LIB} {runtime} is {age} in the compatibility table (newest: {newest.runtime}, "
                             f"Neuron SDK {newest.sdk}), so the driver it needs is unknown; the host has {driver}",
                       "add its Neuron SDK release to tritonfleet/compat.py NEURON_RELEASES and tritonfleet/compatchain.py CHAIN, or use an "
                       "image built for a release in the table")
    needs = f"{RUNTIME_LIB} {runtime} (Neuron SDK {row.sdk}) needs {DKMS} >= {row.runtime_min_driver}"
    if not at_least(d, row.runtime_min_driver):
        return finding(FAIL, f"{needs}, the host has {driver}",
                       "upgrade the host driver (deploys/neuron.py) or use an image built for an older Neuron SDK")
    limit = _driver_min_runtime(d)
    if limit is not None and r.series(2) < _series(limit[0].driver_min_runtime or "0"):
        lim, published = limit
        fix = (f"rebuild the image for Neuron SDK {lim.sdk} or later (neuron_sdk_release), or keep the host on "
               f"an older driver")
        if published:
            return finding(FAIL, f"{DKMS} {driver} needs {RUNTIME_LIB} >= {lim.driver_min_runtime} (Neuron SDK "
                                 f"{lim.sdk} known issue); the image has {runtime}", fix)
        return finding(WARN, f"{DKMS} {lim.driver} needs {RUNTIME_LIB} >= {lim.driver_min_runtime} (Neuron SDK "
                             f"{lim.sdk} known issue) and runtime compatibility ids only grow, so {driver} likely "
                             f"does too; the image has {runtime}", fix)
    return finding(OK, f"{needs}; the host has {driver}")


def parse_compat_id_error(text: str) -> tuple[int, int, int] | None:
    """(runtime id, lowest, highest accepted) from the runtime's refusal, aws-neuron/aws-neuron-sdk#655:
    ``This Neuron Runtime (compatibility id: 6) is not compatible with the installed aws-neuron-dkms package``
    ... ``supports Runtime compatibility id range: 2 - 4``; None if ``text`` does not hold both."""
    ident = re.search(r"compatibility id:\s*(\d+)", text)
    span = re.search(r"compatibility id range:\s*(\d+)\s*-\s*(\d+)", text)
    if ident is None or span is None:
        return None
    return int(ident.group(1)), int(span.group(1)), int(span.group(2))


def check_compat_id(runtime_id: int, driver: str, neuron_arch: str, *,
                    supported: tuple[int, int] | None = None, subject: str = "host") -> Finding:
    """The driver -> runtime link by compatibility id: is ``runtime_id`` within the ids ``driver`` accepts on
    ``neuron_arch``? ``supported`` is the range the runtime's message reported (:func:`parse_compat_id_error`);
    without it the range comes from :data:`DRIVER_COMPAT_IDS` (unknown for most drivers: a warning)."""
    span = supported or DRIVER_COMPAT_IDS.get(driver, {}).get(neuron_arch)
    if span is None:
        return Finding(subject, DRIVER_RUNTIME, WARN,
                       f"the runtime compatibility ids {DKMS} {driver} accepts on {neuron_arch} are not published",
                       "compare the runtime's own message (compatibility id range) or the release notes")
    low, high = span
    line = f"runtime compatibility id {runtime_id}, {DKMS} {driver} accepts {low}-{high} on {neuron_arch}"
    if low <= runtime_id <= high:
        return Finding(subject, DRIVER_RUNTIME, OK, line)
    fix = ("upgrade the host driver and reload the module (rmmod neuron; modprobe neuron)" if runtime_id > high
           else "use an image with a newer runtime")
    return Finding(subject, DRIVER_RUNTIME, FAIL, line, fix)


def _neff_known(row: ReleaseChain | None) -> tuple[str, ...]:
    """The NEFF versions the runtime of ``row`` loads; without a row, those of any release in the table."""
    return row.neff_versions if row is not None else tuple(sorted(
        {n for r in CHAIN.values() for n in r.neff_versions}, key=parse_version))


def _neff_supported(neff: str, row: ReleaseChain | None) -> tuple[bool, tuple[str, ...]]:
    known = _neff_known(row)
    v = _v(neff)
    return v is not None and any(v == parse_version(n) for n in known), known


def check_model(model: str, info: ArtifactInfo, runtime: str | None, *, neuron_arch: str | None = None,
                subject: str | None = None) -> Finding:
    """The runtime -> model link: can the image's ``aws-neuronx-runtime-lib`` ``runtime`` load ``model``?

    A model compiled by ``neuronx-cc`` of release R needs the runtime of R or later (Neuron tests each
    compiler with its release's runtime; a newer NEFF fails on an older runtime, SDK:nrt-troubleshoot.rst). A
    compiler version between two rows of the table is judged by the rows around it; one outside the table, a
    NEFF version outside the NEFF support table, or no compiler version is a warning. ``neuron_arch`` also
    checks the compiler against the host (neuron-cc: inf1 only; neuronx-cc: not inf1). ``runtime`` None: the
    image's runtime is unknown (or, on inf1, inside the framework).
    """
    subject = subject or f"model {model}"

    def finding(verdict: str, line: str, fix: str | None = None) -> Finding:
        return Finding(subject, RUNTIME_MODEL, verdict, line, fix)

    compiler, version, neff = info.compiler, info.compiler_version, info.neff_version
    neff_text = f" (NEFF {neff})" if neff else ""
    built = f"compiled by {compiler} {version}{neff_text}" if compiler and version else ""
    r = _v(runtime)
    r_row = chain_for_runtime(runtime) if runtime else None
    if neuron_arch and compiler in COMPILER_ARCHS and neuron_arch not in COMPILER_ARCHS[compiler]:
        other = NEURON_CC if neuron_arch == "inf1" else NEURONX_CC
        return finding(FAIL, f"{built or f'compiled by {compiler}'} for {'/'.join(COMPILER_ARCHS[compiler])}; the host "
                             f"is {neuron_arch}", f"recompile with {other} for {neuron_arch}")
    neff_ok, neff_known = _neff_supported(neff, r_row) if neff else (True, ())
    neff_note = "" if neff_ok else f"; NEFF {neff} is not in the NEFF support table ({', '.join(neff_known)})"
    if not compiler or not version:
        what = f"NEFF {neff}" if neff else "nothing"
        return finding(WARN, f"no compiler version found ({what} read from {info.source}, {info.kind}){neff_note}",
                       "recompile with the image's compiler, or keep the compiler version with the model")
    v = _v(version)
    if v is None or compiler not in COMPILER_ARCHS:
        return finding(WARN, f"cannot judge {compiler} {version} ({info.source})",
                       f"recompile with {NEURONX_CC} or {NEURON_CC} of a release in tritonfleet/compatchain.py CHAIN")
    if compiler == NEURON_CC:
        if runtime and r is not None and at_least(r, INF1_RUNTIME_REMOVED):
            return finding(FAIL, f"{built}, an Inf1 model; {RUNTIME_LIB} {runtime} has no Inf1 support",
                           f"serve it on inf1 with the runtime inside torch-neuron, or recompile with {NEURONX_CC}")
        if not releases_for_package(NEURON_CC, version):
            return finding(WARN, f"{built}, which is not in the compatibility table{neff_note}",
                           f"recompile with {NEURON_CC} {chain_releases()[-1].compilers[NEURON_CC]}")
        return finding(WARN if neff_note else OK, f"{built}, the Inf1 compiler of the table's releases{neff_note}",
                       "recompile with the image's compiler" if neff_note else None)
    if r is None:
        return finding(WARN, f"{built}; the image's {RUNTIME_LIB} version is unknown",
                       "declare it with the image label or triton_neuron_runtime_version")
    rows = chain_releases()
    c = v.series(2)
    exact = [row for row in rows if _series(row.compilers[NEURONX_CC]) == c]
    image_compiler = f" ({NEURONX_CC} {r_row.compilers[NEURONX_CC]})" if r_row else ""
    if exact:
        row = exact[0]
        needs = f"{built}, needs runtime >= {_series_text(row.runtime)} (Neuron SDK {row.sdk})"
        if r.series(2) >= _series(row.runtime):
            return finding(WARN if neff_note else OK, f"{needs}; the image has {runtime}{neff_note}",
                           "recompile with the image's compiler" if neff_note else None)
        return finding(FAIL, f"{needs}; the image has {runtime}",
                       f"set neuron_sdk_release to {row.sdk} or later, or recompile with the image's "
                       f"compiler{image_compiler}")
    older = [row for row in rows if _series(row.compilers[NEURONX_CC]) < c]
    newer = [row for row in rows if _series(row.compilers[NEURONX_CC]) > c]
    if older and r.series(2) <= _series(older[-1].runtime):
        low = older[-1]
        return finding(FAIL, f"{built}, newer than {NEURONX_CC} {low.compilers[NEURONX_CC]} of Neuron SDK {low.sdk}, "
                             f"needs a runtime newer than {_series_text(low.runtime)}; the image has {runtime}",
                       f"set neuron_sdk_release to a release after {low.sdk}, or recompile with the image's "
                       f"compiler{image_compiler}")
    where = (f"between Neuron SDK {older[-1].sdk} and {newer[0].sdk}" if older and newer
             else f"newer than Neuron SDK {older[-1].sdk}'s" if older else f"older than Neuron SDK {newer[0].sdk}'s")
    return finding(WARN, f"{built} is not in the compatibility table ({where}), so the runtime it needs is "
                         f"unknown; the image has {runtime}{neff_note}",
                   f"add its Neuron SDK release to tritonfleet/compatchain.py CHAIN, or recompile with the image's "
                   f"compiler{image_compiler}")


#: The format of :func:`model_limits`' dict; the host agent refuses limits of another format.
MODEL_LIMITS_FORMAT = 1


def model_limits(runtime: str | None, neuron_arch: str | None = None) -> dict[str, Any]:
    """:func:`check_model`'s decision for one image, as a JSON-able dict the host agent applies without the table.

    ``runtime`` and ``neuron_arch`` are what :func:`check_model` would be given (the image's
    ``aws-neuronx-runtime-lib``, None when unknown; the host's architecture). The agent
    (``tritonfleet/agent/modelcheck.py``, which cannot import this module) reads each Neuron model's compiler and
    NEFF versions from its artifacts before it switches ``current`` and judges them with this dict: the same
    verdict, line and fix as :func:`check_model` (tests/unit/test_compat_limits.py holds the two equal). What
    depends on the runtime is decided here; the agent only matches the artifact's versions::

        {"format": 1, "runtime": "2.34.10.0", "neuron_arch": "inf2", "sdk_release": "2.32.0",
         "runtime_known": true,                      # the runtime is a version (else neuronx-cc models warn)
         "neff_versions": ["0.6", "1.0", "2.0"],     # NEFF versions it loads (any release's when not in the table)
         "compiler_archs": {"neuron-cc": ["inf1"], "neuronx-cc": ["inf2", "trn1", "trn2"]},
         "neuron_cc": {"inf1_support": false,        # the runtime loads Inf1 (neuron-cc) models
                       "builds": [[1, 24]],          # neuron-cc builds (major.minor) of the table
                       "newest": "1.24.0.0"},
         "neuronx_cc": {"image_compiler": "2.27.5334.0",   # the compiler of the runtime's release, if known
                        "releases": [                       # oldest first
                          {"sdk": "2.21.0", "compiler": "2.16.345.0", "runtime": "2.23",
                           "loads": true,                   # the runtime is at least the release's
                           "newer": true}, ...]}}           # the runtime is newer than the release's

    An unknown runtime (None, or not a version) gives ``runtime_known`` false and no release that ``loads``:
    every neuronx-cc model is then a warning, as with :func:`check_model`; neuron-cc models on inf1 are judged
    by their compiler, the runtime being the framework's.
    """
    r = _v(runtime)
    r_row = chain_for_runtime(runtime) if runtime else None
    rows = chain_releases()
    inf1_removed = bool(runtime) and r is not None and at_least(r, INF1_RUNTIME_REMOVED)
    builds = sorted({_package_key(NEURON_CC, row.compilers[NEURON_CC]) for row in rows})
    return {
        "format": MODEL_LIMITS_FORMAT,
        "runtime": runtime,
        "neuron_arch": neuron_arch,
        "sdk_release": r_row.sdk if r_row else None,
        "runtime_known": r is not None,
        "neff_versions": list(_neff_known(r_row)),
        "compiler_archs": {name: list(archs) for name, archs in sorted(COMPILER_ARCHS.items())},
        "neuron_cc": {"inf1_support": not inf1_removed, "builds": [list(b) for b in builds],
                      "newest": rows[-1].compilers[NEURON_CC]},
        "neuronx_cc": {
            "image_compiler": r_row.compilers[NEURONX_CC] if r_row else None,
            "releases": [{"sdk": row.sdk, "compiler": row.compilers[NEURONX_CC], "runtime": _series_text(row.runtime),
                          "loads": r is not None and r.series(2) >= _series(row.runtime),
                          "newer": r is not None and r.series(2) > _series(row.runtime)} for row in rows],
        },
    }


def _framework_part(package: str, version: str, runtime: str | None, r_row: ReleaseChain | None
                    ) -> tuple[str, str, str | None]:
    """(verdict, what was found, fix) for one framework package of the image."""
    rows = releases_for_package(package, version)
    name = f"{package} {version}"
    r = _v(runtime)
    if package in INF1_PACKAGES and r is not None and at_least(r, INF1_RUNTIME_REMOVED):
        return (FAIL, f"{name} is an Inf1 package, and {RUNTIME_LIB} {runtime} has no Inf1 support",
                f"keep Inf1 frameworks on the runtime they bring: no {RUNTIME_LIB} in inf1 images")
    if not rows:
        return (WARN, f"{name} is not in the compatibility table",
                f"pin {package} from a Neuron SDK release in tritonfleet/compatchain.py CHAIN, or add its release")
    sdks = ", ".join(row.sdk for row in rows) if len(rows) < 3 else f"{rows[0].sdk} to {rows[-1].sdk}"
    if runtime is None:
        if package in INF1_PACKAGES:
            return OK, f"{name} (Neuron SDK {sdks}) brings its own runtime", None
        return (WARN, f"{name} (Neuron SDK {sdks}); the image's {RUNTIME_LIB} version is unknown",
                "declare it with the image label or triton_neuron_runtime_version")
    if r is None:
        return WARN, f"{name}; cannot read the runtime version {runtime!r}", "check the image's runtime label"
    if r_row is None:
        if r.series(2) < _series(rows[0].runtime):
            return (FAIL, f"{name} is from Neuron SDK {rows[0].sdk}, needs runtime >= {_series_text(rows[0].runtime)}; "
                          f"the image has {runtime}", f"set neuron_sdk_release to {rows[0].sdk} or later")
        return (WARN, f"{name} (Neuron SDK {sdks}); runtime {runtime} is not in the compatibility table",
                "add the runtime's Neuron SDK release to tritonfleet/compatchain.py CHAIN")
    if r_row in rows:
        return OK, f"{name} ships with Neuron SDK {r_row.sdk}, as does runtime {runtime}", None
    pinned = _package_versions(r_row, package)
    pin_fix = (f"pin {package}=={pinned[-1]} (Neuron SDK {r_row.sdk})" if pinned
               else f"use {package} and the runtime of one Neuron SDK release")
    if parse_version(rows[0].sdk) > parse_version(r_row.sdk):
        return (FAIL, f"{name} is from Neuron SDK {rows[0].sdk}, newer than runtime {runtime} (Neuron SDK "
                      f"{r_row.sdk}): it needs runtime >= {_series_text(rows[0].runtime)}",
                f"set neuron_sdk_release to {rows[0].sdk} or later, or {pin_fix}")
    return (WARN, f"{name} is from Neuron SDK {sdks}, runtime {runtime} from {r_row.sdk}: a framework is tested with "
                  "its own release's runtime (aws-neuron/aws-neuron-sdk#1071: one broke on the next runtime)",
            pin_fix)


def check_framework(framework_versions: Mapping[str, str], runtime: str | None, *,
                    subject: str = "image") -> Finding:
    """The framework -> runtime link: were the image's Neuron framework and compiler packages
    (``{"torch-neuronx": "2.9.0.2.15.32035", ...}``, names as pip spells them) released with its runtime?

    Same release: ok. A package newer than the runtime's release: fail. An older one: warning (Neuron tests a
    framework with its own release's runtime; aws-neuron/aws-neuron-sdk#1071 is one that broke). An Inf1
    package with a runtime-lib from 2.23 on: fail. Unknown packages are ignored; unknown versions warn.
    ``runtime`` None: not declared (or, for Inf1 packages, brought by the framework).
    """
    known = {name.lower().replace("_", "-"): version for name, version in framework_versions.items()}
    known = {name: version for name, version in known.items() if name in FRAMEWORK_KEY_PARTS}
    if not known:
        listed = ", ".join(sorted(framework_versions)) or "none"
        return Finding(subject, FRAMEWORK_RUNTIME, WARN,
                       f"no Neuron framework or compiler package among the image's packages ({listed})",
                       "check that the image was built with its Neuron framework pins (FRAMEWORK_PINS)")
    r_row = chain_for_runtime(runtime) if runtime else None
    parts = [_framework_part(name, known[name], runtime, r_row) for name in sorted(known)]
    verdict = max((p[0] for p in parts), key=VERDICTS.index)
    fix = next((p[2] for p in parts if p[0] == verdict and p[2]), None)
    return Finding(subject, FRAMEWORK_RUNTIME, verdict, "; ".join(p[1] for p in parts), fix)


_NGC_TAG_RE = re.compile(r"(?:^|[:/])(\d{2}\.\d{2})(?:[-.]|$)")


def ngc_release_of(image: str) -> str | None:
    """The NGC release (``"24.10"``) of ``24.10``, ``24.10-py3`` or ``nvcr.io/nvidia/tritonserver:24.10-py3``."""
    match = _NGC_TAG_RE.search(image.strip())
    return match.group(1) if match else None


def check_gpu(driver_version: str, ngc_release: str, *, datacenter_gpu: bool = True,
              subject: str = "host") -> Finding:
    """The GPU driver -> image link: can NVIDIA driver ``driver_version`` run NGC Triton ``ngc_release``
    (a release, tag or image reference)?

    Passes from the release's minimum driver on; below it, on a data center GPU (every EC2 GPU: T4, A10G, L4,
    L40S, A100, H100), passes on a forward-compatible branch the release notes list, warns on a branch they
    dispute, and fails otherwise (also when the release's forward-compatible branches are not confirmed). An
    NGC release the table does not know is a warning.
    """

    def finding(verdict: str, line: str, fix: str | None = None) -> Finding:
        return Finding(subject, GPU_DRIVER_IMAGE, verdict, line, fix)

    tag = ngc_release_of(ngc_release)
    row = NGC_TRITON.get(tag) if tag else None
    d = _v(driver_version)
    if d is None:
        return finding(WARN, f"cannot read the NVIDIA driver version {driver_version!r}",
                       "check nvidia-smi on the host")
    if row is None:
        known = ", ".join(sorted(NGC_TRITON))
        return finding(WARN, f"NGC Triton {ngc_release} is not in the compatibility table ({known}), so the driver "
                             f"it needs is unknown; the host has {driver_version}",
                       "add it to tritonfleet/compatchain.py NGC_TRITON from its release notes (Driver Requirements)")
    needs = f"NGC Triton {row.ngc} (CUDA {row.cuda}) needs NVIDIA driver >= {row.min_driver}"
    upgrade = f"upgrade the NVIDIA driver to R{row.min_driver} or later, or use an older NGC Triton release"
    if at_least(d, row.min_driver):
        return finding(OK, f"{needs}; the host has {driver_version}")
    if not datacenter_gpu:
        return finding(FAIL, f"{needs}; the host has {driver_version}", upgrade)
    if row.datacenter_compat is None:
        return finding(FAIL, f"{needs}; the host has {driver_version}, and which older branches it supports on data "
                             "center GPUs is not confirmed", upgrade)
    branch = d.parts[0]
    for lowest in row.disputed:
        if parse_version(lowest).parts[0] == branch:
            return finding(WARN, f"{needs}; the host has R{branch} {driver_version}, which the {row.ngc} release "
                                 "notes both allow on data center GPUs and ask to upgrade from", upgrade)
    for lowest in row.datacenter_compat:
        if parse_version(lowest).parts[0] == branch:
            if at_least(d, lowest):
                return finding(OK, f"{needs}, or R{branch} >= {lowest} on a data center GPU (CUDA forward "
                                   f"compatibility); the host has {driver_version}")
            return finding(FAIL, f"{needs}, or R{branch} >= {lowest} on a data center GPU; the host has "
                                 f"{driver_version}",
                           f"upgrade the R{branch} driver to {lowest} or later, or {upgrade}")
    branches = ", ".join(f"R{parse_version(x).parts[0]} >= {x}" for x in row.datacenter_compat)
    return finding(FAIL, f"{needs} (on data center GPUs also {branches}); the host has {driver_version}", upgrade)
