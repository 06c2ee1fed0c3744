"""Neuron host preparation (the ``setup-pre-container.sh`` replacement): signed repo, kernel headers,
pinned driver and tools, legacy cleanup, module autoload, PATH, EFA, and a device check against the
instance type. Does nothing on non-Neuron hosts."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import KernelVersion, LinuxDistribution
from pyinfra.operations import apt, dnf, files, systemd

from roles import operations
from roles.facts import PackageFamily
from roles.operations import apt_update_needed
from roles.preflight import config_for
from tritonfleet import compat
from tritonfleet.config import HostConfig
from tritonfleet.templating import template_path

DEFAULTS = {
    # Neuron SDK release whose component versions are pinned (see neuron_releases).
    "neuron_sdk_release": compat.DEFAULT_SDK_RELEASE,
    # SDK release -> {package: version}; versions are pinned as "<version>*".
    "neuron_releases": compat.NEURON_RELEASES,
    # Neuron apt repository URL.
    "neuron_apt_url": "https://apt.repos.neuron.amazonaws.com",
    # apt suite; None = the OS codename (jammy, noble, bookworm).
    "neuron_apt_suite": None,
    # dnf repository (Amazon Linux 2023).
    "neuron_yum_url": "https://yum.repos.neuron.amazonaws.com",
    # Repository key URL; None = <repo>/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB.
    "neuron_key_url": None,
    # Expected key fingerprint (required on Neuron hosts; a mismatch fails before anything is installed).
    "neuron_key_fingerprint": None,
    # aws-neuronx-tools on the host (neuron-ls, neuron-top, neuron-monitor).
    "neuron_install_tools": True,
    # aws-neuronx-runtime-lib on the host (off: the runtime belongs in the Triton image).
    "neuron_install_runtime": False,
    # aws-neuronx-collectives on the host (off: it belongs in the image).
    "neuron_install_collectives": False,
    # aws-neuronx-oci-hook (only for AWS_NEURON_VISIBLE_DEVICES-style containers).
    "neuron_install_oci_hook": False,
    # inf1 stays on the last driver line that supports it.
    "neuron_inf1_dkms_pin": compat.INF1_DKMS_PIN,
    # Explicit aws-neuronx-dkms version pattern (overrides the release table and the inf1 pin).
    "neuron_dkms_version": None,
    # Stop/remove neuron-rtd (aws-neuron-runtime) and replace aws-neuron-dkms by aws-neuronx-dkms.
    "neuron_remove_legacy": True,
    # Install headers for the running kernel so DKMS can build the driver.
    "neuron_kernel_headers": True,
    # EFA: "auto" on instance types that have it (trn1.32xlarge, trn1n, trn2), "always" or "never".
    "efa_install": "auto",
    # EFA installer tarball.
    "efa_installer_url": "https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz",
    # Its detached signature; None = <installer_url>.sig.
    "efa_signature_url": None,
    # The key the signature is checked with.
    "efa_key_url": "https://efa-installer.amazonaws.com/aws-efa-installer.key",
    # Expected fingerprint of that key (required where EFA is installed).
    "efa_key_fingerprint": None,
}

LEGACY_PACKAGES = ["aws-neuron-runtime", "aws-neuron-dkms", "aws-neuron-tools"]
NEURON_BIN = "/opt/aws/neuron/bin"


def _apt(cfg: HostConfig, kernel: str, codename: str) -> None:
    key = "/etc/apt/keyrings/neuron.gpg"
    files.directory(name="apt keyrings dir", path="/etc/apt/keyrings", mode="755")
    operations.keyring(name="Neuron repository key (fingerprint checked)",
                                 src=cfg.neuron.effective_key_url(), dest=key,
                                 fingerprint=cfg.neuron.key_fingerprint)
    suite = cfg.neuron.apt_suite or codename
    # The whole file: an old unsigned line (setup-pre-container.sh, DLAMIs) would conflict with signed-by.
    repo = files.put(name="Neuron apt repository", dest="/etc/apt/sources.list.d/neuron.list", mode="644",
                     src=StringIO(f"deb [signed-by={key}] {cfg.neuron.apt_url} {suite} main\n"))
    apt.update(name="apt-get update (Neuron repository changed)", _if=[repo.did_change])
    if cfg.neuron.remove_legacy:
        systemd.service(name="Stop legacy neuron-rtd", service="neuron-rtd.service", running=False)
        apt.packages(name="Remove legacy Neuron packages", packages=LEGACY_PACKAGES, present=False)
    if cfg.neuron.kernel_headers:
        headers = [f"linux-headers-{kernel}"]
        apt.packages(name="Kernel headers for the running kernel", packages=headers, no_recommends=True,
                     update=apt_update_needed(headers), cache_time=3600)
    operations.pinned_packages(name="Neuron driver and tools (pinned)", pins=cfg.package_pins(), family="apt")


def _dnf(cfg: HostConfig, kernel: str) -> None:
    key = "/etc/pki/rpm-gpg/RPM-GPG-KEY-AMAZON-AWS-NEURON"
    operations.keyring(name="Neuron repository key (fingerprint checked)", src=cfg.neuron.effective_key_url(),
                       dest=key, fingerprint=cfg.neuron.key_fingerprint, armored=True)
    files.template(name="Neuron dnf repository", src=str(template_path("neuron/neuron.repo.j2")),
                   dest="/etc/yum.repos.d/neuron.repo", mode="644", url=cfg.neuron.yum_url, key_path=key)
    if cfg.neuron.remove_legacy:
        systemd.service(name="Stop legacy neuron-rtd", service="neuron-rtd.service", running=False)
        dnf.packages(name="Remove legacy Neuron packages", packages=LEGACY_PACKAGES, present=False)
    if cfg.neuron.kernel_headers:
        dnf.packages(name="Kernel headers for the running kernel", packages=[f"kernel-devel-{kernel}"])
    operations.pinned_packages(name="Neuron driver and tools (pinned)", pins=cfg.package_pins(), family="dnf")


@deploy("Neuron", data_defaults=DEFAULTS)
def neuron() -> None:
    cfg = config_for()
    if not cfg.is_neuron:
        host.noop(f"{cfg.instance.name} has no Neuron devices")
        return
    family = host.get_fact(PackageFamily)
    kernel = host.get_fact(KernelVersion)
    if family == "apt":
        distro = host.get_fact(LinuxDistribution)
        codename = (distro.get("release_meta") or {}).get("VERSION_CODENAME") or ""
        _apt(cfg, kernel, codename)
        headers = f"linux-headers-{kernel}"
    else:
        _dnf(cfg, kernel)
        headers = f"kernel-devel-{kernel}"
    files.line(name="Load the neuron module at boot", path="/etc/modules-load.d/neuron.conf", line="neuron")
    files.template(name="Neuron tools on PATH", src=str(template_path("neuron/profile.sh.j2")),
                   dest="/etc/profile.d/neuron.sh", mode="644", bin_dir=NEURON_BIN)
    if cfg.efa_wanted():
        operations.efa_installer(name="EFA (installer signature verified)", installer_url=cfg.efa.installer_url,
                                 signature_url=cfg.efa.effective_signature_url(), key_url=cfg.efa.key_url,
                                 fingerprint=cfg.efa.key_fingerprint)
    operations.verify_neuron_devices(name="Neuron devices match the instance type",
                                     instance_type=cfg.instance.name, expected=cfg.instance.device_count,
                                     headers_package=headers)
