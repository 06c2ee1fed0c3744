"""The ``docker save`` archive format, written and read without a Docker engine: ``manifest.json``,
``repositories``, ``<config digest>.json`` and ``<layer id>/{VERSION,json,layer.tar}``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from tritonfleet.sandbox.fsutil import CHUNK, SOURCE_DATE_EPOCH

CREATED = "2026-01-01T00:00:00Z"


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), mode, SOURCE_DATE_EPOCH
    tar.addfile(ti, io.BytesIO(data))


def write_docker_archive(out: Path, layers: list[tuple[Path, str]], config: dict, tag: str) -> None:
    """Write ``out`` in the ``docker save`` format from (layer tar, diff_id hex) pairs and a config."""
    config_bytes = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
    config_digest = hashlib.sha256(config_bytes).hexdigest()
    repo, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
    layer_ids: list[str] = []
    parent = ""
    for _, diff_id in layers:
        parent = hashlib.sha256(f"{parent}\n{diff_id}".encode()).hexdigest()
        layer_ids.append(parent)
    manifest = [
        {
            "Config": f"{config_digest}.json",
            "RepoTags": [tag],
            "Layers": [f"{i}/layer.tar" for i in layer_ids],
        }
    ]
    tmp = out.with_name(f".{out.name}.tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for n, ((path, _diff), layer_id) in enumerate(zip(layers, layer_ids, strict=True)):
            d = tarfile.TarInfo(layer_id)
            d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, SOURCE_DATE_EPOCH
            tar.addfile(d)
            _add_bytes(tar, f"{layer_id}/VERSION", b"1.0")
            v1 = {"id": layer_id, "created": CREATED, "os": "linux"}
            if n:
                v1["parent"] = layer_ids[n - 1]
            if n == len(layers) - 1:
                v1 |= {"architecture": "amd64", "config": config["config"]}
            _add_bytes(tar, f"{layer_id}/json", json.dumps(v1, separators=(",", ":")).encode())
            ti = tarfile.TarInfo(f"{layer_id}/layer.tar")
            ti.size, ti.mode, ti.mtime = path.stat().st_size, 0o644, SOURCE_DATE_EPOCH
            with open(path, "rb") as fh:
                tar.addfile(ti, fh)
        _add_bytes(tar, f"{config_digest}.json", config_bytes)
        _add_bytes(tar, "manifest.json", json.dumps(manifest, separators=(",", ":")).encode())
        _add_bytes(
            tar, "repositories", json.dumps({repo: {version: layer_ids[-1]}}, separators=(",", ":")).encode()
        )
    os.replace(tmp, out)


def read_archive(archive: Path) -> tuple[list[dict], dict]:
    """(manifest.json, image config) of a docker-archive tarball (for checks and tests)."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest[0]["Config"]))  # type: ignore[arg-type]
    return manifest, config


def verify_archive(archive: Path) -> list[str]:
    """Problems found in ``archive`` (empty list = consistent): layer sha256 == diff_ids, files present."""
    problems: list[str] = []
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        cfg_name = manifest[0]["Config"]
        cfg_bytes = tar.extractfile(cfg_name).read()  # type: ignore[union-attr]
        if hashlib.sha256(cfg_bytes).hexdigest() != cfg_name.removesuffix(".json"):
            problems.append(f"config {cfg_name}: digest does not match its name")
        diff_ids = json.loads(cfg_bytes)["rootfs"]["diff_ids"]
        if len(diff_ids) != len(manifest[0]["Layers"]):
            problems.append("number of layers differs from number of diff_ids")
        for layer, diff_id in zip(manifest[0]["Layers"], diff_ids, strict=False):
            h = hashlib.sha256()
            fh = tar.extractfile(layer)
            if fh is None:
                problems.append(f"{layer}: missing")
                continue
            for chunk in iter(lambda: fh.read(CHUNK), b""):  # noqa: B023 (consumed immediately)
                h.update(chunk)
            if f"sha256:{h.hexdigest()}" != diff_id:
                problems.append(f"{layer}: sha256 {h.hexdigest()} != diff_id {diff_id}")
        if "repositories" not in tar.getnames():
            problems.append("repositories file missing")
    return problems


def extract_layer(archive: Path, index: int, dest: Path) -> None:
    """Extract layer ``index`` of ``archive`` into ``dest`` (for checks; no whiteout handling)."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        layer = tar.extractfile(manifest[0]["Layers"][index])
        with tarfile.open(fileobj=layer, mode="r|") as inner:
            if hasattr(tarfile, "tar_filter"):
                inner.extractall(dest, filter="tar")
            else:  # Python without extraction filters
                inner.extractall(dest)  # noqa: S202
