"""Stand-in packages and signed apt repositories of the sandbox fleet.

The maintainer scripts are exercised with a real ``dpkg --root ... --force-script-chrootless`` into a
temporary admin dir (``$DPKG_ROOT`` relocates every path the scripts touch), so install, upgrade,
downgrade and removal run exactly the way dpkg runs them on a host.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from tritonfleet.sandbox import aptrepo, debbuild, standins

KERNEL = os.uname().release
IS_ROOT = os.geteuid() == 0
needs_tools = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("dpkg-deb", "dpkg", "apt-ftparchive", "gpg")),
    reason="needs dpkg-deb, dpkg, apt-ftparchive (apt-utils) and gpg",
)
needs_root = pytest.mark.skipif(not IS_ROOT, reason="mknod needs root")

INF2 = {
    "instance_type": "inf2.24xlarge",
    "instance_id": "i-0sandbox00000001",
    "availability_zone": "us-east-1a",
    "accelerator": "neuron",
    "device_name": "Inferentia2",
    "device_count": 6,
    "cores_per_device": 2,
    "device_memory_bytes": 34359738368,
    "logical_neuroncore_config": None,
    "driver_creates_devices": True,
}
TRN2 = {
    **INF2,
    "instance_type": "trn2.48xlarge",
    "device_name": "Trainium2",
    "device_count": 16,
    "cores_per_device": 4,
    "device_memory_bytes": 103079215104,
    "logical_neuroncore_config": 2,
}
INF1 = {
    **INF2,
    "instance_type": "inf1.xlarge",
    "device_name": "Inferentia",
    "device_count": 1,
    "cores_per_device": 4,
    "device_memory_bytes": 8589934592,
}
G5 = {
    **INF2,
    "instance_type": "g5.12xlarge",
    "accelerator": "gpu",
    "device_name": "A10G",
    "device_count": 4,
    "cores_per_device": 1,
    "device_memory_bytes": 24146608128,
}


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not shutil.which("dpkg-deb"):
        pytest.skip("dpkg-deb missing")
    out = tmp_path_factory.mktemp("debs")
    return {p.name: p for p in standins.build_standin_debs(out, KERNEL)}


def deb(debs: dict[str, Path], name: str, version: str | None = None) -> Path:
    found = [
        p
        for n, p in debs.items()
        if n.split("_")[0] == name and (version is None or n.split("_")[1] == version)
    ]
    assert len(found) == 1, (name, version, sorted(debs))
    return found[0]


class Host:
    """A dpkg admin dir + relocated root: what dpkg and the stand-in tools see as ``/``."""

    def __init__(self, root: Path, hardware: dict | None) -> None:
        self.root = root
        for d in (
            "var/lib/dpkg/info",
            "var/lib/dpkg/updates",
            "var/lib/dpkg/triggers",
            "dev",
            "run",
            "etc/tritonfleet-sandbox",
        ):
            (root / d).mkdir(parents=True, exist_ok=True)
        for f in ("status", "available"):
            (root / "var/lib/dpkg" / f).touch()
        if hardware is not None:
            self.set_hardware(hardware)
        self.env = {**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)}

    def set_hardware(self, hw: dict) -> None:
        (self.root / "etc/tritonfleet-sandbox/hardware.json").write_text(json.dumps(hw))

    def dpkg(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        cmd = [
            "dpkg",
            f"--root={self.root}",
            "--force-script-chrootless",
            "--force-not-root",
            "--force-depends",
            "--log=/dev/null",
            *map(str, args),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def run(self, tool: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / tool.lstrip("/")), *args],
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=30,
        )

    def status(self, package: str) -> str:
        admindir = self.root / "var/lib/dpkg"
        cmd = ["dpkg-query", f"--admindir={admindir}", "-W", "-f=${Status}", package]
        return subprocess.run(cmd, capture_output=True, text=True).stdout

    def nodes(self, prefix: str) -> dict[str, tuple[int, int]]:
        out = {}
        for p in (self.root / "dev").iterdir():
            if p.name.startswith(prefix):
                st = p.lstat()
                assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
                out[p.name] = (os.major(st.st_rdev), os.minor(st.st_rdev))
        return out

    def driver_version(self, kind: str = "neuron") -> str | None:
        p = self.root / f"run/tritonfleet-sandbox/{kind}-driver-version"
        return p.read_text().strip() if p.exists() else None


# ---------------------------------------------------------------------------------------- packages


@needs_tools
def test_packages_have_real_names_versions_and_sandbox_metadata(debs: dict[str, Path]) -> None:
    names = {(n.split("_")[0], n.split("_")[1]) for n in debs}
    for want in [("aws-neuronx-dkms", v) for v in ("2.30.2.0", "2.26.10.0", "2.24.13.0")] + [
        ("aws-neuronx-tools", "2.32.28.0"),
        ("aws-neuronx-runtime-lib", "2.34.10.0"),
        ("aws-neuronx-runtime-lib", "2.28.19.0"),
        ("aws-neuronx-collectives", "2.34.10.0"),
        ("aws-neuron-dkms", "1.5.0.0"),
        ("aws-neuron-runtime", "1.6.24.0"),
        ("nvidia-driver-550-server", "550.127.05-0ubuntu1"),
        ("nvidia-container-toolkit", "1.17.8-1"),
        (f"linux-headers-{KERNEL}", None),
    ]:
        assert any(n == want[0] and (want[1] is None or v == want[1]) for n, v in names), want
    assert any(n == "aws-neuronx-dkms" and v.startswith("2.29.") for n, v in names)
    info = subprocess.run(
        ["dpkg-deb", "-f", str(deb(debs, "aws-neuronx-dkms", "2.30.2.0"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Maintainer: tritonfleet sandbox <sandbox@tritonfleet.invalid>" in info
    assert "Description: SANDBOX STAND-IN" in info
    assert "Conflicts: aws-neuron-dkms" in info and "Replaces: aws-neuron-dkms" in info
    contents = subprocess.run(
        ["dpkg-deb", "-c", str(deb(debs, "aws-neuronx-tools", "2.32.28.0"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "root/root" in contents and "./opt/aws/neuron/bin/neuron-ls" in contents


@needs_tools
def test_build_is_cached_and_reproducible(tmp_path: Path) -> None:
    first = standins.build_standin_debs(tmp_path / "a", KERNEL)
    mtimes = {p: p.stat().st_mtime_ns for p in first}
    again = standins.build_standin_debs(tmp_path / "a", KERNEL)
    assert again == first and all(p.stat().st_mtime_ns == mtimes[p] for p in again)  # nothing rebuilt
    other = standins.build_standin_debs(tmp_path / "b", KERNEL)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in other]  # byte-identical
    # a different kernel release replaces only the headers package; the stale one is removed
    changed = standins.build_standin_debs(tmp_path / "a", "6.1.0-99-amd64")
    assert any(p.name.startswith("linux-headers-6.1.0-99-amd64_") for p in changed)
    assert not list((tmp_path / "a").glob(f"linux-headers-{KERNEL}_*.deb"))


def test_invalid_kernel_release_is_rejected() -> None:
    with pytest.raises(ValueError):
        standins.linux_headers_package("6.1_Bad")


# ------------------------------------------------------------------------------ Neuron driver + tools


@needs_tools
@needs_root
def test_a_kernel_the_driver_does_not_build_on_leaves_no_module_and_no_devices(tmp_path: Path,
                                                                              debs: dict[str, Path]) -> None:
    """hardware.json's dkms_build_fails plays a kernel DKMS cannot build the driver for: its next build (here the
    kernel-headers hook, as after a kernel upgrade) prints DKMS's error and takes the module and devices away."""
    host = Host(tmp_path / "root", INF2)
    host.dpkg("-i", deb(debs, f"linux-headers-{KERNEL}"))
    host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.30.2.0"))
    module = host.root / f"lib/modules/{KERNEL}/updates/dkms/neuron.ko"
    assert module.is_file() and len(host.nodes("neuron")) == 6
    host.set_hardware({**INF2, "dkms_build_fails": "kernel too new for this driver"})
    hook = host.run("/etc/kernel/header_postinst.d/aws-neuronx-dkms-sandbox", KERNEL)
    assert hook.returncode == 0, hook.stderr
    assert f"Error! Bad return status for module build on kernel: {KERNEL} (" in hook.stderr
    assert not module.exists() and host.nodes("neuron") == {} and host.driver_version() is None
    host.set_hardware(INF2)  # a kernel it builds on again
    host.run("/etc/kernel/header_postinst.d/aws-neuronx-dkms-sandbox", KERNEL)
    assert module.is_file() and len(host.nodes("neuron")) == 6
    # a module that builds but does not load (driver_creates_devices: false) is still built: no devices only
    host.set_hardware({**INF2, "driver_creates_devices": False})
    host.run("/etc/kernel/header_postinst.d/aws-neuronx-dkms-sandbox", KERNEL)
    assert module.is_file() and host.nodes("neuron") == {}


def test_neuron_driver_lifecycle_and_tools(tmp_path: Path, debs: dict[str, Path]) -> None:
    host = Host(tmp_path / "root", INF2)
    # no kernel headers: DKMS "skips the build", no devices (as on a real host)
    out = host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.30.2.0")).stdout
    assert "kernel headers for this kernel does not seem to be installed" in out
    assert host.nodes("neuron") == {} and host.driver_version() is None
    assert (host.root / "etc/modules-load.d/neuron.conf").read_text() == "neuron\n"
    assert 'KERNEL=="neuron*", MODE="0666"' in (host.root / "lib/udev/rules.d/neuron-udev.rules").read_text()
    # installing the headers runs the header_postinst.d hook: the driver gets built and loaded
    host.dpkg("-i", deb(debs, f"linux-headers-{KERNEL}"))
    assert host.nodes("neuron") == {f"neuron{i}": (250, i) for i in range(6)}
    assert host.driver_version() == "2.30.2.0"
    tmpfiles = (host.root / "etc/tmpfiles.d/tritonfleet-sandbox-neuron.conf").read_text()
    assert "c /dev/neuron5 0666 root root - 250:5" in tmpfiles and "2.30.2.0" in tmpfiles
    module = host.root / f"lib/modules/{KERNEL}/updates/dkms/neuron.ko"
    assert module.is_file()  # where `dkms install` puts the module it built (NeuronState's dkms_built)

    host.dpkg("-i", deb(debs, "aws-neuronx-tools", "2.32.28.0"))
    ls = host.run("/opt/aws/neuron/bin/neuron-ls", "-j")
    assert ls.returncode == 0, ls.stderr
    records = json.loads(ls.stdout)
    assert [r["neuron_device"] for r in records] == list(range(6))
    assert set(records[0]) == {
        "neuron_device",
        "bdf",
        "cpu_affinity",
        "numa_node",
        "connected_to",
        "nc_count",
        "memory_size",
        "neuroncore_ids",
        "neuron_processes",
    }
    assert records[5]["neuroncore_ids"] == [10, 11] and records[0]["memory_size"] == 34359738368
    assert isinstance(records[0]["numa_node"], str)
    table = host.run("/opt/aws/neuron/bin/neuron-ls").stdout
    assert table.startswith("instance-type: inf2.24xlarge\ninstance-id: i-0sandbox00000001\n")
    assert "NEURON" in table and "32 GB" in table

    mon = host.run("/opt/aws/neuron/bin/neuron-monitor", env={"TRITONFLEET_SANDBOX_MONITOR_REPORTS": "1"})
    report = json.loads(mon.stdout)
    assert set(report) == {"neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info"}
    hwinfo = report["neuron_hardware_info"]
    assert hwinfo["neuron_device_type"] == "inferentia2" and hwinfo["neuron_device_count"] == 6
    assert hwinfo["neuroncore_per_device_count"] == 2 and hwinfo["error"] == ""
    assert report["instance_info"]["instance_type"] == "inf2.24xlarge"

    # deleting a node changes what the tools report
    (host.root / "dev/neuron5").unlink()
    assert len(json.loads(host.run("/opt/aws/neuron/bin/neuron-ls", "-j").stdout)) == 5

    # downgrade to the inf1 line and back: idempotent, version follows
    host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.24.13.0"))
    assert len(host.nodes("neuron")) == 6 and host.driver_version() == "2.24.13.0"
    host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.30.2.0"))
    assert len(host.nodes("neuron")) == 6 and host.driver_version() == "2.30.2.0"

    # removal: no nodes, no run file, no tmpfiles entry; tools print the real FATA error
    host.dpkg("-r", "aws-neuronx-dkms")
    assert host.nodes("neuron") == {} and host.driver_version() is None
    assert not (host.root / "etc/tmpfiles.d/tritonfleet-sandbox-neuron.conf").exists()
    ls = host.run("/opt/aws/neuron/bin/neuron-ls")
    assert ls.returncode == 1 and ls.stdout == ""
    assert "FATA" in ls.stderr and "Failed to discover neuron devices" in ls.stderr
    assert (
        'error="Unable to read device information from the driver. Make sure aws-neuronx-dkms is installed '
        'and the neuron driver is accessible."'
    ) in ls.stderr
    mon = host.run("/opt/aws/neuron/bin/neuron-monitor", "--sandbox-reports", "1")
    assert json.loads(mon.stdout)["neuron_hardware_info"]["error"]


@needs_tools
@needs_root
def test_legacy_packages_and_inf1_driver_support(tmp_path: Path, debs: dict[str, Path]) -> None:
    host = Host(tmp_path / "root", INF1)
    host.dpkg("-i", deb(debs, f"linux-headers-{KERNEL}"))
    host.dpkg(
        "-i", deb(debs, "aws-neuron-dkms"), deb(debs, "aws-neuron-runtime"), deb(debs, "aws-neuron-tools")
    )
    assert host.nodes("neuron") == {"neuron0": (250, 0)} and host.driver_version() == "1.5.0.0"
    wants = host.root / "etc/systemd/system/multi-user.target.wants/neuron-rtd.service"
    assert wants.is_symlink() and (host.root / "lib/systemd/system/neuron-rtd.service").exists()
    legacy = host.run("/opt/aws/neuron/bin/neuron-ls").stdout
    assert "LOGICAL" in legacy and "MEMORY" in legacy and "CHANNEL 0" in legacy
    # the new driver (>2.24) replaces the legacy one but does not bind Inferentia (inf1) devices
    proc = host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.30.2.0"))
    assert "does not support Inferentia devices" in proc.stderr
    assert host.nodes("neuron") == {} and host.driver_version() == "2.30.2.0"
    assert host.status("aws-neuron-dkms") != "install ok installed"  # removed by the Conflicts
    host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.24.13.0"))  # the Inf1 pin
    assert host.nodes("neuron") == {"neuron0": (250, 0)}
    host.dpkg("-i", deb(debs, "aws-neuronx-tools", "2.32.28.0"))  # replaces aws-neuron-tools
    assert json.loads(host.run("/opt/aws/neuron/bin/neuron-ls", "-j").stdout)[0]["nc_count"] == 4
    host.dpkg("-r", "aws-neuron-runtime")
    assert not wants.exists() and not wants.is_symlink()


@needs_tools
@needs_root
def test_driver_that_does_not_load_and_trn2_lnc(tmp_path: Path, debs: dict[str, Path]) -> None:
    host = Host(tmp_path / "root", {**TRN2, "driver_creates_devices": False})
    host.dpkg("-i", deb(debs, f"linux-headers-{KERNEL}"), deb(debs, "aws-neuronx-tools", "2.32.28.0"))
    proc = host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.30.2.0"))
    assert "failed to load" in proc.stderr and host.nodes("neuron") == {}
    host.set_hardware(TRN2)
    host.dpkg("--configure", "--pending")
    host.dpkg("-i", deb(debs, "aws-neuronx-dkms", "2.30.2.0"))  # reinstall: postinst runs again
    assert len(host.nodes("neuron")) == 16
    rec = json.loads(host.run("/opt/aws/neuron/bin/neuron-ls", "-j").stdout)
    assert rec[0]["logical_neuroncore_config"] == 2 and rec[15]["neuroncore_ids"] == [60, 61, 62, 63]
    assert len(rec[0]["connected_to"]) == 4
    assert host.run("/opt/aws/neuron/bin/neuron-ls").stdout.splitlines()[2] == "logical-neuroncore-config: 2"
    mon = json.loads(host.run("/opt/aws/neuron/bin/neuron-monitor", "--sandbox-reports", "1").stdout)
    assert mon["neuron_hardware_info"]["neuron_device_type"] == "trainium2"
    assert mon["neuron_hardware_info"]["neuroncore_version"] == "v3d"


# ------------------------------------------------------------------------------------------- NVIDIA


@needs_tools
@needs_root
def test_nvidia_driver_smi_and_ctk(tmp_path: Path, debs: dict[str, Path]) -> None:
    host = Host(tmp_path / "root", G5)
    host.dpkg("-i", deb(debs, "nvidia-driver-550-server"))
    assert host.nodes("nvidia") == {**{f"nvidia{i}": (195, i) for i in range(4)}, "nvidiactl": (195, 255)}
    smi = host.run("/usr/bin/nvidia-smi", "-L")
    assert smi.returncode == 0 and smi.stdout.startswith("GPU 0: NVIDIA A10G (UUID: GPU-")
    q = host.run(
        "/usr/bin/nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"
    )
    assert q.stdout.splitlines() == ["NVIDIA A10G, 23028 MiB, 550.127.05"] * 4
    host.dpkg("-i", deb(debs, "nvidia-driver-570-server"))  # replaces the 550 branch
    q = host.run("/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    assert q.stdout.splitlines()[0].startswith("570.")
    host.dpkg("-r", "nvidia-driver-570-server")
    assert host.nodes("nvidia") == {}
    host.dpkg("-i", deb(debs, "nvidia-driver-550-server"))
    (host.root / "dev/nvidiactl").unlink()
    smi = host.run("/usr/bin/nvidia-smi")
    assert smi.returncode == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout

    host.dpkg("-i", deb(debs, "nvidia-container-toolkit-base"), deb(debs, "nvidia-container-toolkit"))
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{"log-driver": "json-file", "data-root": "/var/lib/docker"}\n')
    ctk = host.run("/usr/bin/nvidia-ctk", "runtime", "configure", "--runtime=docker", f"--config={cfg}")
    assert ctk.returncode == 0 and f"INFO[0000] Wrote updated config to {cfg}" in ctk.stderr
    first = cfg.read_bytes()
    assert json.loads(first) == {
        "data-root": "/var/lib/docker",
        "log-driver": "json-file",
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }
    assert first.startswith(b'{\n    "data-root"') and not first.endswith(b"\n")  # Go MarshalIndent format
    host.run("/usr/bin/nvidia-ctk", "runtime", "configure", "--runtime=docker", "--config", str(cfg))
    assert cfg.read_bytes() == first  # already configured: byte-identical
    runtime = (host.root / "usr/bin/nvidia-container-runtime").read_text()
    assert 'exec runc "$@"' in runtime


# ------------------------------------------------------------------------------------------ apt repos


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory, debs: dict[str, Path]) -> tuple[Path, dict]:
    """All repos, with a stand-in ``docker.io`` instead of the network fetch (that one is a slow test)."""
    if not all(shutil.which(t) for t in ("apt-ftparchive", "gpg")):
        pytest.skip("needs apt-ftparchive and gpg")
    base = tmp_path_factory.mktemp("repos")
    fake = standins.StandinPackage(
        name="docker.io", version="20.10.24+dfsg1-1+deb12u1+b6", summary="fake docker", repo="debian"
    )
    fake_deb = debbuild.build_deb(fake, base / "fake-debs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aptrepo, "fetch_debian_debs", lambda *_a, **_k: [fake_deb])
        infos = aptrepo.build_all(base / "serve", base / "cache", Path("/"), KERNEL)
    return base, infos


@needs_tools
def test_repo_layout_and_lines(repos: tuple[Path, dict]) -> None:
    base, infos = repos
    serve = base / "serve"
    assert set(infos) == {"neuron", "nvidia", "debian", "efa"}
    neuron, nvidia, debian = infos["neuron"], infos["nvidia"], infos["debian"]
    assert neuron.source_line(signed_by="/etc/apt/keyrings/neuron.gpg") == (
        "deb [signed-by=/etc/apt/keyrings/neuron.gpg] http://192.168.250.1:8080/neuron bookworm main"
    )
    assert nvidia.source_line() == "deb http://192.168.250.1:8080/nvidia/stable/deb/amd64 /"
    assert debian.url_path == "debian" and debian.suite == "bookworm"
    assert (
        (serve / "neuron/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB")
        .read_text()
        .startswith("-----BEGIN PGP PUBLIC KEY")
    )
    assert (serve / "nvidia/gpgkey").read_text().startswith("-----BEGIN PGP PUBLIC KEY")
    assert (
        "nvidia/stable/deb/$(ARCH) /"
        in (serve / "nvidia/stable/deb/nvidia-container-toolkit.list").read_text()
    )
    for info in infos.values():
        assert info.keyring_path.is_file() and info.keyring_path.read_bytes()[:1] != b"-"  # binary key
    fprs = {i.fingerprint for i in infos.values()}
    assert len(fprs) == 4  # one key per repository
    release = (serve / "neuron/dists/bookworm/Release").read_text()
    assert "Codename: bookworm" in release and "main/binary-amd64/Packages" in release
    assert "Release" not in [line.split()[-1] for line in release.splitlines() if line.startswith(" ")]
    packages = (serve / "neuron/dists/bookworm/main/binary-amd64/Packages").read_text()
    assert "Filename: pool/main/a/aws-neuronx-dkms/aws-neuronx-dkms_2.30.2.0_amd64.deb" in packages
    assert f"Package: linux-headers-{KERNEL}" in packages
    deb_pkgs = (serve / "debian/dists/bookworm/main/binary-amd64/Packages").read_text()
    assert "Package: nvidia-driver-550-server" in deb_pkgs and "Package: docker.io" in deb_pkgs


@needs_tools
def test_build_all_is_idempotent_and_rebuilds_nothing(repos: tuple[Path, dict]) -> None:
    base, infos = repos
    stamp = (base / "serve/neuron/dists/bookworm/InRelease").stat().st_mtime_ns

    def rebuilt(*_a, **_k):
        raise AssertionError("build_all rebuilt a repository whose inputs did not change")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aptrepo, "fetch_debian_debs", lambda *_a, **_k: sorted((base / "fake-debs").glob("*.deb")))
        mp.setattr(aptrepo, "_ftparchive", rebuilt)
        mp.setattr(aptrepo, "sign_release", rebuilt)
        again = aptrepo.build_all(base / "serve", base / "cache", Path("/"), KERNEL)
    assert again == infos
    assert (base / "serve/neuron/dists/bookworm/InRelease").stat().st_mtime_ns == stamp  # not re-signed


@needs_tools
def test_apt_accepts_signed_repos_and_rejects_wrong_key(repos: tuple[Path, dict], tmp_path: Path) -> None:
    base, infos = repos
    handler = type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: handler(*a, directory=str(base / "serve"), **k)
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:

        def apt(lines: list[str], *args: str) -> subprocess.CompletedProcess[str]:
            w = tmp_path / "apt"
            if args[0] == "update":  # fresh state for every source list
                shutil.rmtree(w, ignore_errors=True)
                for d in ("lists/partial", "cache/archives/partial", "sources.list.d"):
                    (w / d).mkdir(parents=True)
                shutil.copyfile("/var/lib/dpkg/status", w / "status")  # python3 is "installed"
                (w / "sources.list.d/t.list").write_text("\n".join(lines) + "\n")
            opts = [
                "-o",
                f"Dir::State::Lists={w}/lists",
                "-o",
                f"Dir::Cache={w}/cache",
                "-o",
                "Dir::Etc::SourceList=/dev/null",
                "-o",
                f"Dir::Etc::SourceParts={w}/sources.list.d",
                "-o",
                f"Dir::State::status={w}/status",
                "-o",
                "Debug::NoLocking=1",
                "-o",
                "APT::Sandbox::User=root",
            ]
            return subprocess.run(["apt-get", *opts, *args], capture_output=True, text=True, timeout=60)

        good = [
            infos["neuron"].source_line(url, str(infos["neuron"].keyring_path)),
            infos["nvidia"].source_line(url, str(infos["nvidia"].keyring_path)),
            infos["debian"].source_line(url, str(infos["debian"].keyring_path)),
        ]
        up = apt(good, "update")
        assert up.returncode == 0 and "W:" not in up.stdout + up.stderr, up.stdout + up.stderr
        dl = apt(
            good, "install", "--download-only", "-y", "aws-neuronx-dkms=2.24.13.0", "nvidia-container-toolkit"
        )
        assert dl.returncode == 0, dl.stdout + dl.stderr
        bad = [infos["neuron"].source_line(url, str(infos["nvidia"].keyring_path))]
        up = apt(bad, "update")
        assert "NO_PUBKEY" in up.stdout + up.stderr or "not signed" in up.stdout + up.stderr
    finally:
        server.shutdown()


@needs_tools
def test_efa_installer_is_signed_and_installs_markers(repos: tuple[Path, dict], tmp_path: Path) -> None:
    base, infos = repos
    efa = base / "serve/efa"
    gnupg = tmp_path / "g"
    gnupg.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(gnupg)}
    subprocess.run(
        ["gpg", "--batch", "--import", str(efa / "aws-efa-installer.key")],
        env=env,
        check=True,
        capture_output=True,
    )
    verify = subprocess.run(
        [
            "gpg",
            "--batch",
            "--verify",
            str(efa / "aws-efa-installer-latest.tar.gz.sig"),
            str(efa / "aws-efa-installer-latest.tar.gz"),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True)
    assert verify.returncode == 0 and "Good signature" in verify.stderr
    subprocess.run(
        ["tar", "-xzf", str(efa / "aws-efa-installer-latest.tar.gz"), "-C", str(tmp_path)], check=True
    )
    root = tmp_path / "root"
    inst = subprocess.run(
        ["bash", str(tmp_path / "aws-efa-installer/efa_installer.sh"), "--yes"],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)},
        stdin=subprocess.DEVNULL,
    )
    assert inst.returncode == 0, inst.stderr
    assert "fi_info" in inst.stdout and os.access(root / "opt/amazon/efa/bin/fi_info", os.X_OK)
    no = subprocess.run(
        ["bash", str(tmp_path / "aws-efa-installer/efa_installer.sh")],
        capture_output=True,
        env={**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)},
        stdin=subprocess.DEVNULL,
    )
    assert no.returncode != 0


@pytest.mark.slow
@needs_tools
def test_fetch_debian_debs_against_a_base_status(tmp_path: Path) -> None:
    """Network (Debian mirror): downloads what a base lacks; the second call is served from the cache."""
    base = tmp_path / "base"
    (base / "var/lib/dpkg").mkdir(parents=True)
    shutil.copyfile("/var/lib/dpkg/status", base / "var/lib/dpkg/status")
    got = aptrepo.fetch_debian_debs(base, ["hello"], tmp_path / "cache")
    assert [p.name.split("_")[0] for p in got] == ["hello"]
    again = aptrepo.fetch_debian_debs(base, ["hello"], tmp_path / "cache")
    assert again == got
