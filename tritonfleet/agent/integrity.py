"""Files that rot on the host: a version's files checked against its manifest, and when each was checked.

A file of a version is damaged when it is missing, has another size than its manifest entry, or (hashed)
another md5. Hashing everything on every run would cost as much as the download, so each file's inode is
stamped (size, mtime, ctime) when it was last found good, in ``DIR/.verified.json``; a later run hashes
again only the files whose inode changed since (a write changes mtime and ctime; setting the mtime back
changes the ctime). ``verify`` (``tritonfleet-agent verify``) hashes everything whatever the stamps.

Stamps are recorded at the end of a run, under the lock, after the agent's own links and prunes (which
change the ctime of the inodes versions share); a run killed before that hashes those files once more.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .manifest import Entry
from .verify import hash_file

STAMPS = ".verified.json"


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class Stamps:
    """When each inode of the repository was last found to match its manifest: ``{ino: [size, mtime_ns,
    ctime_ns]}`` (inodes are shared by the versions that hard-link one file)."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, STAMPS)
        self.known: dict[int, list[int]] = {}
        self.found = False  # the file existed (a repository synced before stamps were kept has none)
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            self.known = {int(k): v for k, v in doc.get("inodes", {}).items() if isinstance(v, list)}
            self.found = True
        except (OSError, ValueError, AttributeError, TypeError):
            pass

    def fresh(self, st: os.stat_result) -> bool:
        return self.known.get(st.st_ino) == _stamp(st)

    def save(self, files: list[str]) -> None:
        """Stamp exactly these files (the current version's, all found good), atomically."""
        inodes = {}
        for path in files:
            try:
                st = os.stat(path)
            except OSError:
                continue
            inodes[str(st.st_ino)] = _stamp(st)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"inodes": inodes}, f, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.path)


@dataclass
class Damage:
    """What a check of a version found: path -> what is wrong, and how many files it hashed."""

    files: dict[str, str] = field(default_factory=dict)
    hashed: int = 0

    def __bool__(self) -> bool:
        return bool(self.files)


def check(root: str, entries: dict[str, Entry], stamps: Stamps, mode: str) -> Damage:
    """Check the files of the version at ``root`` against its manifest ``entries``.

    ``mode``: "stat" (missing and size only), "changed" (also hash the files whose inode changed since they
    were stamped, or every file when there are no stamps yet), "all" (hash every file)."""
    out = Damage()
    for path, entry in sorted(entries.items()):
        full = os.path.join(root, path)
        try:
            st = os.stat(full)
        except FileNotFoundError:
            out.files[path] = "missing"
            continue
        except OSError as exc:
            out.files[path] = f"unreadable ({exc.strerror})"
            continue
        if st.st_size != entry.size:
            out.files[path] = f"size {st.st_size}, expected {entry.size}"
            continue
        if mode == "stat" or not entry.md5 or (mode == "changed" and stamps.found and stamps.fresh(st)):
            continue
        try:
            md5 = hash_file(full)[0]
        except OSError as exc:
            out.files[path] = f"unreadable ({exc.strerror or exc})"
            continue
        out.hashed += 1
        if md5 != entry.md5:
            out.files[path] = f"content changed (md5 {md5}, expected {entry.md5})"
    return out


def reusable(path: str, entry: Entry, stamps: Stamps) -> bool:
    """May ``path`` be hard-linked into a new version as ``entry``: its size always, its md5 too unless its
    inode is stamped unchanged since it was found good."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_size != entry.size:
        return False
    if stamps.fresh(st) or not entry.md5:
        return True
    try:
        return hash_file(path)[0] == entry.md5
    except OSError:
        return False
