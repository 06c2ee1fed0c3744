"""The sandbox dcgm-exporter stand-in: its image archive and the exporter's /metrics output."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

from tritonfleet.sandbox import dcgmimage, dockerarchive, image

TAG = "tritonfleet-sandbox/dcgm-exporter:3.3.9-3.6.1-sandbox"
DEFAULT_FIELDS = [  # dcgm-exporter 3.3.9-3.6.1 default-counters.csv, in DCGM field id order, no DCP fields
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
]
REMAP_FIELDS = [
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
]
SERIES_RE = re.compile(
    r'^(?P<name>DCGM_FI_[A-Z0-9_]+)\{gpu="(?P<gpu>\d+)",UUID="(?P<uuid>GPU-[0-9a-f-]{36})",'
    r'pci_bus_id="(?P<bus>[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F])",device="(?P<device>nvidia\d+)",'
    r'modelName="(?P<model>[^"]+)"(?:,Hostname="(?P<host>[^"]+)")?,DCGM_FI_DRIVER_VERSION="(?P<driver>[^"]+)"'
    r'(?P<attrs>(?:,[a-z_]+="[^"]*")*)\} (?P<value>-?\d+(?:\.\d{6})?)$'
)


# ------------------------------------------------------------------------------------------- image


@pytest.fixture(scope="module")
def fake_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny rootfs tarball standing in for the mmdebstrap base (as in test_sandbox_image)."""
    tar_path = tmp_path_factory.mktemp("fakebase") / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name in (".", "./etc", "./usr", "./usr/bin"):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(ti)
        data = b'PRETTY_NAME="fake base"\n'
        ti = tarfile.TarInfo("./etc/os-release")
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))
    return tar_path


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory, fake_base: Path) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("dcgm")
    out = dcgmimage.build_dcgm_image(d / "cache", d / "out" / dcgmimage.ARCHIVE_NAME, base_tar=fake_base)
    return out, d / "cache"


def test_names() -> None:
    assert dcgmimage.DEFAULT_TAG == TAG
    assert dcgmimage.ARCHIVE_NAME == "dcgm-exporter-3.3.9-3.6.1-sandbox.tar"


def test_manifest_and_config(archive: tuple[Path, Path]) -> None:
    out, _ = archive
    assert dockerarchive.verify_archive(out) == []
    manifest, config = dockerarchive.read_archive(out)
    assert manifest[0]["RepoTags"] == [TAG] and len(manifest[0]["Layers"]) == 2
    with tarfile.open(out) as tar:
        repositories = json.load(tar.extractfile("repositories"))
    top = manifest[0]["Layers"][-1].split("/")[0]
    assert repositories == {"tritonfleet-sandbox/dcgm-exporter": {"3.3.9-3.6.1-sandbox": top}}
    c = config["config"]
    assert c["Entrypoint"] == ["/usr/local/dcgm/dcgm-exporter-entrypoint.sh"] and "Cmd" not in c
    assert c["ExposedPorts"] == {"9400/tcp": {}}
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32" in c["Env"]
    assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in c["Env"])  # only --gpus sets it
    assert c["Labels"]["com.tritonfleet.sandbox"] == "true"
    assert "NOT NVIDIA" in c["Labels"]["org.opencontainers.image.title"]
    assert config["os"] == "linux" and config["architecture"] == "amd64"


def test_layer_contents(archive: tuple[Path, Path], tmp_path: Path) -> None:
    out, _ = archive
    dockerarchive.extract_layer(out, 1, tmp_path)
    exporter = tmp_path / "usr/bin/dcgm-exporter"
    entry = tmp_path / "usr/local/dcgm/dcgm-exporter-entrypoint.sh"
    assert os.access(exporter, os.X_OK) and os.access(entry, os.X_OK)
    text = exporter.read_text()
    assert text == dcgmimage.exporter_script()
    assert text.startswith(
        "#!/usr/bin/python3\n# SANDBOX STAND-IN for NVIDIA dcgm-exporter 3.6.1 (DCGM 3.3.9)"
    )
    assert "@@" not in text
    assert 'exec /usr/bin/dcgm-exporter "$@"' in entry.read_text()
    for csv_name in ("default-counters.csv", "dcp-metrics-included.csv"):
        assert (tmp_path / "etc/dcgm-exporter" / csv_name).read_text().startswith("# SANDBOX STAND-IN")
    compile(text, str(exporter), "exec")


def test_base_layer_is_the_triton_images(archive: tuple[Path, Path], fake_base: Path) -> None:
    out, cache = archive
    manifest, config = dockerarchive.read_archive(out)
    _, base_diff = image.base_layer(cache, fake_base)
    assert config["rootfs"]["diff_ids"][0] == f"sha256:{base_diff}"
    assert len(list(cache.glob("base-layer-*.tar"))) == 1  # shared, not built twice


def test_cached_and_reproducible(archive: tuple[Path, Path], fake_base: Path, tmp_path: Path) -> None:
    out, cache = archive
    before = out.stat().st_mtime_ns
    assert dcgmimage.build_dcgm_image(cache, out, base_tar=fake_base) == out
    assert out.stat().st_mtime_ns == before  # unchanged inputs: not rewritten
    again = dcgmimage.build_dcgm_image(tmp_path / "cache2", tmp_path / "again.tar", base_tar=fake_base)
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(out.read_bytes()).digest()
    other = dcgmimage.build_dcgm_image(
        cache, tmp_path / "other.tar", base_tar=fake_base, driver_version="570.1"
    )
    assert dockerarchive.verify_archive(other) == []
    assert dockerarchive.read_archive(other)[1]["rootfs"] != dockerarchive.read_archive(out)[1]["rootfs"]
    assert len(list(cache.glob("dcgm-layer-*.tar"))) == 1  # the older exporter layer is pruned


# ---------------------------------------------------------------------------------------- exporter


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("exporter")
    path = d / "dcgm-exporter"
    path.write_text(dcgmimage.exporter_script())
    for name, counters in (
        ("default-counters.csv", dcgmimage.DEFAULT_COUNTERS),
        ("dcp-metrics-included.csv", dcgmimage.DCP_COUNTERS),
    ):
        (d / name).write_bytes(dcgmimage.counters_csv(counters, name))
    return path


@pytest.fixture
def mod(script: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """The exporter imported as a module, its ROOT at ``tmp_path`` (no devices, no driver)."""
    loader = importlib.machinery.SourceFileLoader("dcgm_exporter_standin", str(script))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", str(tmp_path))
    monkeypatch.setattr(module, "log", lambda level, msg: None)
    return module


def _caps(root: Path, sys_admin: bool) -> None:
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    cap_eff = (1 << 21) if sys_admin else (1 << 10)
    (root / "proc/self/status").write_text(f"Name:\tpython3\nCapEff:\t{cap_eff:016x}\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def _run(script: Path, root: Path, env: dict[str, str], *args: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "-f",
            str(script.with_name("default-counters.csv")),
            "-a",
            f"127.0.0.1:{port}",
            *args,
        ],
        env={"PATH": os.environ.get("PATH", ""), "TRITONFLEET_SANDBOX_ROOT": str(root), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exporter exited {proc.returncode}: {proc.stderr.read()}")
        try:
            _get(base + "/")
            return proc, base
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("exporter did not listen")


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.stderr.read() if proc.stderr else ""


def _parse(text: str) -> tuple[list[str], list[re.Match]]:
    """(metric names in order of their HELP lines, series matches); asserts the exact layout."""
    names, series = [], []
    lines = text.split("\n")
    assert lines[-1] == "" and text.endswith("\n")
    i = 0
    while i < len(lines) - 1:
        help_m = re.fullmatch(r"# HELP (DCGM_FI_[A-Z0-9_]+) (.+)", lines[i])
        type_m = re.fullmatch(r"# TYPE (DCGM_FI_[A-Z0-9_]+) (gauge|counter)", lines[i + 1])
        assert help_m and type_m and help_m.group(1) == type_m.group(1), lines[i : i + 2]
        names.append(help_m.group(1))
        i += 2
        while i < len(lines) - 1 and not lines[i].startswith("#"):
            m = SERIES_RE.match(lines[i])
            assert m and m.group("name") == names[-1], lines[i]
            series.append(m)
            i += 1
    return names, series


def test_metrics_served_over_http(script: Path, tmp_path: Path) -> None:
    _caps(tmp_path, sys_admin=False)
    proc, base = _run(
        script, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "0,1", "NODE_NAME": "gpu-host"}, "-c", "100"
    )
    try:
        deadline = time.monotonic() + 10
        while _get(base + "/health")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, ctype, text = _get(base + "/metrics")
        assert _get(base + "/health")[2] == "OK"
        assert _get(base + "/nope")[0] == 404
        assert "GPU Exporter" in _get(base + "/")[2]
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    assert status == 200 and ctype.startswith("text/plain")
    names, series = _parse(text)
    assert names == DEFAULT_FIELDS  # no DCP field without SYS_ADMIN; field id order
    assert "Skipping line" in err and "DCGM_FI_PROF_PCIE_TX_BYTES" in err
    assert len(series) == 2 * len(DEFAULT_FIELDS)
    first = series[0]
    assert (first.group("gpu"), first.group("device"), first.group("bus")) == (
        "0",
        "nvidia0",
        "00000000:00:1E.0",
    )
    assert first.group("host") == "gpu-host" and first.group("driver") == dcgmimage.DEFAULT_DRIVER
    assert {m.group("gpu") for m in series} == {"0", "1"}
    assert len({m.group("uuid") for m in series}) == 2
    values = {(m.group("name"), m.group("gpu")): m.group("value") for m in series}
    assert values[("DCGM_FI_DEV_POWER_USAGE", "0")] == "25.000000"
    assert values[("DCGM_FI_DEV_GPU_TEMP", "1")] == "30" and values[("DCGM_FI_DEV_GPU_UTIL", "1")] == "0"
    assert int(values[("DCGM_FI_DEV_FB_FREE", "0")]) + int(values[("DCGM_FI_DEV_FB_USED", "0")]) == 16384
    assert int(values[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0")]) > 0
    xid = next(m for m in series if m.group("name") == "DCGM_FI_DEV_XID_ERRORS")
    assert xid.group("attrs") == ',err_code="0",err_msg="No Error"'
    assert text.startswith(
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="' + first.group("uuid") + '",pci_bus_id="00000000:00:1E.0",'
        'device="nvidia0",modelName="NVIDIA Sandbox GPU",Hostname="gpu-host",DCGM_FI_DRIVER_VERSION="550.127.05"} 300\n'
    )


def test_empty_until_first_collection(script: Path, tmp_path: Path) -> None:
    _caps(tmp_path, sys_admin=False)
    proc, base = _run(script, tmp_path, {"NVIDIA_VISIBLE_DEVICES": "all"}, "-c", "60000")
    try:
        assert _get(base + "/health")[:3:2] == (503, "KO")
        assert _get(base + "/metrics")[::2] == (200, "")
    finally:
        err = _stop(proc)
    assert "reporting one GPU" in err


@pytest.mark.parametrize("value", [None, "", "void", "none"])
def test_no_gpu_is_fatal(script: Path, tmp_path: Path, value: str | None) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "TRITONFLEET_SANDBOX_ROOT": str(tmp_path)}
    if value is not None:
        env["NVIDIA_VISIBLE_DEVICES"] = value
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            "-f",
            str(script.with_name("default-counters.csv")),
            "-a",
            "127.0.0.1:1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1 and "level=fatal" in proc.stderr and "--gpus" in proc.stderr


def test_gpus_device_request_is_renumbered(mod: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--gpus device=3,1``: NVML in the container numbers the two GPUs 0 and 1 (bus order)."""
    monkeypatch.setattr(mod, "visible_devices_env", lambda: "3,1")
    gpus = mod.discover(None)
    assert [(i, g["minor"], g["bus_id"]) for i, g in gpus] == [
        (0, 1, "00000000:01:1E.0"),
        (1, 3, "00000000:03:1E.0"),
    ]
    assert gpus[0][1]["uuid"] == mod.make_gpu(1)["uuid"] != mod.make_gpu(3)["uuid"]  # identity = physical GPU
    monkeypatch.setattr(mod, "visible_devices_env", lambda: "GPU-11111111-2222-3333-4444-555555555555")
    assert [g["uuid"] for _, g in mod.discover(None)] == ["GPU-11111111-2222-3333-4444-555555555555"]


def test_all_is_sized_by_devices_flag(mod: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mod, "visible_devices_env", lambda: "all")
    assert [i for i, _ in mod.discover(None)] == [0]
    assert [i for i, _ in mod.discover(mod.parse_devices("g:0-2,5"))] == [0, 1, 2, 5]
    monkeypatch.setattr(mod, "visible_devices_env", lambda: "0,1,2")
    assert [i for i, _ in mod.discover(mod.parse_devices("g:1"))] == [1]
    with pytest.raises(SystemExit):
        mod.discover(mod.parse_devices("g:7"))


def test_device_nodes_win_over_env(mod: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    for name in ("nvidia0", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (tmp_path / "dev" / name).write_text("")  # regular files count as nodes under ROOT (tests)
    monkeypatch.setattr(mod, "visible_devices_env", lambda: "all")
    assert [(i, g["minor"]) for i, g in mod.discover(None)] == [(0, 0), (1, 2)]


def test_driver_procfs_gives_model_and_memory(mod: ModuleType, tmp_path: Path) -> None:
    gpu_dir = tmp_path / "proc/driver/nvidia/gpus/0000:00:1e.0"
    gpu_dir.mkdir(parents=True)
    (gpu_dir / "information").write_text(
        "Model: \t\t Tesla T4\nIRQ:   \t\t 42\nGPU UUID: \t GPU-0a1b2c3d-0000-1111-2222-333344445555\n"
        "Video BIOS: \t 90.04.96.00.01\nBus Type: \t PCIe\nDevice Minor: \t 0\nBus Location: \t 0000:00:1e.0\n"
    )
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul  8 18:02:22 UTC 2025\n"
    )
    gpus = mod.discover(None)
    assert [(g["model"], g["uuid"], g["bus_id"]) for _, g in gpus] == [
        ("Tesla T4", "GPU-0a1b2c3d-0000-1111-2222-333344445555", "00000000:00:1E.0")
    ]
    counters = mod.read_counters(str(Path(mod.__file__).with_name("default-counters.csv")), False)
    text = mod.render(counters, gpus, "h", mod.driver_version())
    names, series = _parse(text)
    assert names == DEFAULT_FIELDS  # T4 (Turing): no row remapping
    values = {m.group("name"): m.group("value") for m in series}
    assert values["DCGM_FI_DEV_FB_FREE"] == "16384"  # the catalog's T4
    assert {m.group("driver") for m in series} == {"570.172.08"}
    a10g = [(0, mod.make_gpu(0, model="NVIDIA A10G"))]
    names, series = _parse(mod.render(counters, a10g, "", "550.127.05"))
    # Ampere: the row remapping fields (ids 393-395, before NVLink's 449)
    assert names == DEFAULT_FIELDS[:14] + REMAP_FIELDS + DEFAULT_FIELDS[14:]
    assert all(m.group("host") is None for m in series)  # --no-hostname
    assert {m.group("value") for m in series if m.group("name") == "DCGM_FI_DEV_FB_FREE"} == {"24576"}


def test_profiling_needs_sys_admin(mod: ModuleType, tmp_path: Path) -> None:
    dcp_csv = str(Path(mod.__file__).with_name("dcp-metrics-included.csv"))
    _caps(tmp_path, sys_admin=False)
    assert not mod.has_sys_admin()
    without = [c[0] for c in mod.read_counters(dcp_csv, mod.has_sys_admin())]
    _caps(tmp_path, sys_admin=True)
    assert mod.has_sys_admin()
    counters = mod.read_counters(dcp_csv, mod.has_sys_admin())
    added = [c[0] for c in counters if c[0] not in without]
    assert added == [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    ]
    names, series = _parse(mod.render(counters, [(0, mod.make_gpu(0))], "h", "550.127.05"))
    assert names[-5:] == added  # field ids 1001, 1004, 1005, 1009, 1010
    assert {m.group("value") for m in series if m.group("name") == "DCGM_FI_PROF_DRAM_ACTIVE"} == {"0.000000"}


def test_malformed_collectors_file_is_fatal(mod: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("# comment\nDCGM_FI_DEV_GPU_UTIL, gauge\n")
    with pytest.raises(SystemExit):
        mod.read_counters(str(bad), False)
    bad.write_text("NOT_A_FIELD, gauge, x\n")
    with pytest.raises(SystemExit):
        mod.read_counters(str(bad), False)
    bad.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\nDCGM_FI_DEV_NAME, label, Name\n")
    assert mod.read_counters(str(bad), False) == [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).")
    ]
