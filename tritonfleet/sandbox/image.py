"""The sandbox Triton image, written as a ``docker save`` archive by Python (no Docker engine needed).

Layer 1 is a slim Debian 12 rootfs (``mmdebstrap --variant=essential`` + python3-numpy, libpython3.11,
libstdc++6); layer 2 is ``/opt/tritonserver`` in the NGC layout, taken from the installed
``nvidia-pytriton`` wheel (Triton 2.51.0: server binary, bundled libs, python backend with the 3.11
stub, local cache), plus the Neuron runtime-lib marker files. It is a CPU-only Triton with only the python
backend: enough for the fleet's docker/systemd/Triton plumbing, NOT an NGC image.

The archive (written by :mod:`.dockerarchive`) loads with ``docker load -i``. Layers and the archive are cached under ``cache_dir`` and rebuilt only
when their inputs change.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from tritonfleet.sandbox.debsources import bookworm_lines, debian_mirrors
from tritonfleet.sandbox.dockerarchive import CREATED, write_docker_archive
from tritonfleet.sandbox.fsutil import SOURCE_DATE_EPOCH, write_atomic
from tritonfleet.sandbox.layout import build_lock

RECIPE_VERSION = "1"
TRITON_VERSION = "2.51.0"
DEFAULT_TAG = "tritonfleet-sandbox/tritonserver:2.51.0-sandbox"
DEFAULT_NEURON_RUNTIME = "2.34.10.0"
#: pip: triton_python_requirements builds install with it, as in NGC's images
BASE_INCLUDE = ("python3-numpy", "python3-pip", "libpython3.11", "libstdc++6")
#: the base layer's entry in an image's history (every sandbox image starts with it)
BASE_HISTORY = {"created": CREATED, "created_by": "mmdebstrap --variant=essential --include="
                + ",".join(BASE_INCLUDE) + " bookworm"}
PYTHON_STUB = "3.11"  # Debian 12's python, which the stub links against
ENV_PATH = "/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# ----------------------------------------------------------------------------------------- helpers


class _HashingWriter:
    """File wrapper that hashes and counts what is written through it."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def _read_meta(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _layer_cached(tar: Path) -> str | None:
    """diff_id (hex) of a cached layer tar if its sidecar metadata still matches the file."""
    meta = _read_meta(tar.with_suffix(".json"))
    try:
        st = tar.stat()
    except OSError:
        return None
    if meta and meta.get("size") == st.st_size and meta.get("mtime_ns") == st.st_mtime_ns:
        return meta["sha256"]
    return None


def _finish_layer(tmp: Path, final: Path, writer: _HashingWriter, extra: dict) -> str:
    os.replace(tmp, final)
    st = final.stat()
    meta = {"sha256": writer.sha.hexdigest(), "size": st.st_size, "mtime_ns": st.st_mtime_ns, **extra}
    final.with_suffix(".json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return meta["sha256"]


def _prune(cache_dir: Path, pattern: str, keep: Path) -> None:
    for old in cache_dir.glob(pattern):
        if old != keep and old.with_suffix("") != keep.with_suffix(""):
            old.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ layer 1: base


def _clean(name: str) -> str:
    """``./usr/bin`` -> ``usr/bin``; ``.`` / ``./`` -> ``""``."""
    name = os.path.normpath("/" + name).lstrip("/")
    return "" if name in ("", ".") else name


def _normalise_into(src: tarfile.TarFile, out: tarfile.TarFile) -> None:
    """Copy ``src`` into a docker layer: no ``./`` prefixes, no root entry, no device nodes."""
    for m in src:
        name = _clean(m.name)
        if not name:
            continue
        if m.ischr() or m.isblk() or m.isfifo():
            continue  # docker provides /dev
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.uid, ti.gid = m.type, m.mode, m.uid, m.gid
        ti.mtime = int(m.mtime)
        ti.uname = ti.gname = ""
        if m.islnk():
            ti.linkname = _clean(m.linkname)
        elif m.issym():
            ti.linkname = m.linkname
        ti.pax_headers = {k: v for k, v in m.pax_headers.items() if k.startswith("SCHILY.xattr.")}
        if m.isreg():
            ti.size = m.size
            out.addfile(ti, src.extractfile(m))
        else:
            out.addfile(ti)


def _mmdebstrap_base(raw_tar: Path) -> None:
    cmd = [
        "mmdebstrap",
        "--variant=essential",
        "--include=" + ",".join(BASE_INCLUDE),
        '--aptopt=APT::Install-Recommends "false"',
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/info/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        '--customize-hook=rm -f "$1/etc/apt/sources.list"; : > "$1/etc/resolv.conf"',
        "bookworm",
        str(raw_tar),
        *bookworm_lines(),
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH), "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(cmd, capture_output=True, env=env, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.decode(errors="replace").strip().splitlines()[-15:])
        raise RuntimeError(f"mmdebstrap failed building the image base:\n{tail}")


def base_layer(cache_dir: Path, base_tar: Path | None = None) -> tuple[Path, str]:
    """(layer tar, diff_id hex) of layer 1; built with mmdebstrap once and cached.

    ``base_tar`` substitutes any rootfs tarball for the mmdebstrap build (tests).
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    if base_tar is not None:
        st = Path(base_tar).stat()
        key_src = f"custom\0{Path(base_tar).resolve()}\0{st.st_size}\0{st.st_mtime_ns}"
    else:
        key_src = f"mmdebstrap\0{RECIPE_VERSION}\0{','.join(BASE_INCLUDE)}\0{debian_mirrors()}"
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    layer = cache_dir / f"base-layer-{key}.tar"
    cached = _layer_cached(layer)
    if cached:
        return layer, cached
    with build_lock(cache_dir, layer.name):
        cached = _layer_cached(layer)  # built by another process while this one waited
        return (layer, cached) if cached else _build_base_layer(cache_dir, layer, base_tar)


def _build_base_layer(cache_dir: Path, layer: Path, base_tar: Path | None) -> tuple[Path, str]:
    with tempfile.TemporaryDirectory(prefix="base-", dir=cache_dir) as tmpdir:
        raw = Path(base_tar) if base_tar is not None else Path(tmpdir) / "rootfs.tar"
        if base_tar is None:
            _mmdebstrap_base(raw)
        tmp = Path(tmpdir) / "layer.tar"
        with open(tmp, "wb") as fh:
            writer = _HashingWriter(fh)
            with (
                tarfile.open(raw, "r:*") as src,
                # _HashingWriter has the one method a "w|" stream calls, not the whole file interface
                tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as out,  # type: ignore[call-overload]
            ):
                _normalise_into(src, out)
        diff_id = _finish_layer(tmp, layer, writer, {"source": "custom" if base_tar else "mmdebstrap"})
    if base_tar is None:
        _prune(cache_dir, "base-layer-*", layer)
    return layer, diff_id


# ---------------------------------------------------------------------------------- layer 2: triton


def pytriton_paths() -> tuple[Path, Path]:
    """(``pytriton/tritonserver`` dir, ``nvidia_pytriton.libs`` dir) of the installed nvidia-pytriton."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nvidia-pytriton is not installed (pip install 'tritonfleet[sandbox]')")
    pkg = Path(next(iter(spec.submodule_search_locations)))
    server, libs = pkg / "tritonserver", pkg.parent / "nvidia_pytriton.libs"
    if not (server / "bin/tritonserver").is_file() or not libs.is_dir():
        raise RuntimeError(f"{pkg}: no tritonserver binary / {libs.name} in the nvidia-pytriton install")
    return server, libs


def triton_layer_entries(neuron_runtime: str) -> list[tuple[str, Path | bytes | None, int]]:
    """(path in image, source file | inline bytes | None for a dir, mode), parents before children."""
    server, libs = pytriton_paths()
    stub = server / "python_backend_stubs" / PYTHON_STUB / "triton_python_backend_stub"
    pyback = server / "backends/python"
    entries: list[tuple[str, Path | bytes | None, int]] = [
        ("opt", None, 0o755),
        ("opt/tritonserver", None, 0o755),
        ("opt/tritonserver/bin", None, 0o755),
        ("opt/tritonserver/bin/tritonserver", server / "bin/tritonserver", 0o755),
        ("opt/tritonserver/lib", None, 0o755),
    ]
    for lib in sorted(libs.iterdir()):
        if lib.is_file() and not lib.name.startswith(
            "libpython3-"
        ):  # 32 MB libpython 3.13: only its stub uses it
            entries.append((f"opt/tritonserver/lib/{lib.name}", lib, 0o644))
    entries += [
        ("opt/tritonserver/backends", None, 0o755),
        ("opt/tritonserver/backends/python", None, 0o755),
        ("opt/tritonserver/backends/python/libtriton_python.so", pyback / "libtriton_python.so", 0o644),
        (
            "opt/tritonserver/backends/python/triton_python_backend_utils.py",
            pyback / "triton_python_backend_utils.py",
            0o644,
        ),
        ("opt/tritonserver/backends/python/triton_python_backend_stub", stub, 0o755),
        ("opt/tritonserver/caches", None, 0o755),
        ("opt/tritonserver/caches/local", None, 0o755),
        (
            "opt/tritonserver/caches/local/libtritoncache_local.so",
            server / "caches/local/libtritoncache_local.so",
            0o644,
        ),
        ("opt/tritonserver/TRITON_VERSION", f"{TRITON_VERSION}\n".encode(), 0o644),
        (
            "opt/tritonserver/SANDBOX",
            b"tritonfleet sandbox image: Triton 2.51.0 from the nvidia-pytriton wheel (CPU, python backend).\n"
            b"NOT an NGC image.\n",
            0o644,
        ),
        # the Neuron runtime the image "ships" (marker files, as the aws-neuronx-runtime-lib stand-in has)
        ("opt/aws", None, 0o755),
        ("opt/aws/neuron", None, 0o755),
        ("opt/aws/neuron/lib", None, 0o755),
        (
            "opt/aws/neuron/lib/libnrt.so.1",
            f"SANDBOX STAND-IN aws-neuronx-runtime-lib {neuron_runtime}: not a library\n".encode(),
            0o644,
        ),
        ("opt/aws/neuron/share", None, 0o755),
        ("opt/aws/neuron/share/aws-neuronx-runtime-lib", None, 0o755),
        ("opt/aws/neuron/share/aws-neuronx-runtime-lib/VERSION", f"{neuron_runtime}\n".encode(), 0o644),
    ]
    for _, src, _mode in entries:
        if isinstance(src, Path) and not src.is_file():
            raise RuntimeError(f"missing file in the nvidia-pytriton install: {src}")
    return entries


def _pytriton_version() -> str:
    try:
        return importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def triton_layer(cache_dir: Path, neuron_runtime: str) -> tuple[Path, str]:
    """(layer tar, diff_id hex) of layer 2 (``/opt/tritonserver``); cached by its source files."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    entries = triton_layer_entries(neuron_runtime)
    h = hashlib.sha256(f"triton\0{RECIPE_VERSION}\0{_pytriton_version()}\0".encode())
    for path, src, mode in entries:
        h.update(f"{path}\0{mode:o}\0".encode())
        if isinstance(src, Path):
            st = src.stat()
            h.update(f"{src}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        elif isinstance(src, bytes):
            h.update(hashlib.sha256(src).digest())
    return cached_layer(cache_dir / f"triton-layer-{h.hexdigest()[:16]}.tar", entries,
                        {"pytriton": _pytriton_version()}, "triton-layer-*")


def cached_layer(layer: Path, entries: Sequence[tuple[str, Path | bytes | None, int]], meta: dict,
                 prune: str) -> tuple[Path, str]:
    """(layer tar, diff_id hex): the cached ``layer`` when it is complete, else written from ``entries``
    ((path, source, mode): a directory for None, the bytes, or a controller file's content) with fixed owners
    and times; older layers matching ``prune`` are removed."""
    cached = _layer_cached(layer)
    if cached:
        return layer, cached
    tmp = layer.with_name(layer.name + ".tmp")
    with open(tmp, "wb") as fh:
        writer = _HashingWriter(fh)
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as out:  # type: ignore[call-overload]
            for path, src, mode in entries:
                ti = tarfile.TarInfo(path)
                ti.mode, ti.mtime, ti.uname, ti.gname = mode, SOURCE_DATE_EPOCH, "", ""
                if src is None:
                    ti.type = tarfile.DIRTYPE
                    out.addfile(ti)
                elif isinstance(src, bytes):
                    ti.size = len(src)
                    out.addfile(ti, io.BytesIO(src))
                else:
                    ti.size = src.stat().st_size
                    with open(src, "rb") as data:
                        out.addfile(ti, data)
    diff_id = _finish_layer(tmp, layer, writer, meta)
    _prune(layer.parent, prune, layer)
    return layer, diff_id


# ------------------------------------------------------------------------------------------- image


def image_config(diff_ids: list[str], tag: str, neuron_runtime: str) -> dict:
    """The image config JSON (``docker image inspect`` shows its ``config`` part)."""
    labels = {
        "org.opencontainers.image.title": "tritonfleet sandbox Triton 2.51.0 (CPU, python backend; NOT an NGC image)",
        "org.opencontainers.image.version": TRITON_VERSION,
        "com.tritonfleet.neuron.runtime-lib": neuron_runtime,
        "com.tritonfleet.sandbox": "true",
    }
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "author": "tritonfleet sandbox",
        "config": {
            "Env": [
                f"PATH={ENV_PATH}",
                "LD_LIBRARY_PATH=/opt/tritonserver/lib",
                f"TRITON_SERVER_VERSION={TRITON_VERSION}",
            ],
            "Cmd": ["/bin/bash"],
            "WorkingDir": "/opt/tritonserver",
            "ExposedPorts": {"8000/tcp": {}, "8001/tcp": {}, "8002/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in diff_ids]},
        "history": [
            BASE_HISTORY,
            {
                "created": CREATED,
                "created_by": f"tritonfleet sandbox: /opt/tritonserver from nvidia-pytriton {_pytriton_version()} "
                f"(image {tag})",
            },
        ],
    }


def build_triton_image(
    cache_dir: Path,
    out: Path,
    *,
    tag: str = DEFAULT_TAG,
    neuron_runtime: str = DEFAULT_NEURON_RUNTIME,
    base_tar: Path | None = None,
) -> Path:
    """Build (or confirm) the sandbox Triton image archive at ``out``; returns ``out``.

    ``cache_dir`` keeps the layer tars (``base-layer-*.tar`` from mmdebstrap, ``triton-layer-*.tar``) and
    the archive stamp; nothing is rebuilt when the inputs are unchanged. ``base_tar`` replaces the
    mmdebstrap rootfs with a given tarball (for tests).
    """
    cache_dir, out = Path(cache_dir), Path(out)
    layers = [base_layer(cache_dir, base_tar), triton_layer(cache_dir, neuron_runtime)]
    config = image_config([d for _, d in layers], tag, neuron_runtime)
    return archive_unless_current(out, layers, config, tag, cache_dir / "archives.json", RECIPE_VERSION)


def archive_unless_current(out: Path, layers: list[tuple[Path, str]], config: dict, tag: str, stamp_file: Path,
                           recipe: str) -> Path:
    """Write the ``docker save`` archive ``out`` unless the stamp in ``stamp_file`` says it already holds these
    inputs (recipe, tag, config: the layers' digests are in it) and was not touched since."""
    digest = hashlib.sha256(
        json.dumps({"recipe": recipe, "tag": tag, "config": config}, sort_keys=True).encode()
    ).hexdigest()
    stamps = _read_meta(stamp_file) or {}
    key = str(out.resolve())
    try:
        st = out.stat()
        current = stamps.get(key) == {"inputs": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    except OSError:
        current = False
    if not current:
        write_docker_archive(out, layers, config, tag)
        st = out.stat()
        stamps[key] = {"inputs": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        write_atomic(stamp_file, json.dumps(stamps, indent=1, sort_keys=True).encode())
    return out
