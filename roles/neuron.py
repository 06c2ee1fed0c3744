"""Neuron host preparation (the ``setup-pre-container.sh`` replacement): signed repo, kernel headers,
pinned driver and tools, legacy cleanup, module autoload, PATH, and a device check against the
instance type. Does nothing on non-Neuron hosts."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator
from pyinfra import host, logger
from pyinfra.api import deploy

from roles import context, platform
from roles import operations as ops
from roles.context import config_for
from roles.facts.accelerators import NeuronState
from roles.facts.system import KernelVersion
from roles.operations.packages import matches
from tritonfleet import compat, imagespec
from tritonfleet.config import (
    MISSING,
    FieldProblem,
    HostConfig,
    Role,
    RoleSettings,
    Version,
    checked,
    http_url,
)
from tritonfleet.fingerprints import fingerprint
from tritonfleet.templating import render

LEGACY_PACKAGES = ["aws-neuron-runtime", "aws-neuron-dkms", "aws-neuron-tools"]
NEURON_BIN = "/opt/aws/neuron/bin"
REPO_ID = imagespec.NEURON_REPO


def _version(v: str | None) -> str | None:
    if v is not None:
        compat.parse_version(v)
    return v


class Settings(RoleSettings):
    sdk_release: Version = Field(compat.DEFAULT_SDK_RELEASE, description=(
        "Neuron SDK release whose component versions are pinned (see neuron_releases)."))
    releases: dict[Version, dict[str, Version]] = Field(compat.NEURON_RELEASES, description=(
        'SDK release -> {package: version}; versions are pinned by whole components ("2.29" -> "2.29.*").'))
    apt_url: str = Field("https://apt.repos.neuron.amazonaws.com", description="Neuron apt repository URL.")
    apt_suite: str | None = Field(None, description="apt suite; None = the OS codename (jammy, noble, bookworm).")
    yum_url: str = Field("https://yum.repos.neuron.amazonaws.com", description="dnf repository (Amazon Linux 2023).")
    key_url: str | None = Field(None, description="Repository key URL; None = <apt_url>/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB.")
    key_fingerprint: str | None = Field(None, description=(
        "Expected key fingerprint (required on Neuron hosts; a mismatch fails before anything is installed)."))
    install_tools: bool = Field(True, description="aws-neuronx-tools on the host (neuron-ls, neuron-top, neuron-monitor).")
    install_runtime: bool = Field(False, description=(
        "aws-neuronx-runtime-lib on the host (off: the runtime belongs in the Triton image)."))
    install_collectives: bool = Field(False, description="aws-neuronx-collectives on the host (off: it belongs in the image).")
    install_oci_hook: bool = Field(False, description=(
        "aws-neuronx-oci-hook (only for AWS_NEURON_VISIBLE_DEVICES-style containers)."))
    inf1_dkms_pin: Version = Field(compat.INF1_DKMS_PIN, description="inf1 stays on the last driver line that supports it.")
    dkms_version: Version | None = Field(None, description=(
        "Explicit aws-neuronx-dkms version pattern (overrides the release table and the inf1 pin)."))
    remove_legacy: bool = Field(True, description=(
        "Stop/remove neuron-rtd (aws-neuron-runtime) and replace aws-neuron-dkms by aws-neuronx-dkms."))
    kernel_headers: bool = Field(True, description="Install headers for the running kernel so DKMS can build the driver.")

    _urls = field_validator("apt_url", "yum_url", "key_url")(lambda v: http_url(v))
    _fpr = field_validator("key_fingerprint")(lambda v: fingerprint(v))
    _ver = field_validator("sdk_release", "inf1_dkms_pin", "dkms_version")(lambda v: _version(v))

    @field_validator("releases")
    @classmethod
    def _releases(cls, v: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for release, versions in v.items():
            compat.parse_version(release)
            for package, version in versions.items():
                try:
                    compat.parse_version(version)
                except (ValueError, TypeError):
                    raise ValueError(f"[{release!r}][{package!r}]: invalid version {version!r}") from None
        return v

    @model_validator(mode="after")
    def _release_known(self) -> Settings:
        if self.sdk_release not in self.releases:
            raise FieldProblem("neuron_sdk_release", self.sdk_release,
                               f"not in neuron_releases (known: {', '.join(sorted(self.releases))})")
        if compat.DKMS not in self.versions():
            raise FieldProblem(f"neuron_releases[{self.sdk_release!r}]", self.versions(),
                               f"missing versions for {compat.DKMS}")
        return self

    def versions(self) -> dict[str, str]:
        return self.releases[self.sdk_release]

    def effective_key_url(self) -> str:
        return self.key_url or f"{self.apt_url}/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"


def dkms_pin(cfg: HostConfig) -> str:
    """Version pattern for aws-neuronx-dkms: data, else the inf1 pin on inf1, else the release's driver."""
    n: Settings = cfg.neuron
    if n.dkms_version:
        return compat.version_pin(n.dkms_version)
    return compat.driver_pin(cfg.instance.neuron_arch, n.sdk_release, n.releases, n.inf1_dkms_pin)


def package_pins(cfg: HostConfig) -> dict[str, str]:
    """Host Neuron packages to install -> version pattern."""
    n: Settings = cfg.neuron
    versions = n.versions()
    in_framework = cfg.instance.runtime_in_framework
    wanted = {
        compat.TOOLS: n.install_tools,
        compat.RUNTIME_LIB: n.install_runtime and not in_framework,
        compat.COLLECTIVES: n.install_collectives and not in_framework,
        "aws-neuronx-oci-hook": n.install_oci_hook,
    }
    pins = {compat.DKMS: dkms_pin(cfg)}
    for package, on in wanted.items():
        if on:
            pins[package] = compat.version_pin(versions[package]) if package in versions else "2.*"
    return pins


def _checks(cfg: HostConfig) -> None:
    if not cfg.instance.is_neuron:
        return
    if not cfg.neuron.key_fingerprint:
        raise FieldProblem("neuron_key_fingerprint", MISSING,
                           "required on Neuron hosts: the expected fingerprint of the Neuron repository key "
                           "(gpg --show-keys --with-colons GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB)")
    if cfg.instance.runtime_in_framework:
        pin = dkms_pin(cfg)
        field = "neuron_dkms_version" if cfg.neuron.dkms_version else "neuron_inf1_dkms_pin"
        if not compat.at_least(compat.INF1_DKMS_PIN, pin):
            raise FieldProblem(field, pin, f"{cfg.instance.family} needs {compat.DKMS} 2.24 or older "
                                           "(2.24 is the last driver that supports inf1)")


def _pin_field(cfg: HostConfig) -> tuple[str, str]:
    """The setting that chooses the host's driver pin, and its value."""
    n: Settings = cfg.neuron
    if n.dkms_version:
        return "neuron_dkms_version", n.dkms_version
    if cfg.instance.neuron_arch == "inf1":
        return "neuron_inf1_dkms_pin", n.inf1_dkms_pin
    return "neuron_sdk_release", n.sdk_release


def kernel_gate(cfg: HostConfig, state: dict[str, Any], installs_driver: bool) -> tuple[compat.Finding, str, Any]:
    """The kernel -> driver link of a Neuron host before a deploy changes it, with the field a refusal names.

    The driver judged is the one the host will run: the neuron role's pin (:func:`dkms_pin`) where the deploy
    installs it (``installs_driver``) and the host has another (DKMS builds it then; a known break of the running
    kernel refuses it: field = the setting that chose the pin), else the installed one, with whether DKMS built it
    for the running kernel (not built refuses it: field ``kernel``). ``state``: the NeuronState fact."""
    kernel, installed = state.get("kernel"), state.get("driver_package")
    subject = f"host {cfg.name}"
    pin = dkms_pin(cfg)
    if installs_driver and not matches([installed] if installed else [], pin):
        field, value = _pin_field(cfg)
        if not kernel:
            return (compat.Finding(subject, compat.KERNEL_DRIVER, compat.WARN,
                                   f"the running kernel is unknown, so whether {compat.DKMS} {pin} builds on it is "
                                   "unknown", "check `uname -r` on the host"), field, value)
        found = compat.check_kernel(kernel, pin, None, subject=subject)
        line = found.line.replace(f"the host has {pin}", f"this deploy installs {pin}")
        return compat.Finding(subject, found.link, found.verdict, line, found.fix), field, value
    if not installed:
        return (compat.Finding(subject, compat.KERNEL_DRIVER, compat.WARN,
                               f"no {compat.DKMS} on the host, and this deploy installs none",
                               "run deploys/neuron.py (or deploys/serve.py) first"), "kernel", kernel or MISSING)
    if not kernel:
        return (compat.Finding(subject, compat.KERNEL_DRIVER, compat.WARN, "the running kernel is unknown",
                               "check `uname -r` on the host"), "kernel", MISSING)
    return compat.check_kernel(kernel, installed, state.get("dkms_built"), subject=subject), "kernel", kernel


def _host_checks(h, cfg: HostConfig) -> None:
    """Refuse a Neuron host whose running kernel will not run the driver (:func:`kernel_gate`); a warning (a
    version or kernel the table cannot judge) is printed, the deploy goes on."""
    if not cfg.instance.is_neuron:
        return
    finding, field, value = kernel_gate(cfg, h.get_fact(NeuronState), context.installs_driver(h.state))
    message = f"{finding.link}: {finding.line}" + (f": {finding.fix}" if finding.fix else "")
    if finding.verdict == compat.FAIL:
        raise FieldProblem(field, value, message)
    if finding.verdict == compat.WARN:
        logger.warning(f"{h.name}: compatibility warning: {message}")


ROLE = Role("neuron", Settings, "Neuron repository, pinned driver and tools, legacy cleanup, device check",
            checks=_checks, order=20, host_checks=_host_checks)


@deploy("Neuron")
def neuron() -> None:
    cfg = config_for()
    if not cfg.instance.is_neuron:
        host.noop(f"{cfg.instance.name} has no Neuron devices")
        return
    n: Settings = cfg.neuron
    kernel = host.get_fact(KernelVersion)
    platform.signed_repo("Neuron", REPO_ID, key_url=n.effective_key_url(),
                         fingerprint=checked(n.key_fingerprint, "neuron_key_fingerprint"),
                         apt_url=n.apt_url, apt_suite=n.apt_suite, yum_url=n.yum_url)
    if n.remove_legacy:
        ops.services.units(name="Stop legacy neuron-rtd", units=["neuron-rtd.service"], running=False)
        platform.remove("Remove legacy Neuron packages", LEGACY_PACKAGES)
    if n.kernel_headers:
        platform.install("Kernel headers for the running kernel", ["kernel-headers"], kernel=kernel)
    platform.install("Neuron driver and tools (pinned)", package_pins(cfg))
    ops.files.managed(name="neuron module at boot, Neuron tools on PATH", files={
        "/etc/modules-load.d/neuron.conf": "neuron\n",
        "/etc/profile.d/neuron.sh": render("neuron/profile.sh.j2", bin_dir=NEURON_BIN)})
    ops.accelerators.verify_neuron_devices(
        name="Neuron devices match the instance type", instance_type=cfg.instance.name,
        expected=cfg.instance.device_count,
        headers_package=checked(platform.current().package("kernel-headers", kernel=kernel), "kernel-headers"))
