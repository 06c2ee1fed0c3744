"""Stand-in .deb packages for the sandbox fleet (Neuron / NVIDIA drivers, tools, kernel headers).

The sandbox hosts are real Debian 12 containers; only the accelerator hardware is simulated. These packages
carry the real package names and versions so that roles install, pin, upgrade and remove them exactly as
on EC2, but their contents are small stand-ins that read ``/etc/tritonfleet-sandbox/hardware.json``
(see ``docs/sandbox-hardware.md``):

* ``aws-neuronx-dkms`` / ``aws-neuron-dkms`` and ``nvidia-driver-*-server``: maintainer scripts that play
  the kernel driver (device nodes, a tmpfiles.d entry for reboots, the "loaded" version in
  ``/run/tritonfleet-sandbox/<kind>-driver-version``).
* ``aws-neuronx-tools`` (``neuron-ls``, ``neuron-monitor``, ``neuron-monitor-prometheus.py``), ``nvidia-smi``,
  ``nvidia-ctk``: tools that answer from the device nodes (and processes) that actually exist.
* runtime-lib / collectives / oci-hook / legacy packages: marker files.

Build with :func:`build_standin_debs` (:mod:`.debbuild`): cached (a package is rebuilt only when its
inputs change) and reproducible (``SOURCE_DATE_EPOCH``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tritonfleet.sandbox.debbuild import (
    StandinFile,
    StandinPackage,
    build_debs,
)

DATA_DIR = Path(__file__).with_name("standins")

# Versions (Neuron SDK 2.32 pins and older lines; see docs/research neuron-ec2.md section 1.7).
NEURON_DKMS_VERSIONS = ("2.30.2.0", "2.29.8.0", "2.26.10.0", "2.24.13.0")
NEURON_TOOLS_VERSIONS = ("2.32.28.0", "2.26.14.0")
NEURON_RUNTIME_VERSIONS = ("2.34.10.0", "2.28.19.0")
NEURON_COLLECTIVES_VERSIONS = ("2.34.10.0", "2.28.27.0")
NEURON_OCI_HOOK_VERSION = "2.12.10.0"
LEGACY_DKMS_VERSION = "1.5.0.0"
LEGACY_RUNTIME_VERSION = "1.6.24.0"
LEGACY_TOOLS_VERSION = "1.7.25.0"
NVIDIA_DRIVERS = {  # package -> (version, CUDA version shown by nvidia-smi)
    "nvidia-driver-550-server": ("550.127.05-0ubuntu1", "12.4"),
    "nvidia-driver-570-server": ("570.172.08-0ubuntu1", "12.8"),
}
NVIDIA_TOOLKIT_VERSION = "1.17.8-1"
EFA_INSTALLER_VERSION = "1.43.1"

_PKG_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def _template(name: str, **values: str) -> str:
    """Read ``standins/<name>`` and fill ``@@KEY@@`` placeholders (``COMMON`` = the Neuron helpers)."""
    text = (DATA_DIR / name).read_text(encoding="utf-8")
    if "@@COMMON@@" in text:
        text = text.replace("@@COMMON@@", (DATA_DIR / "neuron_common.py.in").read_text(encoding="utf-8"))
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    leftover = re.findall(r"@@[A-Z_]+@@", text)
    if leftover:
        raise ValueError(f"unfilled placeholders in {name}: {sorted(set(leftover))}")
    return text


def _exe(path: str, text: str) -> StandinFile:
    return StandinFile(path, text.encode(), 0o755)


def _doc(name: str, text: str) -> StandinFile:
    return StandinFile(f"/usr/share/doc/{name}/README.sandbox", text.encode())


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:4])


def _driver_scripts(package: str, version: str, kind: str, support: str = "all") -> dict[str, str]:
    text = _template("driver_maint.py.in", PACKAGE=package, VERSION=version, KIND=kind, SUPPORT=support)
    return {"postinst": text, "prerm": text, "postrm": text}


def _neuron_dkms(name: str, version: str, support: str, conflicts: str) -> StandinPackage:
    module_src = "aws-neuronx" if name == "aws-neuronx-dkms" else "aws-neuron"
    dkms_conf = (
        f'PACKAGE_NAME="{module_src}"\nPACKAGE_VERSION="{version}"\nBUILT_MODULE_NAME[0]="neuron"\n'
        'DEST_MODULE_LOCATION[0]="/kernel/drivers/neuron/"\nAUTOINSTALL="yes"\n'
        "# SANDBOX STAND-IN: nothing is compiled; the maintainer scripts simulate the loaded module.\n"
    )
    scripts = _driver_scripts(name, version, "neuron", support)
    return StandinPackage(
        name=name,
        version=version,
        summary=f"Neuron kernel driver (DKMS) {version}",
        repo="neuron",
        section="kernel",
        depends=("python3",),
        conflicts=(conflicts,),
        replaces=(conflicts,),
        files=(
            StandinFile(f"/usr/src/{module_src}-{version}/dkms.conf", dkms_conf.encode()),
            _exe(f"/etc/kernel/header_postinst.d/{name}-sandbox", scripts["postinst"]),
            _doc(name, f"SANDBOX STAND-IN {name} {version}: creates /dev/neuron* from hardware.json.\n"),
        ),
        scripts=scripts,
    )


def _neuron_tools(name: str, version: str, legacy: bool, conflicts: str) -> StandinPackage:
    values = {"PACKAGE": name, "VERSION": version, "LEGACY": "True" if legacy else "False"}
    top = "#!/bin/sh\necho 'neuron-top: SANDBOX STAND-IN has no TUI; use neuron-monitor or neuron-ls' >&2\nexit 1\n"
    files = [
        _exe("/opt/aws/neuron/bin/neuron-ls", _template("neuron_ls.py.in", **values)),
        _exe("/opt/aws/neuron/bin/neuron-top", top),
        _doc(name, f"SANDBOX STAND-IN {name} {version}.\n"),
    ]
    if not legacy:
        values.pop("LEGACY")
        files[1:1] = [
            _exe("/opt/aws/neuron/bin/neuron-monitor", _template("neuron_monitor.py.in", **values)),
            # the Prometheus exporter; like AWS's script it needs a python3 with prometheus_client
            _exe(
                "/opt/aws/neuron/bin/neuron-monitor-prometheus.py",
                _template("neuron_monitor_prometheus.py.in", **values),
            ),
        ]
    return StandinPackage(
        name=name,
        version=version,
        summary=f"Neuron tools (neuron-ls, neuron-top{'' if legacy else ', neuron-monitor'}) {version}",
        repo="neuron",
        depends=("python3",),
        conflicts=(conflicts,),
        replaces=(conflicts,),
        files=tuple(files),
    )


def _neuron_marker(
    name: str, version: str, libs: Iterable[str], summary: str, **kw: Any
) -> StandinPackage:
    files = [
        StandinFile(
            f"/opt/aws/neuron/lib/{lib}", f"SANDBOX STAND-IN {name} {version}: not a library\n".encode()
        )
        for lib in libs
    ]
    files.append(StandinFile(f"/opt/aws/neuron/share/{name}/VERSION", f"{version}\n".encode()))
    files.append(_doc(name, f"SANDBOX STAND-IN {name} {version}: marker files only.\n"))
    return StandinPackage(
        name=name, version=version, summary=summary, repo="neuron", files=tuple(files), **kw
    )


_RTD_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] || [ "$1" = abort-upgrade ]; then
    if [ -z "$DPKG_ROOT" ] && [ -x /usr/bin/deb-systemd-helper ]; then
        deb-systemd-helper unmask neuron-rtd.service >/dev/null || true
        deb-systemd-helper enable neuron-rtd.service >/dev/null || true
    else
        mkdir -p "$DPKG_ROOT/etc/systemd/system/multi-user.target.wants"
        ln -sf /lib/systemd/system/neuron-rtd.service \\
            "$DPKG_ROOT/etc/systemd/system/multi-user.target.wants/neuron-rtd.service"
    fi
    if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
        if [ -x /usr/bin/deb-systemd-invoke ]; then
            deb-systemd-invoke restart neuron-rtd.service >/dev/null || true
        else
            systemctl restart neuron-rtd.service || true
        fi
    fi
fi
exit 0
"""
_RTD_PRERM = """#!/bin/sh
set -e
if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    if [ -x /usr/bin/deb-systemd-invoke ]; then
        deb-systemd-invoke stop neuron-rtd.service >/dev/null || true
    else
        systemctl stop neuron-rtd.service || true
    fi
fi
exit 0
"""
_RTD_POSTRM = """#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
    if [ -z "$DPKG_ROOT" ] && [ -x /usr/bin/deb-systemd-helper ]; then
        deb-systemd-helper purge neuron-rtd.service >/dev/null || true
    fi
    rm -f "$DPKG_ROOT/etc/systemd/system/multi-user.target.wants/neuron-rtd.service"
    if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
    fi
fi
exit 0
"""
_RTD_UNIT = """[Unit]
Description=Neuron Runtime Daemon (tritonfleet SANDBOX STAND-IN)
After=network.target

[Service]
Type=simple
ExecStart=/opt/aws/neuron/bin/neuron-rtd
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

_HEADERS_POSTINST = """#!/bin/sh
set -e
# Like the real linux-headers packages: let DKMS (here: the driver stand-ins) build for this kernel.
if [ "$1" = configure ] && [ -d "$DPKG_ROOT/etc/kernel/header_postinst.d" ]; then
    run-parts --report --exit-on-error --arg=@@RELEASE@@ --arg="$DPKG_ROOT/usr/src/linux-headers-@@RELEASE@@" \\
        "$DPKG_ROOT/etc/kernel/header_postinst.d"
fi
exit 0
"""

_OCI_DAEMON_JSON = """{
    "default-runtime": "oci-neuron",
    "runtimes": {
        "oci-neuron": {
            "path": "/opt/aws/neuron/bin/oci_neuron_hook_wrapper.sh",
            "runtimeArgs": []
        }
    }
}
"""


def linux_headers_package(kernel_release: str) -> StandinPackage:
    """``linux-headers-<kernel_release>``: marks the running kernel's headers as installed."""
    name = f"linux-headers-{kernel_release}"
    if not _PKG_NAME_RE.match(name):
        raise ValueError(f"kernel release {kernel_release!r} does not make a valid Debian package name")
    m = re.match(r"\d+(\.\d+)*", kernel_release)
    version = f"{m.group(0) if m else '0'}-0sandbox1"
    return StandinPackage(
        name=name,
        version=version,
        summary=f"Linux kernel headers for {kernel_release}",
        repo="neuron",
        section="kernel",
        files=(
            StandinFile(
                f"/usr/src/{name}/.sandbox", f"SANDBOX STAND-IN headers for {kernel_release}\n".encode()
            ),
            StandinFile(f"/lib/modules/{kernel_release}/build", link=f"/usr/src/{name}"),
        ),
        scripts={"postinst": _HEADERS_POSTINST.replace("@@RELEASE@@", kernel_release)},
    )


def standin_packages(kernel_release: str) -> list[StandinPackage]:
    """All stand-in package definitions (``repo`` is ``neuron``, ``nvidia`` or ``debian``)."""
    pkgs: list[StandinPackage] = []
    for v in NEURON_DKMS_VERSIONS:
        support = "all" if _version_tuple(v) < (2, 25) else "no-inf1"  # drivers above 2.24 dropped Inf1
        pkgs.append(_neuron_dkms("aws-neuronx-dkms", v, support, "aws-neuron-dkms"))
    pkgs.append(_neuron_dkms("aws-neuron-dkms", LEGACY_DKMS_VERSION, "inf1-only", "aws-neuronx-dkms"))
    for v in NEURON_TOOLS_VERSIONS:
        pkgs.append(_neuron_tools("aws-neuronx-tools", v, False, "aws-neuron-tools"))
    pkgs.append(_neuron_tools("aws-neuron-tools", LEGACY_TOOLS_VERSION, True, "aws-neuronx-tools"))
    for v in NEURON_RUNTIME_VERSIONS:
        pkgs.append(
            _neuron_marker("aws-neuronx-runtime-lib", v, ["libnrt.so.1"], f"Neuron Runtime library {v}")
        )
    for v in NEURON_COLLECTIVES_VERSIONS:
        pkgs.append(
            _neuron_marker("aws-neuronx-collectives", v, ["libnccom.so.2"], f"Neuron collectives library {v}")
        )
    oci = _neuron_marker(
        "aws-neuronx-oci-hook",
        NEURON_OCI_HOOK_VERSION,
        [],
        f"Neuron OCI hook {NEURON_OCI_HOOK_VERSION}",
        provides=("aws-neuronx-oci-hooks",),
    )
    wrapper = '#!/bin/sh\n# SANDBOX STAND-IN: the real wrapper runs oci-add-hooks; this one only calls runc.\nexec runc "$@"\n'
    extra = (
        _exe("/opt/aws/neuron/bin/oci_neuron_hook_wrapper.sh", wrapper),
        StandinFile("/opt/aws/neuron/share/docker-daemon.json", _OCI_DAEMON_JSON.encode()),
    )
    pkgs.append(dataclasses.replace(oci, files=oci.files + extra))
    rtd_values = {"PACKAGE": "aws-neuron-runtime", "VERSION": LEGACY_RUNTIME_VERSION}
    pkgs.append(
        StandinPackage(
            name="aws-neuron-runtime",
            version=LEGACY_RUNTIME_VERSION,
            summary=f"legacy Neuron runtime daemon neuron-rtd {LEGACY_RUNTIME_VERSION}",
            repo="neuron",
            depends=("python3",),
            files=(
                _exe("/opt/aws/neuron/bin/neuron-rtd", _template("neuron_rtd.py.in", **rtd_values)),
                StandinFile("/lib/systemd/system/neuron-rtd.service", _RTD_UNIT.encode()),
                _doc("aws-neuron-runtime", "SANDBOX STAND-IN: neuron-rtd only sleeps.\n"),
            ),
            scripts={"postinst": _RTD_POSTINST, "prerm": _RTD_PRERM, "postrm": _RTD_POSTRM},
        )
    )
    pkgs.append(linux_headers_package(kernel_release))
    for name, (version, cuda) in NVIDIA_DRIVERS.items():
        upstream = version.split("-", 1)[0]
        others = tuple(n for n in NVIDIA_DRIVERS if n != name)  # explicit, so plain dpkg -i swaps them too
        smi = _template(
            "nvidia_smi.py.in", PACKAGE=name, VERSION=version, VERSION_UPSTREAM=upstream, CUDA=cuda
        )
        pkgs.append(
            StandinPackage(
                name=name,
                version=version,
                summary=f"NVIDIA driver metapackage {upstream} (server branch) with nvidia-smi",
                repo="debian",
                section="restricted/misc",
                depends=("python3",),
                conflicts=("nvidia-driver-binary", *others),
                replaces=("nvidia-driver-binary", *others),
                provides=("nvidia-driver-binary",),
                files=(_exe("/usr/bin/nvidia-smi", smi), _doc(name, f"SANDBOX STAND-IN {name} {version}.\n")),
                scripts=_driver_scripts(name, version, "nvidia"),
            )
        )
    upstream = NVIDIA_TOOLKIT_VERSION.split("-", 1)[0]
    ctk = _template(
        "nvidia_ctk.py.in",
        PACKAGE="nvidia-container-toolkit-base",
        VERSION=NVIDIA_TOOLKIT_VERSION,
        VERSION_UPSTREAM=upstream,
    )
    runtime = '#!/bin/sh\n# SANDBOX STAND-IN nvidia-container-runtime: no GPU injection, plain runc.\nexec runc "$@"\n'
    pkgs.append(
        StandinPackage(
            name="nvidia-container-toolkit-base",
            version=NVIDIA_TOOLKIT_VERSION,
            summary=f"NVIDIA Container Toolkit base (nvidia-ctk, nvidia-container-runtime) {upstream}",
            repo="nvidia",
            section="utils",
            depends=("python3",),
            files=(
                _exe("/usr/bin/nvidia-ctk", ctk),
                _exe("/usr/bin/nvidia-container-runtime", runtime),
                _doc("nvidia-container-toolkit-base", "SANDBOX STAND-IN.\n"),
            ),
        )
    )
    hook = "#!/bin/sh\n# SANDBOX STAND-IN nvidia-container-runtime-hook: does nothing.\nexit 0\n"
    pkgs.append(
        StandinPackage(
            name="nvidia-container-toolkit",
            version=NVIDIA_TOOLKIT_VERSION,
            summary=f"NVIDIA Container Toolkit {upstream}",
            repo="nvidia",
            section="utils",
            depends=(f"nvidia-container-toolkit-base (= {NVIDIA_TOOLKIT_VERSION})",),
            files=(
                _exe("/usr/bin/nvidia-container-runtime-hook", hook),
                _doc("nvidia-container-toolkit", "SANDBOX STAND-IN.\n"),
            ),
        )
    )
    return pkgs


def build_standin_debs(outdir: Path, kernel_release: str) -> list[Path]:
    """Build (or reuse) every stand-in package into ``outdir``; returns the .deb paths (see
    :func:`debbuild.build_debs`)."""
    return build_debs(standin_packages(kernel_release), outdir)


def standin_repo_map(kernel_release: str) -> dict[str, str]:
    """``{deb file name: repository name}`` for the stand-ins."""
    return {p.deb_filename: p.repo for p in standin_packages(kernel_release)}


def efa_installer_files() -> dict[str, tuple[bytes, int]]:
    """Files of the stand-in ``aws-efa-installer/`` directory: ``{relative path: (content, mode)}``."""
    installer = (DATA_DIR / "efa_installer.sh").read_text(encoding="utf-8")
    installer = installer.replace("@@EFA_VERSION@@", EFA_INSTALLER_VERSION)
    return {
        "aws-efa-installer/efa_installer.sh": (installer.encode(), 0o755),
        "aws-efa-installer/stand-in/fi_info": ((DATA_DIR / "fi_info.sh").read_bytes(), 0o755),
        "aws-efa-installer/README.sandbox": (
            f"SANDBOX STAND-IN aws-efa-installer {EFA_INSTALLER_VERSION} (tritonfleet): marker files only.\n".encode(),
            0o644,
        ),
    }
