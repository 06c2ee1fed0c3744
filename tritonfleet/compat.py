"""Neuron SDK versions table and the host-driver / container-runtime compatibility gate.

Rule (neuron-ec2.md §4.4, SDK:neuron-runtime/nrt-troubleshoot.rst): the driver stays backwards compatible
with older runtimes, but a newer runtime may need a newer driver. So the host's ``aws-neuronx-dkms`` must be
at least the driver released in the same Neuron SDK release as the container's ``aws-neuronx-runtime-lib``.
Upgrade the host driver first, then roll containers.

Inf1: the last driver that supports Inf1 is 2.24 (pin ``aws-neuronx-dkms=2.24.*``, neuron-ec2.md §1.5), so
an Inf1 host cannot run a runtime newer than the one of SDK 2.26.0 (the last release shipping a 2.24 driver).

The table is data, not constants: add a row per Neuron SDK release (versions from the SDK release notes,
``release-notes/components/runtime.rst``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

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


def check_driver_runtime(
    driver_version: str, runtime_version: str, *, neuron_arch: str | None = None
) -> None:
    """Raise :class:`CompatibilityError` unless the host driver can run the container's runtime-lib.

    ``driver_version`` is the host's ``aws-neuronx-dkms`` (e.g. ``2.30.2.0`` or ``2.30.2.0-dkms``, or a pin such
    as ``2.24.*``); ``runtime_version`` the container's ``aws-neuronx-runtime-lib``. With
    ``neuron_arch="inf1"`` the host driver cannot go past :data:`INF1_DKMS_PIN`, so the advice is to use an
    older image, and a host driver newer than 2.24 is itself an error. An unknown runtime is not an error
    (call :func:`min_driver_for_runtime` to warn about it).
    """
    driver = parse_version(driver_version)
    inf1 = neuron_arch == "inf1"
    if inf1 and not at_least(INF1_DKMS_PIN, driver):
        raise CompatibilityError(
            f"host driver {DKMS} {driver_version} does not support inf1 (the last inf1 driver is "
            f"{INF1_DKMS_PIN}): pin {DKMS}={INF1_DKMS_PIN} on inf1 hosts (deploys/neuron.py)"
        )
    minimum = min_driver_for_runtime(runtime_version)
    if minimum is None or at_least(driver, minimum):
        return
    release = release_for_runtime(runtime_version)
    needs = (
        f"container runtime {RUNTIME_LIB} {runtime_version} (Neuron SDK {release}) needs host driver "
        f"{DKMS} >= {minimum}, host has {driver_version}"
    )
    if inf1:
        last = _last_release_with_driver_in(INF1_DKMS_PIN)
        raise CompatibilityError(
            f"{needs}: inf1 hosts cannot run a driver newer than {INF1_DKMS_PIN}, so use an image built for "
            f"Neuron SDK {last} or older"
        )
    raise CompatibilityError(
        f"{needs}: upgrade the host driver (deploys/neuron.py) or use an image built for an older Neuron SDK"
    )


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
