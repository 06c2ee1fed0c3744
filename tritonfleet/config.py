"""Typed host configuration, validated once per host before any operation is queued (preflight).

Host data is flat (pyinfra style): ``neuron_sdk_release``, ``docker_data_root``, ``triton_servers``…
Each role's ``DEFAULTS`` dict documents and defaults its own keys; :func:`load_host_config` merges
them under the host's data, groups keys by prefix into one pydantic model per concern and returns a
:class:`HostConfig`. Any problem becomes a :class:`ConfigError` whose text names the host, the field
and what was expected::

    inf2-a: triton_servers[1].devices [3, 5]: devices must be contiguous (inf2.24xlarge has devices 0-5)

Unknown keys with a known prefix (``neuron_sdk_relase``) are errors with a suggestion, so typos do
not silently fall back to defaults.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tritonfleet import catalog, compat
from tritonfleet.placement import Placement, PlacementError, place

SECTIONS = ("base", "docker", "neuron", "efa", "nvidia", "triton", "models")
TOP_LEVEL = ("instance_type", "imds_endpoint", "s3_endpoint", "s3_region", "models_s3_uri")


class ConfigError(ValueError):
    """Bad host data: ``"{host}: {field} {value}: {message}"`` (one line)."""

    def __init__(self, host: str, field: str, value: Any, message: str) -> None:
        self.host, self.field, self.value, self.message = host, field, value, message
        if value is not _MISSING and "secret" in field:
            value = "<hidden>"
        shown = "" if value is _MISSING else f" {_short(value)}"
        super().__init__(f"{host}: {field}{shown}: {message}")


_MISSING = object()


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _url(value: str | None, field: str = "") -> str | None:
    if value is None:
        return None
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https", "file") or not (parsed.netloc or parsed.scheme == "file"):
        raise ValueError("expected an http(s):// URL")
    return value.rstrip("/") if parsed.scheme != "file" else value


_FPR = re.compile(r"^[0-9A-F]{40}$")


def _fingerprint(value: str | None) -> str | None:
    if value is None:
        return None
    norm = value.replace(" ", "").upper()
    if not _FPR.match(norm):
        raise ValueError("expected a 40-hex-digit OpenPGP fingerprint (gpg --show-keys --with-colons KEYFILE)")
    return norm


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class BaseSettings(_Section):
    packages_apt: list[str]
    packages_dnf: list[str]
    memlock_limit: str

    @field_validator("memlock_limit")
    @classmethod
    def _memlock(cls, v: str) -> str:
        if v != "unlimited" and not v.isdigit():
            raise ValueError("expected 'unlimited' or a number of KiB")
        return v


class DockerSettings(_Section):
    package_apt: str
    package_dnf: str
    data_root: str | None
    log_max_size: str
    log_max_file: int = Field(ge=1, le=100)
    live_restore: bool
    ulimit_memlock: int
    ulimit_stack: int = Field(gt=0)

    @field_validator("data_root")
    @classmethod
    def _abs(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("expected an absolute path")
        return v

    @field_validator("log_max_size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not re.match(r"^\d+[kmg]$", v):
            raise ValueError("expected a size like 100m")
        return v


class NeuronSettings(_Section):
    sdk_release: str
    releases: dict[str, dict[str, str]]
    apt_url: str
    apt_suite: str | None
    yum_url: str
    key_url: str | None
    key_fingerprint: str | None
    install_tools: bool
    install_runtime: bool
    install_collectives: bool
    install_oci_hook: bool
    inf1_dkms_pin: str
    dkms_version: str | None
    remove_legacy: bool
    kernel_headers: bool

    _u = field_validator("apt_url", "yum_url", "key_url")(lambda v: _url(v))
    _f = field_validator("key_fingerprint")(lambda v: _fingerprint(v))

    def versions(self) -> dict[str, str]:
        return self.releases[self.sdk_release]

    def effective_key_url(self) -> str:
        return self.key_url or f"{self.apt_url}/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"


class EfaSettings(_Section):
    install: Literal["auto", "always", "never"]
    installer_url: str
    signature_url: str | None
    key_url: str
    key_fingerprint: str | None

    _u = field_validator("installer_url", "signature_url", "key_url")(lambda v: _url(v))
    _f = field_validator("key_fingerprint")(lambda v: _fingerprint(v))

    def effective_signature_url(self) -> str:
        return self.signature_url or self.installer_url + ".sig"


class NvidiaSettings(_Section):
    driver_branch: str
    driver_package_apt: str
    driver_package_dnf: str | None
    toolkit_apt_url: str
    toolkit_yum_url: str
    key_url: str | None
    key_fingerprint: str | None
    toolkit_version: str | None

    _u = field_validator("toolkit_apt_url", "toolkit_yum_url", "key_url")(lambda v: _url(v))
    _f = field_validator("key_fingerprint")(lambda v: _fingerprint(v))

    @field_validator("driver_branch")
    @classmethod
    def _branch(cls, v: str) -> str:
        if not re.match(r"^\d{3}$", str(v)):
            raise ValueError("expected a driver branch like '550'")
        return str(v)

    def driver_package(self, family: Literal["apt", "dnf"]) -> str | None:
        pattern = self.driver_package_apt if family == "apt" else self.driver_package_dnf
        return pattern.format(branch=self.driver_branch) if pattern else None

    def effective_key_url(self) -> str:
        return self.key_url or "https://nvidia.github.io/libnvidia-container/gpgkey"


class TritonSettings(_Section):
    image: str | None
    image_source: Literal["build", "pull", "archive"]
    ecr_credential_helper: bool
    base_image: str
    image_archive: str | None
    image_archive_src: str | None
    neuron_frameworks: list[str] | None
    neuron_pip_index: str
    servers: list[dict[str, Any]]
    shm_size: str
    bind_address: str
    models: list[str]
    model_control_mode: Literal["explicit", "none", "poll"]
    repository_header: str
    repository_secret: str | None
    python_shm_default_byte_size: int = Field(ge=1048576)
    extra_args: list[str]
    health_timeout: int = Field(ge=1, le=3600)
    neuron_rt_log_level: Literal["TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL"]
    neuron_runtime_version: str | None
    restart_policy: Literal["no", "always", "unless-stopped", "on-failure"]
    host_network: bool
    udev_mount: bool
    metrics: bool

    _u = field_validator("neuron_pip_index")(lambda v: _url(v))

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str) -> str:
        if not re.match(r"^\d+[kmg]?$", v):
            raise ValueError("expected a size like 1g or 512m")
        return v

    @field_validator("bind_address")
    @classmethod
    def _addr(cls, v: str) -> str:
        ipaddress.ip_address(v)
        return v

    @field_validator("repository_header")
    @classmethod
    def _header(cls, v: str) -> str:
        if not re.match(r"^[a-z0-9-]+$", v):
            raise ValueError("expected a lowercase header name (a-z, 0-9, '-'): gRPC metadata keys are lowercase "
                             "and Triton compares them exactly")
        return v

    @field_validator("repository_secret")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        if v is not None and (len(v) < 16 or not re.match(r"^[A-Za-z0-9._~+/-]+$", v)):
            raise ValueError("expected at least 16 characters of [A-Za-z0-9._~+/-]")
        return v

    @field_validator("models")
    @classmethod
    def _models(cls, v: list[str]) -> list[str]:
        for m in v:
            if not re.match(r"^[A-Za-z0-9_.-]+$", m):
                raise ValueError(f"model name {m!r} is not a valid Triton model directory name")
        return v


class ModelsSettings(_Section):
    source: str | None
    dir: str

    @field_validator("dir")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") in ("", "/etc", "/usr", "/var"):
            raise ValueError("expected an absolute directory of its own, e.g. /opt/tritonfleet/models")
        return v.rstrip("/")


class HostConfig(BaseModel):
    """Everything the roles need to know about one host, validated."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    instance: catalog.InstanceType
    imds_endpoint: str
    s3_endpoint: str | None
    s3_region: str | None
    models_s3_uri: str | None
    base: BaseSettings
    docker: DockerSettings
    neuron: NeuronSettings
    efa: EfaSettings
    nvidia: NvidiaSettings
    triton: TritonSettings
    models: ModelsSettings
    placements: tuple[Placement, ...]

    @property
    def is_neuron(self) -> bool:
        return self.instance.accelerator == "neuron"

    @property
    def is_gpu(self) -> bool:
        return self.instance.accelerator == "gpu"

    def dkms_pin(self) -> str:
        """Version pattern for aws-neuronx-dkms: inf1 stays on the last line that supports it."""
        if self.neuron.dkms_version:
            return self.neuron.dkms_version
        if self.instance.family == "inf1":
            return self.neuron.inf1_dkms_pin
        return self.neuron.versions()["aws-neuronx-dkms"] + "*"

    def package_pins(self) -> dict[str, str]:
        """Host Neuron packages to install -> version pattern (apt ``=`` / dnf ``-`` syntax added by roles)."""
        versions = self.neuron.versions()
        pins = {"aws-neuronx-dkms": self.dkms_pin()}
        wanted = {
            "aws-neuronx-tools": self.neuron.install_tools,
            "aws-neuronx-runtime-lib": self.neuron.install_runtime and self.instance.family != "inf1",
            "aws-neuronx-collectives": self.neuron.install_collectives and self.instance.family != "inf1",
            "aws-neuronx-oci-hook": self.neuron.install_oci_hook,
        }
        for pkg, on in wanted.items():
            if on:
                pins[pkg] = versions[pkg] + "*" if pkg in versions else "2.*"
        return pins

    def efa_wanted(self) -> bool:
        """EFA is installed by the Neuron role (trn multi-node); GPU hosts are out of its scope."""
        if not self.is_neuron:
            return False
        return self.efa.install == "always" or (self.efa.install == "auto" and self.instance.efa)

    def container_runtime_version(self) -> str | None:
        """aws-neuronx-runtime-lib version inside the Triton image (data, or the SDK release's)."""
        if not self.is_neuron or self.instance.family == "inf1":
            return self.triton.neuron_runtime_version
        return self.triton.neuron_runtime_version or self.neuron.versions().get("aws-neuronx-runtime-lib")


_MODELS: dict[str, type[_Section]] = {
    "base": BaseSettings, "docker": DockerSettings, "neuron": NeuronSettings, "efa": EfaSettings,
    "nvidia": NvidiaSettings, "triton": TritonSettings, "models": ModelsSettings,
}


def _split(data: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    sections: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    unknown: list[str] = []
    for key, value in data.items():
        if key in TOP_LEVEL:
            continue
        prefix, _, rest = key.partition("_")
        if prefix in sections and rest:
            if rest in _MODELS[prefix].model_fields:
                sections[prefix][rest] = value
            else:
                unknown.append(key)
    return sections, unknown


def _flat_field(section: str, loc: tuple) -> str:
    field = f"{section}_{loc[0]}"
    for part in loc[1:]:
        field += f"[{part}]" if isinstance(part, int) else f".{part}"
    return field


def known_keys(defaults: Mapping[str, Any]) -> list[str]:
    return sorted(set(defaults) | set(TOP_LEVEL) | {"triton_servers"})


def load_host_config(
    host: str,
    data: Mapping[str, Any],
    defaults: Mapping[str, Any],
    *,
    instance_type_lookup: Callable[[], str | None] | None = None,
) -> HostConfig:
    """Validate one host's data (merged over ``defaults``) into a :class:`HostConfig`.

    ``instance_type_lookup`` is called only when ``instance_type`` is absent (e.g. reads IMDS on the host).
    Raises :class:`ConfigError` for the first problem found.
    """
    merged = {**defaults, **{k: v for k, v in data.items() if v is not None or k not in defaults}}
    sections, unknown = _split(merged)
    for key in unknown:
        close = difflib.get_close_matches(key, known_keys(defaults), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(host, key, merged[key], f"unknown setting{hint}")

    itype_name = merged.get("instance_type")
    if not itype_name and instance_type_lookup is not None:
        itype_name = instance_type_lookup()
    if not itype_name:
        raise ConfigError(host, "instance_type", _MISSING,
                          "missing: set it in the inventory (e.g. 'inf2.xlarge'), or make IMDS reachable from the host")
    if not isinstance(itype_name, str):
        raise ConfigError(host, "instance_type", itype_name, "expected an instance type name like 'inf2.xlarge'")
    try:
        instance = catalog.get(itype_name)
    except catalog.UnknownInstanceType as exc:
        raise ConfigError(host, "instance_type", itype_name, "unknown instance type; " + str(exc).split("; ", 1)[-1]) from None

    models: dict[str, _Section] = {}
    for section, model in _MODELS.items():
        try:
            models[section] = model.model_validate(sections[section])
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = tuple(err["loc"])
            field = _flat_field(section, loc) if loc else section
            value = err.get("input", _MISSING)
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                value, msg = _MISSING, "missing (no default; set it in host or group data)"
            raise ConfigError(host, field, value, msg) from None

    for key in ("imds_endpoint", "s3_endpoint"):
        try:
            _url(merged.get(key))
        except ValueError as exc:
            raise ConfigError(host, key, merged.get(key), str(exc)) from None

    neuron: NeuronSettings = models["neuron"]  # type: ignore[assignment]
    triton: TritonSettings = models["triton"]  # type: ignore[assignment]
    if neuron.sdk_release not in neuron.releases:
        raise ConfigError(host, "neuron_sdk_release", neuron.sdk_release,
                          f"not in neuron_releases (known: {', '.join(sorted(neuron.releases))})")
    missing = [p for p in ("aws-neuronx-dkms",) if p not in neuron.versions()]
    if missing:
        raise ConfigError(host, f"neuron_releases[{neuron.sdk_release!r}]", neuron.versions(),
                          f"missing versions for {', '.join(missing)}")

    try:
        placements = tuple(place(instance, triton.servers, bind_address=triton.bind_address))
    except PlacementError as exc:
        raise ConfigError(host, exc.field, exc.value, exc.message) from None

    cfg = HostConfig(
        name=host, instance=instance, imds_endpoint=merged.get("imds_endpoint") or "http://169.254.169.254",
        s3_endpoint=merged.get("s3_endpoint"), s3_region=merged.get("s3_region"),
        models_s3_uri=merged.get("models_s3_uri"), placements=placements, **models,  # type: ignore[arg-type]
    )
    _cross_checks(cfg)
    return cfg


def _cross_checks(cfg: HostConfig) -> None:
    host = cfg.name
    if cfg.is_neuron and not cfg.neuron.key_fingerprint:
        raise ConfigError(host, "neuron_key_fingerprint", _MISSING,
                          "required on Neuron hosts: the expected fingerprint of the Neuron repository key "
                          "(gpg --show-keys --with-colons GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB)")
    if cfg.is_gpu and not cfg.nvidia.key_fingerprint:
        raise ConfigError(host, "nvidia_key_fingerprint", _MISSING,
                          "required on GPU hosts: the expected fingerprint of the nvidia-container-toolkit key")
    if cfg.efa_wanted() and not cfg.efa.key_fingerprint:
        raise ConfigError(host, "efa_key_fingerprint", _MISSING,
                          f"required because {cfg.instance.name} installs EFA (or set efa_install: never)")
    if cfg.triton.image_source == "archive" and not (cfg.triton.image_archive or cfg.triton.image_archive_src):
        raise ConfigError(host, "triton_image_archive", _MISSING,
                          "required when triton_image_source is 'archive' (path of a `docker save` tarball)")
    if cfg.triton.image_source in ("archive", "pull") and not cfg.triton.image:
        raise ConfigError(host, "triton_image", _MISSING,
                          f"required when triton_image_source is '{cfg.triton.image_source}'")
    if cfg.triton.model_control_mode == "explicit" and not cfg.triton.repository_secret:
        raise ConfigError(host, "triton_repository_secret", _MISSING,
                          "required: a per-fleet secret that guards Triton's model-repository API")
    if cfg.instance.family == "inf1" and cfg.neuron.dkms_version and not cfg.neuron.dkms_version.startswith("2.24"):
        raise ConfigError(host, "neuron_dkms_version", cfg.neuron.dkms_version,
                          "inf1 needs aws-neuronx-dkms 2.24.* or older (2.24 is the last driver that supports inf1)")
    runtime = cfg.container_runtime_version()
    if cfg.is_neuron and runtime:
        try:
            compat.check_driver_runtime(cfg.dkms_pin(), runtime, neuron_arch=cfg.instance.neuron_arch)
        except compat.CompatibilityError as exc:
            raise ConfigError(host, "triton_neuron_runtime_version", runtime, str(exc)) from None
