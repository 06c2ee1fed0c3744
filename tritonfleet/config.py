"""Configuration machinery: host data in, one typed :class:`HostConfig` per host out.

Host data is flat (pyinfra style): ``neuron_sdk_release``, ``docker_data_root``, ``triton_servers``…
Each role owns the keys that start with its name: it declares a pydantic :class:`RoleSettings` model
(every field with a default and a one-line description) and, optionally, cross-checks. This module
knows no role; preflight hands it the registered :class:`Role` objects. It

- merges data in priority order (role defaults < group data < host data, pyinfra's own merge happens
  before; see :func:`merge`),
- splits keys by prefix into one section per role,
- rejects near misses of known keys with a suggestion ("did you mean"),
- validates each section and turns every problem into a one-line :class:`ConfigError` that names the
  host, the field and what was expected::

    inf2-a: triton_servers[1].devices [3, 5]: devices must be contiguous (inf2.24xlarge has devices 0-5)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar
from urllib.parse import urlparse

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from tritonfleet import catalog
from tritonfleet.platforms import Platform

#: Keys that belong to no role: what every host needs before any role is asked.
TOP_LEVEL = {
    "instance_type": "EC2 instance type, e.g. inf2.xlarge; read from IMDS on the host when absent.",
    "imds_endpoint": "Instance metadata endpoint used when instance_type is absent.",
}
DEFAULT_IMDS = "http://169.254.169.254"

#: Words that make a key look secret: its value is never echoed in an error (near misses count too:
#: ``triton_repository_secert`` is still a secret).
_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "key")


def looks_secret(field: str) -> bool:
    for word in re.split(r"[^a-z]+", field.lower()):
        if word and any(w in word or difflib.SequenceMatcher(None, word, w).ratio() >= 0.8 for w in _SECRET_WORDS):
            return True
    return False


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


class FieldProblem(Exception):  # noqa: N818 - raised by roles, turned into ConfigError with the host
    """Raised by a role's validators or checks: ``field`` (flat data key), ``value`` and ``message``.

    Not a ``ValueError``, so pydantic lets it through unchanged from inside a validator.
    """

    def __init__(self, field: str, value: Any, message: str) -> None:
        self.field, self.value, self.message = field, value, message
        shown = "" if value is MISSING else f" {_shown(field, value, ())}"
        super().__init__(f"{field}{shown}: {message}")


_T = TypeVar("_T")


def checked(value: _T | None, field: str) -> _T:
    """``value`` of an optional setting that preflight has already required for this host (``field`` names it):
    a deploy step that finds it unset ran without preflight, which is a bug, not bad host data."""
    if value is None:
        raise RuntimeError(f"{field} is not set: preflight requires it before this step (run roles.preflight first)")
    return value


class ConfigError(ValueError):
    """Bad host data: ``"{host}: {field} {value}: {message}"`` (one line; secret values hidden)."""

    def __init__(self, host: str, field: str, value: Any, message: str, secrets: Iterable[str] = ()) -> None:
        self.host, self.field, self.value, self.message = host, field, value, message
        shown = "" if value is MISSING else f" {_shown(field, value, secrets)}"
        super().__init__(" ".join(f"{host}: {field}{shown}: {message}".split()))


def _shown(field: str, value: Any, secrets: Iterable[str]) -> str:
    if looks_secret(field):
        return "<hidden>"
    try:
        text = repr(value) if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - a value that cannot even be formatted
        text = f"<{type(value).__name__}>"
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<hidden>")
    return text if len(text) <= 80 else text[:77] + "..."


class RoleSettings(BaseModel):
    """Base of every role's settings: unknown keys are errors, empty strings are refused, values are
    frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_min_length=1)


@dataclass(frozen=True)
class Role:
    """What a role registers: its name (the key prefix), its settings model and its cross-checks.

    ``checks(cfg)`` sees the whole :class:`HostConfig` (every role's settings, the instance type, the
    platform) and raises :class:`FieldProblem`. ``on_connect(host, cfg)`` is called by preflight for
    every host once its data is valid, before anything else is asked of the host (e.g. to tune the
    connection). ``host_checks(host, cfg)`` is called by preflight once every host's data and OS are
    known, for checks that need a fact of the host; it raises :class:`FieldProblem` too. ``order`` sorts
    roles in documentation and checks.
    """

    name: str
    settings: type[RoleSettings]
    summary: str = ""
    checks: Callable[[HostConfig], None] | None = None
    order: int = 50
    on_connect: Callable[[Any, HostConfig], None] | None = None
    host_checks: Callable[[Any, HostConfig], None] | None = None

    def keys(self) -> list[str]:
        return [f"{self.name}_{f}" for f in self.settings.model_fields]


@dataclass(frozen=True)
class HostConfig:
    """Everything the roles need to know about one host, validated. ``cfg.triton`` is the triton role's
    settings, ``cfg.docker`` the docker role's, and so on."""

    name: str
    instance: catalog.InstanceType
    platform: Platform | None
    imds_endpoint: str
    settings: Mapping[str, RoleSettings] = field(repr=False)

    def __getattr__(self, name: str) -> Any:
        settings = self.__dict__.get("settings") or {}
        if name in settings:
            return settings[name]
        raise AttributeError(f"HostConfig has no role or attribute {name!r}")


# -- merging and splitting ------------------------------------------------------------------------------

def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Later layers win; a ``None`` in a later layer does not hide a default (pyinfra data can hold None
    for "unset", e.g. ``os.environ.get`` of a missing variable)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is not None or key not in merged:
                merged[key] = value
    return merged


def defaults(roles: Sequence[Role]) -> dict[str, Any]:
    """Every role's defaults as flat data keys."""
    out: dict[str, Any] = {}
    for role in roles:
        for name, info in role.settings.model_fields.items():
            out[f"{role.name}_{name}"] = info.get_default(call_default_factory=True)
    return out


def known_keys(roles: Sequence[Role]) -> list[str]:
    return sorted({k for r in roles for k in r.keys()} | set(TOP_LEVEL))


def suggestion(key: str, known: Sequence[str], cutoff: float = 0.8) -> str | None:
    """A known key this one is a near miss of (a typo, another case, a misspelt prefix), else None."""
    if key in known:
        return None
    lowered = {k.lower(): k for k in known}
    if key.lower() in lowered:
        return lowered[key.lower()]
    close = difflib.get_close_matches(key, known, n=1, cutoff=cutoff)
    return close[0] if close else None


#: Keys that were renamed or removed, and what to do instead (kubespray's ``removed_vars``): a host that still
#: sets one gets a one-line error that says so, not "unknown setting". Keep entries for a release at least.
RENAMED: dict[str, str] = {
    # the agent role took the agent's interpreter from the models role
    "models_agent_python": "renamed to agent_python",
}


def split(data: Mapping[str, Any], roles: Sequence[Role]) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """``({role: {field: value}}, [(unknown key, suggestion)])``. A key with a role's prefix must be one of
    its fields; any other key that is a near miss of a known key is reported too. Other keys (users' own
    data, connector settings) pass."""
    by_name = {r.name: r for r in roles}
    known = known_keys(roles)
    sections: dict[str, dict[str, Any]] = {r.name: {} for r in roles}
    unknown: list[tuple[str, str]] = []
    for key, value in data.items():
        if not isinstance(key, str) or key in TOP_LEVEL:
            continue
        if key in RENAMED:
            unknown.append((key, RENAMED[key]))
            continue
        prefix, _, rest = key.partition("_")
        role = by_name.get(prefix)
        if role is not None and rest:
            if rest in role.settings.model_fields:
                sections[prefix][rest] = value
                continue
            hint = suggestion(key, known)
            unknown.append((key, f"; did you mean {hint}?" if hint else f" (the {prefix} role has no such setting)"))
            continue
        hint = suggestion(key, known, cutoff=0.85)  # users keep their own keys: only clear near misses
        if hint and not key.startswith("_"):
            unknown.append((key, f"; did you mean {hint}?"))
    return sections, unknown


def flat_field(section: str, loc: Sequence[Any]) -> str:
    """``("servers", 1, "devices")`` in section ``triton`` -> ``triton_servers[1].devices``; a mapping's key that is
    no name is quoted: ``("releases", "2.32.0")`` in section ``neuron`` -> ``neuron_releases['2.32.0']``."""
    out = f"{section}_{loc[0]}" if loc else section
    for part in loc[1:]:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if str(part).isidentifier() else f"[{str(part)!r}]"
    return out


def http_url(value: str | None) -> str | None:
    """Validate an http(s):// (or file://) URL; trailing slashes dropped."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected an http(s):// URL")
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https", "file") or not (parsed.netloc or parsed.scheme == "file"):
        raise ValueError("expected an http(s):// URL")
    return value.rstrip("/") if parsed.scheme != "file" else value


_REF_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"^(?:{_REF_DOMAIN}/)?{_REF_COMPONENT}(?:/{_REF_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")


def image_reference(value: str | None) -> str | None:
    """Validate a Docker image reference (the distribution reference grammar: registry, path, tag, digest)."""
    if value is not None and (len(value) > 255 or not _REFERENCE.match(value)):
        raise ValueError("expected a Docker image reference like registry.example.com/team/tritonserver:24.10")
    return value


_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_~:-]*(=[A-Za-z0-9.+_~:*-]+)?")


def package_name(value: Any, placeholders: tuple[str, ...] = ()) -> Any:
    """A package name as apt and dnf take it (``name`` or ``name=version``; ``{placeholder}`` where the role
    substitutes one), nothing a shell reads as syntax; a list: each. None passes."""
    for name in value if isinstance(value, (list, tuple)) else [value]:
        if name is None:
            continue
        bare = str(name)
        for p in placeholders:
            bare = bare.replace("{" + p + "}", "0")
        if not _PACKAGE.fullmatch(bare):
            extra = f" ({', '.join('{' + p + '}' for p in placeholders)} substituted)" if placeholders else ""
            raise ValueError(f"expected a package name: letters, digits and . + _ ~ : -, optionally =VERSION{extra}; "
                             f"not {name!r}")
    return value


def matching(pattern: str, message: str) -> Callable[[Any], Any]:
    """A validator: the value (when set) must match ``pattern`` as a whole (a trailing newline is not let
    through by ``$``), else ``message``."""
    regex = re.compile(pattern)

    def check(value: Any) -> Any:
        if value is not None and not regex.fullmatch(str(value)):
            raise ValueError(message)
        return value

    return check


def absolute_path(value: str | None) -> str | None:
    """A host path: absolute, and not the root directory itself."""
    if value is not None and (not value.startswith("/") or value.rstrip("/") == ""):
        raise ValueError("expected an absolute path of its own (not /)")
    return value


#: A package version as apt and dnf take it (``1.17.3-1``, ``535.183.01-1``, ``2.30.2.0-dkms``, ``1:2.30.2.0``,
#: ``2.32.0``, ``550``) or a pattern of one (``1.17.*``, ``2.30.2.0*``): a digit first, then letters, digits and
#: ``. + ~ _ -``, and at most one ``*``, at the end. No spaces, no shell metacharacters, never empty.
_VERSION = re.compile(r"(?:\d{1,9}:)?\d[A-Za-z0-9.+~_-]{0,63}\*?")


def version(value: str) -> str:
    """Validate a package version or version pattern (see :data:`Version`)."""
    if not _VERSION.fullmatch(value):
        raise ValueError("invalid version: expected a package version like 1.17.3-1 or a pattern like 1.17.*")
    return value


#: The one type of every setting that is a package, driver or toolkit version (or a pattern of one). Roles may
#: check more (e.g. that the Neuron compatibility table can order it), never less.
Version = Annotated[str, AfterValidator(version)]


def _limit(value: int) -> int:
    if value == 0:
        raise ValueError("expected -1 (unlimited) or a positive limit")
    return value


#: A resource limit (ulimit, rlimit): -1 for unlimited or a positive number; 0 and values below -1 are refused.
#: The upper bound is what Docker and the kernel take (int64).
Limit = Annotated[int, Field(ge=-1, le=2**63 - 1), AfterValidator(_limit)]


# -- validation -------------------------------------------------------------------------------------------

def validate_section(role: Role, values: Mapping[str, Any], context: Mapping[str, Any]) -> RoleSettings:
    """One role's settings; a problem raises :class:`FieldProblem` with the flat field name."""
    try:
        return role.settings.model_validate(dict(values), context=dict(context))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if p != "__root__")
        # a union's member name (e.g. "str", "list[int]") is not part of the user's field
        loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {"str", "int", "list"})))
        value = err.get("input", MISSING)
        message = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if err["type"] == "missing":
            value, message = MISSING, "missing (no default; set it in host or group data)"
        elif err["type"] == "extra_forbidden" and loc:
            hint = suggestion(str(loc[-1]), _field_names(role.settings))
            message += f"; did you mean {hint}?" if hint else f"; allowed: {', '.join(_field_names(role.settings, loc))}"
        raise FieldProblem(flat_field(role.name, loc), value, message) from None


def _field_names(model: type[BaseModel], loc: Sequence[Any] = ()) -> list[str]:
    """Field names of the (nested) model at ``loc``; without ``loc``, of the model and its sub-models."""
    names: list[str] = []
    models = [model]
    while models:
        m = models.pop()
        for name, info in m.model_fields.items():
            names.append(name)
            for arg in getattr(info.annotation, "__args__", ()) + (info.annotation,):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    models.append(arg)
    if loc:
        keys = [p for p in loc[:-1] if isinstance(p, str)]
        for key in keys:
            field_info = model.model_fields.get(key)
            for arg in (getattr(field_info.annotation, "__args__", ()) + (field_info.annotation,)) if field_info else ():
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    model = arg
        return list(model.model_fields)
    return names


def load_host_config(
    host: str,
    data: Mapping[str, Any],
    roles: Sequence[Role],
    *,
    instance_type_lookup: Callable[[], str | None] | None = None,
    platform: Platform | None = None,
) -> HostConfig:
    """Validate one host's data (merged over the roles' defaults) into a :class:`HostConfig`.

    ``instance_type_lookup`` is called only when ``instance_type`` is absent (e.g. reads IMDS on the host).
    Raises :class:`ConfigError` for the first problem found.
    """
    roles = sorted(roles, key=lambda r: (r.order, r.name))
    merged = merge(defaults(roles), data)
    secrets = [v for k, v in merged.items() if isinstance(v, str) and isinstance(k, str) and looks_secret(k)
               and len(v) >= 8]

    def fail(problem: FieldProblem) -> ConfigError:
        return ConfigError(host, problem.field, problem.value, problem.message, secrets)

    sections, unknown = split(merged, roles)
    for key, hint in unknown:
        what = hint if key in RENAMED else f"unknown setting{hint}"
        raise ConfigError(host, key, merged[key], what, secrets)

    try:
        imds = http_url(merged.get("imds_endpoint") or DEFAULT_IMDS) or DEFAULT_IMDS
    except ValueError as exc:
        raise ConfigError(host, "imds_endpoint", merged.get("imds_endpoint"), str(exc)) from None
    instance = _instance(host, merged.get("instance_type"), instance_type_lookup)
    context = {"instance": instance, "platform": platform}
    settings: dict[str, RoleSettings] = {}
    try:
        for role in roles:
            settings[role.name] = validate_section(role, sections[role.name], context)
        cfg = HostConfig(name=host, instance=instance, platform=platform, imds_endpoint=imds, settings=settings)
        for role in roles:
            if role.checks is not None:
                role.checks(cfg)
    except FieldProblem as problem:
        raise fail(problem) from None
    return cfg


def _instance(host: str, name: Any, lookup: Callable[[], str | None] | None) -> catalog.InstanceType:
    if not name and lookup is not None:
        name = lookup()
    if not name:
        raise ConfigError(host, "instance_type", MISSING,
                          "missing: set it in the inventory (e.g. 'inf2.xlarge'), or make IMDS reachable from the host")
    if not isinstance(name, str):
        raise ConfigError(host, "instance_type", name, "expected an instance type name like 'inf2.xlarge'")
    try:
        return catalog.get(name)
    except catalog.UnknownInstanceType as exc:
        raise ConfigError(host, "instance_type", name, "unknown instance type; " + str(exc).split("; ", 1)[-1]) from None
