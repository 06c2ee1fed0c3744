"""Tests for the compatibility chain in tritonfleet.compat: the table's honesty and each link's rule.

The honesty tests hold the data to its promises (every release row names all its links, every link names a
source that looks like a citation, the rows agree with NEURON_RELEASES and grow monotonically); the rule tests
are tables of ok / warn / fail cases, with the exact one-line message for a few.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import pytest

from tritonfleet import compat
from tritonfleet.compat import (
    CHAIN,
    DKMS,
    DRIVER_COMPAT_IDS,
    DRIVER_RUNTIME,
    FAIL,
    FRAMEWORK_RUNTIME,
    GPU_DRIVER_IMAGE,
    INF1,
    KERNEL_BREAKS,
    KERNEL_DRIVER,
    NEURON_CC,
    NEURON_LINKS,
    NEURON_RELEASES,
    NEURONX_CC,
    NGC_TRITON,
    OK,
    RUNTIME_LIB,
    RUNTIME_MODEL,
    TORCH_NEURON,
    TORCH_NEURONX,
    WARN,
    ArtifactInfo,
    CompatibilityError,
    Finding,
    chain_for_driver,
    chain_for_release,
    chain_for_runtime,
    chain_releases,
    check_compat_id,
    check_driver_runtime,
    check_driver_runtime_finding,
    check_framework,
    check_gpu,
    check_kernel,
    check_model,
    min_driver_for_runtime,
    ngc_release_of,
    parse_compat_id_error,
    parse_version,
    release_for_runtime,
    releases_for_package,
    worst,
)


@dataclass(frozen=True)
class Artifact:
    """Stands in for the artifact reader's result (satisfies compat.ArtifactInfo)."""

    compiler: str | None
    compiler_version: str | None
    neff_version: str | None
    kind: str = "neff"
    source: str = "model.neff header"


def _artifact(compiler: str | None, version: str | None, neff: str | None = "2.0") -> ArtifactInfo:
    return Artifact(compiler, version, neff)


def _series(version: str, n: int = 2) -> tuple[int, ...]:
    return parse_version(version).series(n)


# --- honesty: the table -------------------------------------------------------------------------------------

#: A citation: SDK:<path>, SDK@<commit>:<path>, DRV:<path>, owner/repo#N, owner/repo@commit:<path> or a URL,
#: optionally followed by a parenthesised note.
CITATION = re.compile(
    r"^(SDK(@[0-9a-f]{7,40})?:[\w./-]+\.(rst|json|md)|DRV:[\w./-]+\.[ch]|https://\S+|[\w.-]+/[\w.-]+#\d+"
    r"|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:[\w./-]+)( \(.+\))?$"
)


def _citations(source: str) -> list[str]:
    """The citations of a source string, split at the "; " that separate them (not inside parentheses)."""
    parts, depth, current = [], 0, ""
    for i, ch in enumerate(source):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and source.startswith("; ", i):
            parts.append(current)
            current = ""
            continue
        if depth == 0 and current == "" and ch == " " and source[i - 1] == ";":
            continue
        current += ch
    parts.append(current)
    return parts


def _all_sources() -> list[tuple[str, str]]:
    out = [(f"CHAIN[{r}].{link}", src) for r, row in CHAIN.items() for link, src in row.sources.items()]
    out += [(f"NGC_TRITON[{n}].{link}", src) for n, row in NGC_TRITON.items() for link, src in row.sources.items()]
    out += [(f"KERNEL_BREAKS[{b.kernel}]", b.source) for b in KERNEL_BREAKS]
    out += [("compat id ranges", compat._SRC_COMPAT_IDS), ("kernel min", compat._SRC_KERNEL_MIN),
            ("inf1 runtime", compat._SRC_INF1_RUNTIME)]
    return out


def test_chain_has_the_releases_of_neuron_releases_in_the_same_order() -> None:
    assert list(CHAIN) == list(NEURON_RELEASES)
    assert [r.sdk for r in chain_releases()] == sorted(NEURON_RELEASES, key=parse_version)
    for release, row in CHAIN.items():
        assert row.sdk == release


@pytest.mark.parametrize("release", list(NEURON_RELEASES))
def test_chain_agrees_with_neuron_releases(release: str) -> None:
    row, components = CHAIN[release], NEURON_RELEASES[release]
    assert row.runtime == components[RUNTIME_LIB]
    if DKMS in components:
        assert row.driver == components[DKMS]
        assert row.runtime_min_driver == min_driver_for_runtime(row.runtime)
    assert release_for_runtime(row.runtime) == release
    assert chain_for_runtime(row.runtime) is row and chain_for_driver(row.driver) is row
    assert chain_for_release(release) is row


@pytest.mark.parametrize("release", list(CHAIN))
def test_every_release_row_names_all_its_links(release: str) -> None:
    row = CHAIN[release]
    assert set(row.sources) == {*NEURON_LINKS, INF1}
    assert all(src.strip() for src in row.sources.values())
    # kernel -> driver: the driver, and the kernels it was tested on unless Neuron published none (said so)
    parse_version(row.driver)
    assert row.kernels_tested or "kernels tested unknown" in row.sources[KERNEL_DRIVER]
    for kernel in row.kernels_tested:
        assert re.fullmatch(r"\d+\.\d+", kernel), kernel
    assert list(row.kernels_tested) == sorted(row.kernels_tested, key=parse_version)
    # driver -> runtime
    parse_version(row.runtime)
    assert parse_version(row.runtime_min_driver) <= parse_version(row.driver)
    if row.driver_min_runtime is not None:
        assert parse_version(row.driver_min_runtime) <= parse_version(row.runtime)
    # runtime -> model: NEFF versions and both compilers
    assert row.neff_versions and all(parse_version(n) for n in row.neff_versions)
    assert set(row.compilers) == {NEURONX_CC, NEURON_CC}
    # framework -> runtime
    assert row.frameworks.get(TORCH_NEURONX) and row.frameworks.get(TORCH_NEURON)
    for versions in [*row.frameworks.values(), *([v] for v in row.compilers.values())]:
        for version in versions:
            assert not parse_version(version).wildcard
    assert row.inf1 <= {"driver", "dlami", "frameworks"}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row.date)


@pytest.mark.parametrize(("where", "source"), _all_sources())
def test_every_link_names_its_source(where: str, source: str) -> None:
    citations = _citations(source)
    assert citations, where
    for citation in citations:
        assert CITATION.match(citation), f"{where}: {citation!r} does not look like a citation"


def test_citation_pattern_can_fail() -> None:
    assert not all(CITATION.match(c) for c in _citations("release notes; SDK:foo.rst"))
    assert _citations("SDK:a.rst (x; y); aws-neuron/aws-neuron-sdk#1") == [
        "SDK:a.rst (x; y)", "aws-neuron/aws-neuron-sdk#1"]


def test_releases_grow_monotonically() -> None:
    """Later releases ship newer drivers, runtimes, compilers and framework builds, each line once."""
    rows = chain_releases()
    for older, newer in itertools.pairwise(rows):
        assert older.date < newer.date
        assert _series(older.driver) < _series(newer.driver)
        assert _series(older.runtime) < _series(newer.runtime)
        assert _series(older.compilers[NEURONX_CC]) < _series(newer.compilers[NEURONX_CC])
        assert _series(older.compilers[NEURON_CC]) <= _series(newer.compilers[NEURON_CC])
        newest_old = max(parse_version(v).parts[3:5] for v in older.frameworks[TORCH_NEURONX])
        newest_new = max(parse_version(v).parts[3:5] for v in newer.frameworks[TORCH_NEURONX])
        assert newest_old <= newest_new


def test_inf1_support_ends_as_announced() -> None:
    """The driver supports Inf1 up to 2.24, DLAMIs up to SDK 2.26; Inf1 frameworks stay in every release."""
    for row in chain_releases():
        assert ("driver" in row.inf1) == parse_version(row.driver).matches(compat.INF1_DKMS_PIN) or (
            "driver" in row.inf1 and parse_version(row.driver) < parse_version("2.24"))
        assert ("dlami" in row.inf1) == (parse_version(row.sdk) <= parse_version("2.26.0"))
        assert "frameworks" in row.inf1


def test_gpu_rows_name_their_link() -> None:
    assert list(NGC_TRITON) == sorted(NGC_TRITON, key=parse_version, reverse=True)
    for ngc, row in NGC_TRITON.items():
        assert row.ngc == ngc and ngc_release_of(ngc) == ngc
        assert set(row.sources) == {GPU_DRIVER_IMAGE}
        parse_version(row.cuda)
        assert re.fullmatch(r"\d{3}", row.min_driver)
        for lowest in (*(row.datacenter_compat or ()), *row.disputed):
            assert parse_version(lowest) < parse_version(row.min_driver) or lowest.startswith(row.min_driver)
        assert not set(row.disputed) & set(row.datacenter_compat or ())
    by_release = [NGC_TRITON[n] for n in sorted(NGC_TRITON, key=parse_version)]
    for older, newer in itertools.pairwise(by_release):
        assert parse_version(older.min_driver) <= parse_version(newer.min_driver)
        assert parse_version(older.cuda) <= parse_version(newer.cuda)


def test_kernel_breaks_and_compat_ids_are_well_formed() -> None:
    kernels = [b.kernel for b in KERNEL_BREAKS]
    assert kernels == sorted(kernels, key=parse_version)
    for brk in KERNEL_BREAKS:
        assert brk.fixed_in == tuple(sorted(brk.fixed_in, key=parse_version))
        assert len({_series(f) for f in brk.fixed_in}) == len(brk.fixed_in)  # one fix per driver line
    for ranges in DRIVER_COMPAT_IDS.values():
        assert set(ranges) <= {"inf1", "inf2", "trn1", "trn2"}
        assert all(low <= high for low, high in ranges.values())


# --- lookups -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "found"),
    [("2.32.0", "2.32.0"), ("2.32", "2.32.0"), ("2.27.0", None), ("latest", None)],
)
def test_chain_for_release(query: str, found: str | None) -> None:
    row = chain_for_release(query)
    assert (row.sdk if row else None) == found


@pytest.mark.parametrize(
    ("driver", "release"),
    [("2.26.10.0", "2.28.0"), ("2.24.13.0", "2.26.0"), ("2.24.*", "2.26.0"), ("2.29.1.0", "2.31.0"),
     ("2.25.4.0", None), ("junk", None)],
)
def test_chain_for_driver(driver: str, release: str | None) -> None:
    row = chain_for_driver(driver)
    assert (row.sdk if row else None) == release


@pytest.mark.parametrize(
    ("package", "version", "releases"),
    [
        (TORCH_NEURONX, "2.9.0.2.15.32035", ["2.31.0", "2.32.0"]),
        (TORCH_NEURONX, "2.9.0.2.13.26312", ["2.29.0"]),  # the 2.29.1 build of the 2.29 line
        (TORCH_NEURONX, "2.8.0.2.12.22436", ["2.28.0"]),
        (TORCH_NEURONX, "2.9.0.2.11.19912", []),  # SDK 2.27 is not in the table
        (NEURONX_CC, "2.24.8799.0", ["2.29.0"]),
        (NEURON_CC, "1.24.0.0", sorted(CHAIN, key=parse_version)),
        (TORCH_NEURONX, "not a version", []),
    ],
)
def test_releases_for_package(package: str, version: str, releases: list[str]) -> None:
    assert [r.sdk for r in releases_for_package(package, version)] == releases


@pytest.mark.parametrize(
    ("image", "release"),
    [("24.10", "24.10"), ("24.10-py3", "24.10"), ("nvcr.io/nvidia/tritonserver:24.10-py3", "24.10"),
     ("nvcr.io/nvidia/tritonserver:24.12-py3-sdk", "24.12"), ("tritonserver:latest", None), ("2.51.0", None)],
)
def test_ngc_release_of(image: str, release: str | None) -> None:
    assert ngc_release_of(image) == release


# --- Finding -------------------------------------------------------------------------------------------------


def test_finding_is_one_line_with_a_known_verdict() -> None:
    f = Finding("model bert", RUNTIME_MODEL, FAIL, "found", "do this")
    assert str(f) == "model bert: found: do this"
    assert str(Finding("host a", KERNEL_DRIVER, OK, "fine")) == "host a: fine"
    with pytest.raises(ValueError, match="verdict"):
        Finding("host a", KERNEL_DRIVER, "good", "fine")
    with pytest.raises(ValueError, match="one line"):
        Finding("host a", KERNEL_DRIVER, WARN, "two\nlines")
    with pytest.raises(ValueError, match="one line"):
        Finding("host a", KERNEL_DRIVER, WARN, "one", "two\nlines")


def test_worst() -> None:
    def f(verdict: str) -> Finding:
        return Finding("h", KERNEL_DRIVER, verdict, "x")

    assert worst([]) == OK
    assert worst([f(OK), f(WARN)]) == WARN
    assert worst([f(FAIL), f(OK), f(WARN)]) == FAIL


# --- kernel -> driver ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "driver", "built", "verdict"),
    [
        ("6.8.0-1015-aws", "2.30.2.0", True, OK),
        ("6.18.3-200.fc", "2.30.2.0", None, OK),
        ("5.10.225-213.878.amzn2.x86_64", "2.29", None, OK),
        ("6.14.0-1010-aws", "2.26.5.0", True, OK),
        ("6.19.1", "2.30.2.0", None, WARN),  # newer than any kernel the driver was tested on
        ("6.5.0-1024-aws", "2.30.2.0", True, WARN),  # between tested kernels, not one of them
        ("6.18.0", "2.26.10.0", True, WARN),  # the 6.18 fix, but 2.28.0's table stops at 6.14
        ("6.12.0", "2.24.7.0", None, WARN),  # 2.26.0 published no kernel table
        ("6.12.0", "2.25.4.0", None, WARN),  # SDK 2.27 is not in the table
        ("6.18.0", "2.24.*", None, WARN),  # the inf1 pin stands for 2.24.13.0, which has the fix
        ("6.18.0", "2.26.5.0", None, FAIL),  # aws-neuronx-dkms 2.26.10.0 fixed 6.18
        ("6.18.0", "2.26.5.0", True, WARN),  # ... unless it built after all
        ("6.18.0", "2.24.7.0", None, FAIL),  # the 2.24 line got the fix in 2.24.13.0
        ("6.18.0", "2.25.4.0", None, FAIL),  # a line without the fix, older than 2.26.10.0
        ("6.13.2", "2.22.2.0", None, FAIL),  # 2.24.7.0 fixed builds on 6.13+
        ("6.5.0-1015-aws", "2.15.9.0", None, FAIL),  # aws-neuron/aws-neuron-sdk#843
        ("4.14.193-149.317.amzn2.x86_64", "2.30.2.0", None, FAIL),  # below 5.10
        ("6.8.0", "2.30.2.0", False, FAIL),  # the module is not built
        ("not-a-kernel", "2.30.2.0", None, WARN),
        ("6.8.0", "", None, WARN),
    ],
)
def test_check_kernel(kernel: str, driver: str, built: bool | None, verdict: str) -> None:
    f = check_kernel(kernel, driver, built, subject="host inf2-a")
    assert (f.verdict, f.link, f.subject) == (verdict, KERNEL_DRIVER, "host inf2-a")
    assert (f.fix is None) == (verdict == OK)


def test_check_kernel_messages() -> None:
    assert str(check_kernel("6.18.0", "2.26.5.0", None)) == (
        "host: kernel 6.18.0 needs aws-neuronx-dkms 2.26.10.0 or later (older drivers are not compatible with "
        "Linux 6.18); the host has 2.26.5.0: upgrade aws-neuronx-dkms to 2.26.10.0 or later, or boot a kernel "
        "older than 6.18"
    )
    assert str(check_kernel("6.18.0", "2.24.7.0", None)).startswith(
        "host: kernel 6.18.0 needs aws-neuronx-dkms 2.24.13.0 or later")  # the fix of its own line
    assert str(check_kernel("6.18.0", "2.26.10.0", True)) == (
        "host: kernel 6.18 is not one aws-neuronx-dkms 2.26.5.0 (Neuron SDK 2.28.0) was tested on (5.10, 5.14, "
        "6.1, 6.8, 6.12, 6.14): set neuron_sdk_release to 2.31.0 (tested on 6.18), or boot a tested kernel"
    )
    assert "inf1 hosts stay on aws-neuronx-dkms 2.24.*" in str(check_kernel("6.12.0", "2.24.13.0", True))


# --- driver -> runtime ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "runtime", "arch", "verdict"),
    [
        ("2.30.2.0", "2.34.10.0", "inf2", OK),
        ("2.30.2.0-dkms", "2.34.10.0", "trn2", OK),
        ("2.29.1.0", "2.33.10.0", "trn1", OK),
        ("2.26.10.0", "2.30.50.0", "inf2", OK),
        ("2.24.*", "2.28.19.0", "inf2", OK),
        ("2.24.13.0", "2.28.19.0", None, OK),
        ("2.28.0.0", "2.28.19.0", "inf2", OK),  # the driver stays backwards compatible
        ("2.30.2.0", "2.28.19.0", "inf2", WARN),  # ... but driver 2.29 needs runtime 2.33, and ids only grow
        ("2.19.64.0", "2.23.110", "inf2", OK),
        ("2.24.13.0", "2.34.10.0", "inf2", FAIL),  # runtime newer than the driver
        ("2.26.10.0", "2.32.31.0", "inf2", FAIL),  # "Runtime 2.32 is not backward-compatible with driver 2.26"
        ("2.18.20.0", "2.23.110", "inf2", FAIL),  # a driver NEURON_RELEASES does not record (2.21.0)
        ("2.29.0.0", "2.32.31.0", "inf2", FAIL),  # "Neuron Driver 2.29 requires Runtime Library 2.33 or later"
        ("2.30.2.0", "2.32.31.0", "inf2", WARN),  # ... and compatibility ids only grow: likely 2.30 too
        ("2.26.5.0", "2.28.19.0", "inf1", FAIL),  # no inf1 driver above 2.24
        ("2.24.13.0", "2.23.110", "inf1", FAIL),  # runtime-lib 2.23 removed inf1
        ("2.30.2.0", "2.35.1.0", "inf2", WARN),  # a runtime newer than the table
        ("2.30.2.0", "2.29.40.0", "inf2", WARN),  # SDK 2.27's runtime is not in the table
        ("x", "2.34.10.0", "inf2", WARN),
        ("2.30.2.0", "?", "inf2", WARN),
    ],
)
def test_check_driver_runtime_finding(driver: str, runtime: str, arch: str | None, verdict: str) -> None:
    f = check_driver_runtime_finding(driver, runtime, arch, subject="host a")
    assert (f.verdict, f.link) == (verdict, DRIVER_RUNTIME)
    assert (f.fix is None) == (verdict == OK)


def test_driver_runtime_finding_wraps_the_gate() -> None:
    """Where the deploy gate refuses, the finding fails with the same words; where the finding passes, so
    does the gate (the finding knows more, so it may fail or warn where the gate passes)."""
    drivers = [r[DKMS] for r in NEURON_RELEASES.values() if DKMS in r] + ["2.24.*", "2.24.13.0", "2.26.10.0"]
    runtimes = [r[RUNTIME_LIB] for r in NEURON_RELEASES.values()] + ["2.99.0.0"]
    for driver, runtime, arch in itertools.product(drivers, runtimes, ["inf1", "inf2", None]):
        f = check_driver_runtime_finding(driver, runtime, arch)
        try:
            check_driver_runtime(driver, runtime, neuron_arch=arch)
        except CompatibilityError as exc:
            assert f.verdict == FAIL and str(f) == f"host: {exc}", (driver, runtime, arch)
        else:
            assert f.verdict != FAIL or (arch == "inf1" or f.line.startswith(f"{DKMS} {driver} needs")), (
                driver, runtime, arch, str(f))


def test_check_driver_runtime_finding_messages() -> None:
    assert str(check_driver_runtime_finding("2.30.2.0", "2.34.10.0", "inf2", subject="host inf2-a")) == (
        "host inf2-a: aws-neuronx-runtime-lib 2.34.10.0 (Neuron SDK 2.32.0) needs aws-neuronx-dkms >= 2.30.2.0; "
        "the host has 2.30.2.0"
    )
    assert str(check_driver_runtime_finding("2.29.0.0", "2.32.31.0", "inf2")) == (
        "host: aws-neuronx-dkms 2.29.0.0 needs aws-neuronx-runtime-lib >= 2.33 (Neuron SDK 2.31.0 known issue); "
        "the image has 2.32.31.0: rebuild the image for Neuron SDK 2.31.0 or later (neuron_sdk_release), or keep "
        "the host on an older driver"
    )
    unknown = check_driver_runtime_finding("2.30.2.0", "2.35.1.0", "inf2")
    assert "newer than any release in the compatibility table" in unknown.line
    assert "tritonfleet/compat.py" in (unknown.fix or "")


@pytest.mark.parametrize(
    ("runtime_id", "driver", "arch", "supported", "verdict"),
    [
        (6, "2.24.7.0", "inf2", None, OK),
        (8, "2.24.7.0", "trn1", None, FAIL),  # a runtime newer than the driver's range
        (4, "2.24.7.0", "inf2", None, FAIL),  # one older than it
        (11, "2.24.7.0", "trn2", None, OK),
        (6, "2.30.2.0", "inf2", None, WARN),  # not published for this driver
        (6, "2.3.26.0", "inf1", (2, 4), FAIL),  # the range the runtime's message reported (#655)
    ],
)
def test_check_compat_id(runtime_id: int, driver: str, arch: str, supported: tuple[int, int] | None,
                         verdict: str) -> None:
    assert check_compat_id(runtime_id, driver, arch, supported=supported).verdict == verdict


def test_parse_compat_id_error() -> None:
    text = ("ERROR NRT:nrt_init This Neuron Runtime (compatibility id: 6) is not compatible with the installed "
            "aws-neuron-dkms package. Installed aws-neuron-dkms supports Runtime compatibility id range: 2 - 4")
    assert parse_compat_id_error(text) == (6, 2, 4)
    assert parse_compat_id_error("NRT:nrt_init Unable to determine Neuron Driver version.") is None
    found = parse_compat_id_error(text)
    assert found is not None
    f = check_compat_id(found[0], "2.3.26.0", "inf1", supported=found[1:])
    assert str(f) == ("host: runtime compatibility id 6, aws-neuronx-dkms 2.3.26.0 accepts 2-4 on inf1: upgrade "
                      "the host driver and reload the module (rmmod neuron; modprobe neuron)")


# --- runtime -> model ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compiler", "version", "neff", "runtime", "arch", "verdict"),
    [
        (NEURONX_CC, "2.27.5334.0", "2.0", "2.34.10.0", "inf2", OK),
        (NEURONX_CC, "2.16.345.0", "2.0", "2.34.10.0", "trn1", OK),  # newer runtimes load older NEFFs
        (NEURONX_CC, "2.26.6360.0", "2.0", "2.33", None, OK),
        (NEURONX_CC, "2.16.372.0", "2.0", "2.23.112.0", None, OK),  # the 2.21.1 build, same series
        (NEURONX_CC, "2.27.5334.0", "2.0", "2.33.10.0", None, FAIL),  # compiled by a newer release
        (NEURONX_CC, "2.16.345.0", "2.0", "2.21.1.0", None, FAIL),  # the example
        (NEURONX_CC, "2.22.12471.0", "2.0", "2.28.19.0", None, FAIL),  # SDK 2.27's, newer than 2.26's runtime
        (NEURONX_CC, "2.22.12471.0", "2.0", "2.34.10.0", None, WARN),  # not in the table
        (NEURONX_CC, "2.28.1.0", "2.0", "2.34.10.0", None, FAIL),  # newer than every release's compiler
        (NEURONX_CC, "2.28.1.0", "2.0", "2.35.1.0", None, WARN),
        (NEURONX_CC, "2.10.1.0", "2.0", "2.34.10.0", None, WARN),  # older than the table
        (NEURONX_CC, "2.27.5334.0", "3.0", "2.34.10.0", None, WARN),  # NEFF outside the support table
        (NEURONX_CC, "2.27.5334.0", "2.0", None, None, WARN),  # the image's runtime is unknown
        (NEURONX_CC, "2.27.5334.0", "2.0", "2.34.10.0", "inf1", FAIL),  # NeuronCore-v2 NEFF on inf1
        (None, None, "2.0", "2.34.10.0", None, WARN),
        (None, None, None, "2.34.10.0", None, WARN),
        (NEURONX_CC, "garbage", "2.0", "2.34.10.0", None, WARN),
        ("tvm", "0.9", "2.0", "2.34.10.0", None, WARN),
        (NEURON_CC, "1.24.0.0", "2.0", None, "inf1", OK),
        (NEURON_CC, "1.19.0.0", "2.0", None, "inf1", WARN),
        (NEURON_CC, "1.24.0.0", "2.0", None, "inf2", FAIL),
        (NEURON_CC, "1.24.0.0", "2.0", "2.34.10.0", None, FAIL),  # an Inf1 model on a runtime-lib without Inf1
    ],
)
def test_check_model(compiler: str | None, version: str | None, neff: str | None, runtime: str | None,
                     arch: str | None, verdict: str) -> None:
    f = check_model("bert", _artifact(compiler, version, neff), runtime, neuron_arch=arch)
    assert (f.verdict, f.link, f.subject) == (verdict, RUNTIME_MODEL, "model bert")
    assert (f.fix is None) == (verdict == OK)


def test_check_model_messages() -> None:
    # the example: every link, a verdict and the fix in one line
    assert str(check_model("bert", _artifact(NEURONX_CC, "2.16.345.0"), "2.21.1.0")) == (
        "model bert: compiled by neuronx-cc 2.16.345.0 (NEFF 2.0), needs runtime >= 2.23 (Neuron SDK 2.21.0); "
        "the image has 2.21.1.0: set neuron_sdk_release to 2.21.0 or later, or recompile with the image's compiler"
    )
    assert str(check_model("bert", _artifact(NEURONX_CC, "2.27.5334.0"), "2.33.10.0")) == (
        "model bert: compiled by neuronx-cc 2.27.5334.0 (NEFF 2.0), needs runtime >= 2.34 (Neuron SDK 2.32.0); "
        "the image has 2.33.10.0: set neuron_sdk_release to 2.32.0 or later, or recompile with the image's "
        "compiler (neuronx-cc 2.26.6360.0)"
    )
    unknown = check_model("bert", _artifact(None, None), "2.34.10.0")
    assert unknown.line == "no compiler version found (NEFF 2.0 read from model.neff header, neff)"
    between = check_model("bert", _artifact(NEURONX_CC, "2.22.12471.0"), "2.34.10.0")
    assert "(between Neuron SDK 2.26.0 and 2.28.0)" in between.line


# --- framework -> runtime ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frameworks", "runtime", "verdict"),
    [
        ({"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0", "numpy": "1.26.4"}, "2.34.10.0", OK),
        ({"torch_neuronx": "2.9.0.2.15.32035"}, "2.33", OK),  # pip's underscore spelling
        ({"torch-neuronx": "2.8.0.2.12.22436"}, "2.30.50.0", OK),
        ({"torch-neuron": "1.13.1.2.11.13.0", "neuron-cc": "1.24.0.0"}, None, OK),  # inf1: the runtime inside
        ({"torch-neuronx": "2.9.0.2.13.24727"}, "2.34.10.0", WARN),  # an older release's framework
        ({"torch-neuronx": "2.9.0.2.15.32035"}, "2.31.24.0", FAIL),  # a newer release's framework
        ({"neuronx-cc": "2.27.5334.0"}, "2.32.31.0", FAIL),
        ({"tensorflow-neuron": "2.10.1.2.12.2.0"}, "2.23.110", FAIL),  # aws-neuron/aws-neuron-sdk#1071
        ({"torch-neuronx": "2.9.0.2.99.1"}, "2.34.10.0", WARN),  # a build the table does not know
        ({"torch-neuronx": "2.9.0.2.15.32035"}, "2.35.1.0", WARN),  # a runtime the table does not know
        ({"torch-neuronx": "2.9.0.2.15.32035"}, "2.20.1.0", FAIL),  # ... older than the framework's release
        ({"torch-neuronx": "2.9.0.2.15.32035"}, None, WARN),  # runtime not declared
        ({"numpy": "1.26.4"}, "2.34.10.0", WARN),
        ({}, "2.34.10.0", WARN),
    ],
)
def test_check_framework(frameworks: dict[str, str], runtime: str | None, verdict: str) -> None:
    f = check_framework(frameworks, runtime, subject="image x")
    assert (f.verdict, f.link, f.subject) == (verdict, FRAMEWORK_RUNTIME, "image x")
    assert (f.fix is None) == (verdict == OK)


def test_check_framework_messages() -> None:
    assert str(check_framework({"torch-neuronx": "2.9.0.2.15.32035"}, "2.31.24.0")) == (
        "image: torch-neuronx 2.9.0.2.15.32035 is from Neuron SDK 2.31.0, newer than runtime 2.31.24.0 (Neuron SDK "
        "2.29.0): it needs runtime >= 2.33: set neuron_sdk_release to 2.31.0 or later, or pin "
        "torch-neuronx==2.9.0.2.13.24727 (Neuron SDK 2.29.0)"
    )
    mixed = check_framework({"torch-neuronx": "2.9.0.2.13.24727", "neuronx-cc": "2.27.5334.0"}, "2.34.10.0")
    assert mixed.verdict == WARN and mixed.line.count("; ") >= 1  # one part per package, the worst verdict
    assert mixed.fix == "pin torch-neuronx==2.9.0.2.15.32035 (Neuron SDK 2.32.0)"


def test_framework_pins_pass_their_own_check() -> None:
    """The image pins (FRAMEWORK_PINS) go with the default release's runtime."""
    pins = dict(p.split("==") for p in compat.FRAMEWORK_PINS["neuronx"])
    runtime = NEURON_RELEASES[compat.DEFAULT_SDK_RELEASE][RUNTIME_LIB]
    assert check_framework(pins, runtime).verdict == OK


# --- gpu driver -> image -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "image", "datacenter", "verdict"),
    [
        ("560.35.03", "24.10", True, OK),
        ("575.51.03", "nvcr.io/nvidia/tritonserver:24.10-py3", False, OK),
        ("535.183.01", "24.10-py3", True, OK),  # forward compatibility on a data center GPU
        ("470.256.02", "24.12", True, OK),
        ("535.183.01", "24.10", False, FAIL),  # not on a consumer GPU
        ("535.54.03", "24.10", True, FAIL),  # R535 below 535.86
        ("550.54.15", "24.10", True, FAIL),  # R550 is not a forward-compatible branch
        ("545.23.08", "24.10", True, WARN),  # the notes both allow and reject R545
        ("545.23.08", "24.04", True, OK),
        ("550.54.15", "24.04", True, OK),
        ("570.86.10", "25.06", True, FAIL),  # 25.06's forward-compatible branches are not confirmed
        ("575.57.08", "25.06", True, OK),
        ("570.86.10", "25.01", True, WARN),  # not in the table
        ("560.35.03", "tritonserver:latest", True, WARN),
        ("n/a", "24.10", True, WARN),
    ],
)
def test_check_gpu(driver: str, image: str, datacenter: bool, verdict: str) -> None:
    f = check_gpu(driver, image, datacenter_gpu=datacenter, subject="host g5-a")
    assert (f.verdict, f.link, f.subject) == (verdict, GPU_DRIVER_IMAGE, "host g5-a")
    assert (f.fix is None) == (verdict == OK)


def test_check_gpu_messages() -> None:
    assert str(check_gpu("550.54.15", "24.10")) == (
        "host: NGC Triton 24.10 (CUDA 12.6.2) needs NVIDIA driver >= 560 (on data center GPUs also R470 >= "
        "470.57, R525 >= 525.85, R535 >= 535.86); the host has 550.54.15: upgrade the NVIDIA driver to R560 or "
        "later, or use an older NGC Triton release"
    )
    assert str(check_gpu("535.183.01", "24.10")) == (
        "host: NGC Triton 24.10 (CUDA 12.6.2) needs NVIDIA driver >= 560, or R535 >= 535.86 on a data center GPU "
        "(CUDA forward compatibility); the host has 535.183.01"
    )


def test_the_default_images_are_in_the_tables() -> None:
    """The project's default NGC image and Neuron release are rows of the tables (so the gate can judge them)."""
    from roles.triton import Settings

    base = Settings.model_fields["base_image"].default
    assert ngc_release_of(base) in NGC_TRITON
    assert compat.DEFAULT_SDK_RELEASE in CHAIN
