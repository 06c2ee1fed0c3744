"""The sandbox Triton image archive (docker-archive format written without a Docker engine)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tritonfleet.sandbox import dockerarchive, image, layout

pytest.importorskip("pytriton", reason="needs nvidia-pytriton (the Triton binaries come from its wheel)")


@pytest.fixture(scope="module")
def fake_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny rootfs tarball standing in for the mmdebstrap layer (``./`` prefixes and a device node)."""
    d = tmp_path_factory.mktemp("fakebase")
    tar_path = d / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name, kind in [
            (".", "dir"),
            ("./etc", "dir"),
            ("./etc/os-release", "file"),
            ("./dev", "dir"),
            ("./dev/null", "chr"),
            ("./usr/bin/sh", "sym"),
            ("./usr/bin/dash", "lnk"),
        ]:
            ti = tarfile.TarInfo(name)
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            elif kind == "chr":
                ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, "dash"
            elif kind == "lnk":
                ti.type, ti.linkname = tarfile.LNKTYPE, "./etc/os-release"
            if kind == "file":
                data = b'PRETTY_NAME="fake base"\n'
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
            else:
                tar.addfile(ti)
    return tar_path


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory, fake_base: Path) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("image")
    out = image.build_triton_image(d / "cache", d / "out/image.tar", base_tar=fake_base)
    return out, d / "cache"


def test_manifest_config_and_diff_ids_are_consistent(archive: tuple[Path, Path]) -> None:
    out, _ = archive
    assert dockerarchive.verify_archive(out) == []
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("manifest.json"))
        cfg_bytes = tar.extractfile(manifest[0]["Config"]).read()
        repositories = json.load(tar.extractfile("repositories"))
        diff_ids = []
        for layer in manifest[0]["Layers"]:
            assert layer in names and layer.rsplit("/", 1)[0] + "/VERSION" in names
            diff_ids.append("sha256:" + hashlib.sha256(tar.extractfile(layer).read()).hexdigest())
    assert manifest[0]["RepoTags"] == ["tritonfleet-sandbox/tritonserver:2.51.0-sandbox"]
    assert manifest[0]["Config"] == hashlib.sha256(cfg_bytes).hexdigest() + ".json"
    config = json.loads(cfg_bytes)
    assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids} and len(diff_ids) == 2
    assert config["os"] == "linux" and config["architecture"] == "amd64"
    c = config["config"]
    assert (
        "PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in c["Env"]
    )
    assert "LD_LIBRARY_PATH=/opt/tritonserver/lib" in c["Env"] and c["WorkingDir"] == "/opt/tritonserver"
    assert c["Labels"]["org.opencontainers.image.title"] == (
        "tritonfleet sandbox Triton 2.51.0 (CPU, python backend; NOT an NGC image)"
    )
    assert c["Labels"]["com.tritonfleet.neuron.runtime-lib"] == "2.34.10.0"
    assert c["Labels"]["com.tritonfleet.sandbox"] == "true"
    top = manifest[0]["Layers"][-1].split("/")[0]
    assert repositories == {"tritonfleet-sandbox/tritonserver": {"2.51.0-sandbox": top}}


def test_base_layer_is_normalised(archive: tuple[Path, Path], tmp_path: Path) -> None:
    out, _ = archive
    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        with tarfile.open(fileobj=tar.extractfile(manifest[0]["Layers"][0])) as base:
            members = {m.name: m for m in base.getmembers()}
    assert set(members) == {"etc", "etc/os-release", "dev", "usr/bin/sh", "usr/bin/dash"}
    assert members["usr/bin/dash"].linkname == "etc/os-release"  # hard link names cleaned too


def test_triton_layer_layout_and_binary_runs(archive: tuple[Path, Path], tmp_path: Path) -> None:
    out, _ = archive
    dockerarchive.extract_layer(out, 1, tmp_path)
    opt = tmp_path / "opt/tritonserver"
    for rel in (
        "bin/tritonserver",
        "backends/python/libtriton_python.so",
        "backends/python/triton_python_backend_utils.py",
        "backends/python/triton_python_backend_stub",
        "caches/local/libtritoncache_local.so",
    ):
        assert (opt / rel).is_file(), rel
    assert os.access(opt / "bin/tritonserver", os.X_OK)
    assert os.access(opt / "backends/python/triton_python_backend_stub", os.X_OK)
    libs = {p.name for p in (opt / "lib").iterdir()}
    assert any(n.startswith("libtritonserver") for n in libs)
    assert not any(n.startswith("libpython3-") for n in libs)  # the 32 MB libpython 3.13 is dropped
    assert (tmp_path / "opt/aws/neuron/share/aws-neuronx-runtime-lib/VERSION").read_text() == "2.34.10.0\n"
    proc = subprocess.run(
        [str(opt / "bin/tritonserver"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LD_LIBRARY_PATH": str(opt / "lib")},
    )
    # tritonserver prints its usage and exits 1 for --help; a missing library would fail before that
    assert "error while loading shared libraries" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1) and "Usage: tritonserver" in proc.stdout + proc.stderr


def test_cached_and_rebuilt_only_on_change(
    archive: tuple[Path, Path], fake_base: Path, tmp_path: Path
) -> None:
    out, cache = archive
    before = out.stat().st_mtime_ns
    assert image.build_triton_image(cache, out, base_tar=fake_base) == out
    assert out.stat().st_mtime_ns == before  # nothing changed: not rewritten
    other = tmp_path / "other.tar"
    image.build_triton_image(cache, other, base_tar=fake_base, neuron_runtime="2.28.19.0")
    _, config = dockerarchive.read_archive(other)
    assert config["config"]["Labels"]["com.tritonfleet.neuron.runtime-lib"] == "2.28.19.0"
    assert dockerarchive.verify_archive(other) == []
    # the archive is reproducible: same inputs, same bytes
    again = tmp_path / "again.tar"
    image.build_triton_image(tmp_path / "cache2", again, base_tar=fake_base)
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(out.read_bytes()).digest()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mmdebstrap"), reason="needs root and mmdebstrap")
def test_real_image_with_mmdebstrap_base(tmp_path: Path) -> None:
    """The real slim base; the python backend stub finds libpython3.11. The mmdebstrap base (network: a Debian
    mirror, ~20-40 s) comes from the machine's sandbox layer cache, built there once per recipe by whichever needs
    it first (under ``make test``: the e2e fleet's ``up``), and is linked into this test's own cache; the Triton
    layer and the archive are built here."""
    shared = layout.CACHE_DIR / "image-cache"
    shared.mkdir(parents=True, exist_ok=True)
    layer, _ = image.base_layer(shared)
    cache = tmp_path / "cache"
    cache.mkdir()
    for f in (layer, layer.with_suffix(".json")):
        try:
            os.link(f, cache / f.name)  # the same inode: size and mtime match the sidecar
        except OSError:
            shutil.copy2(f, cache / f.name)  # another filesystem: copy2 keeps the mtime (ns)
    out = image.build_triton_image(cache, tmp_path / "image.tar")
    assert dockerarchive.verify_archive(out) == []
    root = tmp_path / "rootfs"
    dockerarchive.extract_layer(out, 0, root)
    dockerarchive.extract_layer(out, 1, root)
    assert (root / "usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0").exists()
    assert (root / "usr/lib/python3/dist-packages/numpy").is_dir()
    assert not (root / "usr/share/doc/bash/README").exists()
    proc = subprocess.run(
        [
            "chroot",
            str(root),
            "/usr/bin/env",
            "LD_LIBRARY_PATH=/opt/tritonserver/lib",
            "/opt/tritonserver/bin/tritonserver",
            "--help",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "error while loading shared libraries" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1) and "Usage: tritonserver" in proc.stdout + proc.stderr
    ldd = subprocess.run(
        [
            "chroot",
            str(root),
            "/usr/bin/env",
            "LD_LIBRARY_PATH=/opt/tritonserver/lib",
            "/usr/bin/ldd",
            "/opt/tritonserver/backends/python/triton_python_backend_stub",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "not found" not in ldd.stdout, ldd.stdout
