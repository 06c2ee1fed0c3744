"""Every role's settings, as a class: each integer setting declares both bounds, each version setting uses the
one shared :data:`~tritonfleet.config.Version` type, and preflight refuses a value just outside each bound and
each malformed version with a one-line error naming the host and the field (pure, no hosts)."""

from __future__ import annotations

import types
import typing

import annotated_types as at
import pytest
from pydantic import AfterValidator
from pydantic.fields import FieldInfo

from roles import all_roles
from tests.hostconfigs import host_config
from tritonfleet import config
from tritonfleet.config import ConfigError

GOOD = {"instance_type": "inf2.xlarge", "neuron_key_fingerprint": "A" * 40, "triton_repository_secret": "s" * 24}

#: Names of settings that pin a package, driver or toolkit version (or a pattern, a release, a branch of one).
VERSION_SUFFIXES = ("_version", "_release", "_pin", "_branch")

#: Settings whose type holds integers but that are no bounded integer setting, with the reason. Keep it tiny.
INT_ALLOWED = {
    "sysctl_params": "kernel parameter values: each parameter has its own range, which the kernel checks on apply",
}

#: Settings named like a version that are none, with the reason. Keep it tiny (empty: every one is a Version).
VERSION_ALLOWED: dict[str, str] = {}

MALFORMED_VERSIONS = ["1.2; rm -rf /", "", "abc def", "$(x)", "1.2\n", "1.2`id`", "-1", "1.*.2"]


def _settings() -> list[tuple[str, FieldInfo]]:
    return [(f"{role.name}_{name}", info) for role in all_roles() for name, info in role.settings.model_fields.items()]


def _annotations(annotation) -> list:
    """The annotation and every type inside it (Optional, containers, Annotated)."""
    found = [annotation]
    for arg in typing.get_args(annotation):
        found += _annotations(arg)
    return found


def _metadata(info: FieldInfo) -> list:
    """The field's constraints and validators, its own and those of the Annotated types it is built from."""
    meta = list(info.metadata)
    for inner in _annotations(info.annotation):
        if typing.get_origin(inner) is typing.Annotated:
            meta += list(inner.__metadata__)
    out = []
    for m in meta:  # Field(ge=..) inside Annotated arrives as a FieldInfo holding the constraints
        out += list(m.metadata) if isinstance(m, FieldInfo) else [m]
    return out


def _scalar(info: FieldInfo):
    """The field's type without None and without Annotated (``int | None`` -> ``int``)."""
    annotation = info.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            return None
        annotation = args[0]
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def _bounds(info: FieldInfo) -> tuple[list, list]:
    meta = _metadata(info)
    return ([m for m in meta if isinstance(m, (at.Ge, at.Gt))], [m for m in meta if isinstance(m, (at.Le, at.Lt))])


def _uses_version(info: FieldInfo) -> bool:
    return any(isinstance(m, AfterValidator) and m.func is config.version for m in _metadata(info))


INTS = [(key, info) for key, info in _settings() if _scalar(info) is int]
VERSIONS = [(key, info) for key, info in _settings()
            if _uses_version(info) or (key.endswith(VERSION_SUFFIXES) and key not in VERSION_ALLOWED)]


def test_the_walk_sees_the_settings_it_is_about():
    ints, versions = {k for k, _ in INTS}, {k for k, _ in VERSIONS}
    assert {"docker_ulimit_stack", "docker_ulimit_memlock", "docker_log_max_file", "connection_keepalive"} <= ints
    assert {"nvidia_toolkit_version", "neuron_dkms_version", "neuron_releases", "triton_neuron_runtime_version"} <= versions


def test_every_integer_setting_declares_both_bounds():
    unbounded = []
    for key, info in _settings():
        if key in INT_ALLOWED:
            continue
        if _scalar(info) is int:
            lower, upper = _bounds(info)
            if not lower or not upper:
                unbounded.append(f"{key} ({'no lower bound' if not lower else 'no upper bound'})")
        elif any(a is int for a in _annotations(info.annotation)):
            unbounded.append(f"{key} (holds integers: give them a bounded type, or allowlist with a reason)")
    assert not unbounded, "integer settings without ge/gt and le/lt: " + ", ".join(unbounded)


def test_every_version_setting_uses_the_shared_version_type():
    named = [key for key, info in _settings() if key.endswith(VERSION_SUFFIXES) and key not in VERSION_ALLOWED]
    assert named, "no version settings found: the walk is broken"
    wrong = [key for key, info in _settings() if key in named and not _uses_version(info)]
    assert not wrong, "version settings not typed tritonfleet.config.Version: " + ", ".join(wrong)


def test_allowlists_name_real_settings():
    keys = {k for k, _ in _settings()}
    assert set(INT_ALLOWED) <= keys and set(VERSION_ALLOWED) <= keys


def _outside(info: FieldInfo) -> list[int]:
    """Values just outside each bound (and 0 for a Limit: -1 or positive)."""
    lower, upper = _bounds(info)
    values = [b.ge - 1 if isinstance(b, at.Ge) else b.gt for b in lower]
    values += [b.le + 1 if isinstance(b, at.Le) else b.lt for b in upper]
    if any(isinstance(m, AfterValidator) and m.func is config._limit for m in _metadata(info)):
        values.append(0)
    return values


def _refused(key: str, value, field: str | None = None) -> str:
    with pytest.raises(ConfigError) as exc:
        host_config({**GOOD, key: value})
    text = str(exc.value)
    assert text.startswith(f"h1: {field or key}") and "\n" not in text, text
    return text


@pytest.mark.parametrize("key,info", INTS, ids=[k for k, _ in INTS])
def test_integer_just_outside_each_bound_is_refused(key, info):
    values = _outside(info)
    assert values, f"{key} has no bounds to test"
    for value in values:
        _refused(key, value)


@pytest.mark.parametrize("key,info", VERSIONS, ids=[k for k, _ in VERSIONS])
@pytest.mark.parametrize("bad", MALFORMED_VERSIONS)
def test_malformed_version_is_refused(key, info, bad):
    default = info.get_default(call_default_factory=True)
    if isinstance(default, dict):  # a table of versions: a bad key, and a bad version in it
        release, versions = next(iter(default.items()))
        _refused(key, {**default, bad: versions})
        _refused(key, {**default, release: {**versions, next(iter(versions)): bad}})
    else:
        _refused(key, bad)


def test_limits_take_unlimited_and_positive_values():
    c = host_config({**GOOD, "docker_ulimit_memlock": -1, "docker_ulimit_stack": 1})
    assert (c.docker.ulimit_memlock, c.docker.ulimit_stack) == (-1, 1)
    assert "expected -1 (unlimited) or a positive limit" in _refused("docker_ulimit_stack", 0)
