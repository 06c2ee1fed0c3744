"""What a version of the model repository holds: the manifest entries, S3 keys as repository paths, and the
diff between two manifests (per file and per model)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

MANIFEST_NAME = ".tritonfleet-manifest.json"  # at the top of every version directory
FORMAT = 1


class SyncError(Exception):
    """An expected failure, said in one line (exit code 1)."""


@dataclass(frozen=True)
class Entry:
    """One file: where it sits in the repository, the S3 object it comes from and, once it is on disk,
    the md5 of the local file and how it was checked against S3."""

    path: str  # relative to the version directory, "/"-separated: "resnet50/1/model.pt"
    key: str  # the S3 key it was downloaded from
    size: int
    etag: str  # without the quotes S3 puts around it
    md5: str = ""  # hex md5 of the local file ("" for a remote entry not yet downloaded)
    verified: str = ""  # "md5", "multipart-md5", "sha256", "sha1", "crc32" or "size" (nothing better possible)

    @property
    def content(self) -> tuple[str, int]:
        """What identifies the bytes of an object for S3: equal ETag and size, equal content."""
        return (self.etag, self.size)


@dataclass
class Diff:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)


def diff(old: dict[str, Entry], new: dict[str, Entry]) -> Diff:
    """Paths added, changed (other ETag or size), removed and unchanged going from ``old`` to ``new``."""
    d = Diff()
    for path in sorted(new):
        if path not in old:
            d.added.append(path)
        elif old[path].content != new[path].content:
            d.changed.append(path)
        else:
            d.unchanged.append(path)
    d.removed = sorted(set(old) - set(new))
    return d


def _model(path: str) -> str | None:
    """The model a path belongs to: its top-level directory (a file at the top belongs to none)."""
    head, sep, _ = path.partition("/")
    return head if sep else None


def model_changes(old: dict[str, Entry], new: dict[str, Entry], d: Diff) -> dict[str, list[str]]:
    """Which models were added, changed or removed: what a reload has to load, reload or unload."""
    old_models = {m for m in map(_model, old) if m}
    new_models = {m for m in map(_model, new) if m}
    touched = {m for m in map(_model, d.added + d.changed + d.removed) if m}
    return {"added": sorted(new_models - old_models),
            "changed": sorted(touched & old_models & new_models),
            "removed": sorted(old_models - new_models)}


def key_to_path(key: str, prefix: str) -> str | None:
    """The repository path of an S3 key below ``prefix`` (which ends with "/" or is empty); None for a
    "folder" marker (a key ending in "/"). A key that cannot be a file path here raises SyncError."""
    rel = key[len(prefix):] if key.startswith(prefix) else None
    if rel is None:
        raise SyncError(f"key {key!r} is not below the prefix {prefix!r}")
    if rel == "" or rel.endswith("/"):
        return None
    for part in rel.split("/"):
        if part in ("", ".", "..") or "\0" in part or len(part.encode("utf-8", "surrogateescape")) > 255:
            raise SyncError(f"key {key!r} cannot be a file path (empty, '.', '..' or overlong component)")
    if rel == MANIFEST_NAME:
        raise SyncError(f"key {key!r} collides with the agent's manifest file {MANIFEST_NAME}")
    return rel


def check_paths(paths: set[str]) -> None:
    """Refuse a tree in which one path is both a file and a directory ("a/b" and "a/b/c")."""
    for path in sorted(paths):
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in paths:
                raise SyncError(f"{parent!r} is both a file and a directory in the bucket")


def write_manifest(path: str, version: str, source: str, created: str, entries: dict[str, Entry]) -> None:
    """Write the manifest atomically (temp file, fsync, rename)."""
    doc = {"format": FORMAT, "version": version, "source": source, "created": created,
           "files": [asdict(entries[p]) for p in sorted(entries)]}
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(path: str) -> dict[str, Entry]:
    """The entries of a manifest file; ValueError (or OSError) when it is not one."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("files"), list):
        raise ValueError(f"{path}: not a format-{FORMAT} manifest")
    return entries_from(doc["files"])


def entries_from(rows: list) -> dict[str, Entry]:
    """Entries from their dict form (a manifest's "files", journal lines); ValueError on a malformed row."""
    out = {}
    for row in rows:
        try:
            e = Entry(**row)
        except TypeError as exc:
            raise ValueError(f"malformed manifest entry: {exc}") from None
        if not (isinstance(e.path, str) and isinstance(e.size, int) and isinstance(e.etag, str)):
            raise ValueError(f"malformed manifest entry for {e.path!r}")
        out[e.path] = e
    return out
