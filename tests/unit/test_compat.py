"""Tests for tritonfleet.compat: version parsing, the Neuron releases table and the driver/runtime gate."""

from __future__ import annotations

import pytest

from tritonfleet import compat
from tritonfleet.compat import (
    COLLECTIVES,
    DEFAULT_SDK_RELEASE,
    DKMS,
    INF1_DKMS_PIN,
    NEURON_RELEASES,
    RUNTIME_LIB,
    TOOLS,
    CompatibilityError,
    Version,
    at_least,
    check_driver_runtime,
    driver_pin,
    min_driver_for_runtime,
    parse_version,
    release_for_runtime,
)

# --- Version -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts", "wildcard"),
    [
        ("2.30.2.0", (2, 30, 2, 0), False),
        ("2.30.2.0-dkms", (2, 30, 2, 0), False),
        ("2.24.*", (2, 24), True),
        ("2.34.10.0*", (2, 34, 10, 0), True),
        ("2.*", (2,), True),
        (" 2.33 ", (2, 33), False),
        ("1:2.24.13.0-1", (2, 24, 13, 0), False),
    ],
)
def test_parse_version(text: str, parts: tuple[int, ...], wildcard: bool) -> None:
    v = parse_version(text)
    assert (v.parts, v.wildcard) == (parts, wildcard)


@pytest.mark.parametrize("text", ["", "abc", "2..3", "v2.3", "2.x", "*"])
def test_parse_version_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid version"):
        parse_version(text)


def test_parse_version_type_and_passthrough() -> None:
    v = parse_version("2.30.2.0")
    assert parse_version(v) is v
    with pytest.raises(TypeError):
        parse_version(2.3)  # type: ignore[arg-type]


def test_version_ordering() -> None:
    assert parse_version("2.24.13.0") > parse_version("2.24.7.0")  # numeric, not lexical
    assert parse_version("2.30.2.0") > parse_version("2.29")
    assert parse_version("2.24") == parse_version("2.24.0.0")
    assert hash(parse_version("2.24")) == hash(parse_version("2.24.0.0"))
    assert parse_version("2.24.0.1") < parse_version("2.24.1")
    assert parse_version("2.24.*") < parse_version("2.24.7.0")  # a wildcard compares as its prefix
    assert sorted(["2.26.10.0", "2.26.5.0", "2.3.0.0"], key=parse_version) == [
        "2.3.0.0",
        "2.26.5.0",
        "2.26.10.0",
    ]
    assert str(parse_version("2.24.*")) == "2.24.*" and str(parse_version("2.30.2.0-dkms")) == "2.30.2.0"


def test_version_matches() -> None:
    v = parse_version("2.24.13.0")
    assert v.matches("2.24.*") and v.matches(INF1_DKMS_PIN) and v.matches("2.24.13.0*")
    assert not v.matches("2.25.*") and not v.matches("2.2.*")
    assert parse_version("2.34.10.0").matches("2.34.10.0")
    assert not parse_version("2.34.10.1").matches("2.34.10.0")


def test_at_least() -> None:
    assert at_least("2.30.2.0", "2.30.2.0")
    assert at_least("2.31.0.0", "2.30.2.0")
    assert not at_least("2.30.1.9", "2.30.2.0")
    assert at_least("2.24.*", "2.24.7.0")  # a pin stands for the newest of its line
    assert not at_least("2.24.*", "2.26.5.0")
    assert at_least("2.30.2.0-dkms", "2.30.2.0")
    assert isinstance(parse_version("2.3"), Version)


# --- the releases table ----------------------------------------------------------------------------------


def test_release_2_32_0_components() -> None:
    assert NEURON_RELEASES["2.32.0"] == {
        DKMS: "2.30.2.0",
        RUNTIME_LIB: "2.34.10.0",
        COLLECTIVES: "2.34.10.0",
        TOOLS: "2.32.28.0",
    }
    assert DEFAULT_SDK_RELEASE == "2.32.0" and DEFAULT_SDK_RELEASE in NEURON_RELEASES
    assert INF1_DKMS_PIN == "2.24.*"


@pytest.mark.parametrize(
    ("release", "dkms", "runtime"),
    [
        ("2.31.0", "2.29", "2.33"),
        ("2.30.0", "2.28.0.0", "2.32.31.0"),
        ("2.29.0", "2.27.4.0", "2.31.24.0"),
        ("2.28.0", "2.26.5.0", "2.30.50.0"),
        ("2.26.0", "2.24.7.0", "2.28.19.0"),
        ("2.21.0", None, "2.23.110"),
    ],
)
def test_older_release_rows(release: str, dkms: str | None, runtime: str) -> None:
    assert NEURON_RELEASES[release].get(DKMS) == dkms
    assert NEURON_RELEASES[release][RUNTIME_LIB] == runtime


def test_table_is_consistent() -> None:
    """Every version parses; later SDK releases never ship an older runtime or driver; runtime series unique."""
    releases = sorted(NEURON_RELEASES, key=parse_version)
    for component in (DKMS, RUNTIME_LIB):
        versions = [
            parse_version(NEURON_RELEASES[r][component]) for r in releases if component in NEURON_RELEASES[r]
        ]
        assert versions == sorted(versions), component
    series = [parse_version(NEURON_RELEASES[r][RUNTIME_LIB]).series(2) for r in releases]
    assert len(series) == len(set(series))
    for components in NEURON_RELEASES.values():
        for version in components.values():
            assert not parse_version(version).wildcard


# --- min_driver_for_runtime --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "release", "driver"),
    [
        ("2.34.10.0", "2.32.0", "2.30.2.0"),
        ("2.34.11.0", "2.32.0", "2.30.2.0"),  # a patch of the same runtime series
        ("2.33.5.0", "2.31.0", "2.29"),
        ("2.32.31.0", "2.30.0", "2.28.0.0"),
        ("2.31.24.0", "2.29.0", "2.27.4.0"),
        ("2.30.50.0", "2.28.0", "2.26.5.0"),
        ("2.28.19.0", "2.26.0", "2.24.7.0"),
        ("2.23.112.0", "2.21.0", None),  # the driver of that release is not recorded
        ("2.99.1.0", None, None),
        ("2.29.3.0", None, None),  # SDK 2.27 is not in the table
    ],
)
def test_min_driver_for_runtime(runtime: str, release: str | None, driver: str | None) -> None:
    assert release_for_runtime(runtime) == release
    assert min_driver_for_runtime(runtime) == driver


# --- check_driver_runtime -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "runtime"),
    [
        ("2.30.2.0", "2.34.10.0"),
        ("2.30.2.0-dkms", "2.34.10.0"),
        ("2.31.0.0", "2.34.10.0"),
        ("2.30.2.0", "2.28.19.0"),  # the driver is backwards compatible
        ("2.26.10.0", "2.30.50.0"),
        ("2.29.1.0", "2.33.2.0"),
        ("2.24.*", "2.28.19.0"),
        ("2.24.13.0", "2.28.19.0"),
        ("2.10.0.0", "2.99.0.0"),  # unknown runtime: not an error (callers warn via min_driver_for_runtime)
    ],
)
def test_check_driver_runtime_ok(driver: str, runtime: str) -> None:
    assert check_driver_runtime(driver, runtime) is None


def test_check_driver_runtime_message() -> None:
    with pytest.raises(CompatibilityError) as info:
        check_driver_runtime("2.24.13.0", "2.34.10.0")
    assert str(info.value) == (
        "container runtime aws-neuronx-runtime-lib 2.34.10.0 (Neuron SDK 2.32.0) needs host driver "
        "aws-neuronx-dkms >= 2.30.2.0, host has 2.24.13.0: upgrade the host driver (deploys/neuron.py) "
        "or use an image built for an older Neuron SDK"
    )
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("driver", "runtime", "minimum"),
    [
        ("2.26.10.0", "2.32.31.0", "2.28.0.0"),  # "runtime 2.32 is not backward-compatible with driver 2.26"
        ("2.30.1.0", "2.34.10.0", "2.30.2.0"),
        ("2.28.9.0", "2.33.0.0", "2.29"),
        ("2.26.*", "2.31.24.0", "2.27.4.0"),
    ],
)
def test_check_driver_runtime_too_old(driver: str, runtime: str, minimum: str) -> None:
    with pytest.raises(
        CompatibilityError, match=rf"needs host driver aws-neuronx-dkms >= {minimum}, host has "
    ):
        check_driver_runtime(driver, runtime)


def test_inf1_host_cannot_run_runtime_newer_than_sdk_2_26() -> None:
    check_driver_runtime("2.24.13.0", "2.28.19.0", neuron_arch="inf1")
    check_driver_runtime(INF1_DKMS_PIN, "2.28.19.0", neuron_arch="inf1")
    with pytest.raises(CompatibilityError) as info:
        check_driver_runtime("2.24.13.0", "2.30.50.0", neuron_arch="inf1")
    assert str(info.value) == (
        "container runtime aws-neuronx-runtime-lib 2.30.50.0 (Neuron SDK 2.28.0) needs host driver "
        "aws-neuronx-dkms >= 2.26.5.0, host has 2.24.13.0: inf1 hosts cannot run a driver newer than 2.24.*, "
        "so use an image built for Neuron SDK 2.26.0 or older"
    )
    assert "upgrade the host driver" not in str(info.value)


def test_inf1_host_with_too_new_driver() -> None:
    with pytest.raises(
        CompatibilityError, match=r"host driver aws-neuronx-dkms 2.26.5.0 does not support inf1"
    ):
        check_driver_runtime("2.26.5.0", "2.28.19.0", neuron_arch="inf1")
    check_driver_runtime("2.21.1.0", "2.23.110", neuron_arch="inf1")  # older drivers are fine
    check_driver_runtime("2.26.5.0", "2.28.19.0", neuron_arch="inf2")


@pytest.mark.parametrize(
    ("arch", "release", "pin"),
    [
        ("inf1", DEFAULT_SDK_RELEASE, "2.24.*"),
        ("inf1", "2.30.0", "2.24.*"),
        ("inf2", DEFAULT_SDK_RELEASE, "2.30.2.0*"),
        ("trn2", "2.28.0", "2.26.5.0*"),
        (None, "2.31.0", "2.29.*"),
    ],
)
def test_driver_pin(arch: str | None, release: str, pin: str) -> None:
    assert driver_pin(arch, release) == pin
    if arch != "inf1":
        assert parse_version(NEURON_RELEASES[release][DKMS]).matches(pin)


def test_driver_pin_unknown_release() -> None:
    with pytest.raises(KeyError):
        driver_pin("inf2", "1.0.0")
    with pytest.raises(KeyError):
        driver_pin("inf2", "2.21.0")  # no driver recorded


def test_module_exports() -> None:
    for name in compat.__all__:
        assert hasattr(compat, name), name


def test_one_pin_rule_for_every_package():
    """Pins match whole components: a two-part version never selects a longer component (2.290)."""
    from fnmatch import fnmatch

    from roles.neuron import package_pins
    from tests.hostconfigs import host_config
    from tritonfleet.compat import version_pin

    assert version_pin("2.29") == "2.29.*" and version_pin("2.30.2.0") == "2.30.2.0*"
    assert version_pin("2.24.*") == "2.24.*" and version_pin("2.26*") == "2.26.*"
    assert version_pin("2.26.10.0*") == "2.26.10.0*"  # a data pattern for a full version keeps its suffix open
    pin = package_pins(host_config({"instance_type": "inf2.xlarge", "neuron_sdk_release": "2.31.0",
                                    "neuron_key_fingerprint": "A" * 40,
                                    "triton_repository_secret": "s" * 24}))["aws-neuronx-dkms"]
    assert pin == "2.29.*" and fnmatch("2.29.1.0", pin) and not fnmatch("2.290.0.0", pin)
