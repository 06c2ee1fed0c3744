"""The repository directory on the host: complete versions, the ``current`` link, staging and pruning.

Every step that changes what ``current`` shows is one rename: a staging tree becomes ``versions/<id>``
only once it is complete (manifest included), ``current`` is replaced by a link made under a temporary
name, and a version is renamed to ``.trash-<id>`` before it is deleted. A process killed anywhere leaves
``current`` pointing at a complete version; leftovers are cleared by the next run (under the lock).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TextIO

from .manifest import MANIFEST_NAME, Entry, SyncError, entries_from, read_manifest, write_manifest

_VERSION = re.compile(r"^(\d{6,})-\d{8}T\d{6}Z$")
_STAGING = ".staging-"
_TRASH = ".trash-"
LOCK_WAIT = 60.0  # seconds a sync waits for another one's lock
GRACE = 30.0  # past its own bound by this much, a live holder of the lock counts as stuck


def sync_filesystem(path: str) -> None:
    """Flush everything written to the filesystem holding ``path`` (syncfs(2): one call instead of an
    fsync per file; ``os.sync()`` where syncfs is not available)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _seq(name: str) -> int:
    for lead in (_STAGING, _TRASH, ""):
        if name.startswith(lead):
            m = _VERSION.match(name[len(lead):])
            if m:
                return int(m.group(1))
    return 0


class Staging:
    """A version being built: ``tree/`` (becomes the version), ``parts/`` (downloads in progress) and
    ``journal`` (one line per file placed in the tree and checked, read by the next run to resume)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.id = os.path.basename(root)[len(_STAGING):]
        self.tree = os.path.join(root, "tree")
        self.parts = os.path.join(root, "parts")
        self.journal = os.path.join(root, "journal")
        self.placed: dict[str, Entry] = {}  # by this run
        self._lock = threading.Lock()
        self._journal: TextIO | None = None

    def create(self) -> Staging:
        os.makedirs(self.tree)
        os.makedirs(self.parts)
        self._journal = open(self.journal, "a", encoding="utf-8")
        return self

    def close(self) -> None:
        if self._journal:
            self._journal.close()
            self._journal = None

    def place(self, entry: Entry, src: str, link: bool) -> None:
        """Put ``src`` at the entry's path in the tree (a hard link, or a rename of a checked download)
        and journal it. A link that the filesystem refuses becomes a copy."""
        dst = os.path.join(self.tree, entry.path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not link:
            os.replace(src, dst)
        else:
            try:
                os.link(src, dst)
            except OSError as exc:
                if exc.errno not in (errno.EMLINK, errno.EPERM, errno.EXDEV, errno.ENOTSUP):
                    raise
                tmp = os.path.join(self.parts, "copy-" + str(threading.get_ident()))
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)
        assert self._journal is not None, "Staging.create() first"
        with self._lock:
            self.placed[entry.path] = entry
            self._journal.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
            self._journal.flush()

    def journaled(self) -> dict[str, Entry]:
        """The files a (dead) run placed and checked here that are still in the tree with their size."""
        out: dict[str, Entry] = {}
        try:
            with open(self.journal, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            return out
        for line in lines:
            try:
                (entry,) = entries_from([json.loads(line)]).values()
            except ValueError:  # json errors included: a line cut short by the kill
                continue
            try:
                if os.stat(os.path.join(self.tree, entry.path)).st_size == entry.size:
                    out[entry.path] = entry
            except OSError:
                pass
        return out


@dataclass
class Holder:
    """The process holding ``DIR/.lock``, from ``/proc/locks`` and the record it wrote into the file."""

    pid: int
    command: str
    started: float | None  # epoch seconds
    until: float | None  # epoch seconds by which it said it would be done (None: it did not say)

    def stuck(self, now: float) -> bool:
        return self.until is not None and now > self.until + GRACE

    def ours(self) -> bool:
        """A tritonfleet agent, run by this user: one this run may end."""
        try:
            return os.stat(f"/proc/{self.pid}").st_uid == os.geteuid() and "tritonfleet" in self.command \
                and "agent" in self.command
        except OSError:
            return False

    def describe(self, now: float) -> str:
        age = f", running for {_duration(now - self.started)}" if self.started else ""
        if self.until is None:
            due = ", with no bound recorded"
        elif now > self.until:
            due = f", {_duration(now - self.until)} past its bound"
        else:
            due = f", due to end within {_duration(self.until - now)}"
        return f"pid {self.pid} ({self.command[:160]}){age}{due}"


def _duration(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _lock_pids(fd: int) -> list[int]:
    """Pids /proc/locks names as holding a lock on the file open at ``fd``."""
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    try:
        with open("/proc/locks", encoding="ascii") as f:
            for line in f:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 00:2d:1234567 0 EOF" ("->" marks a waiter)
                if len(fields) >= 6 and fields[1] != "->" and fields[5] == dev and fields[4].isdigit():
                    pids.append(int(fields[4]))
    except OSError:
        pass
    return pids


def _started(pid: int) -> float | None:
    """A process's start time (epoch seconds), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip() or "?"
    except OSError:
        return "?"


class Lock:
    """The held ``DIR/.lock``: it records who holds it and until when (read by a run that waits for it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def record(self, bound: float | None) -> None:
        """Say this run is done within ``bound`` seconds from now (None: no bound)."""
        now = time.time()
        data = {"pid": os.getpid(), "started": _started(os.getpid()) or now,
                "until": None if bound is None else round(now + bound, 1)}
        blob = json.dumps(data, sort_keys=True).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, blob, 0)

    def holder(self) -> Holder | None:
        pids = [p for p in _lock_pids(self.fd) if p != os.getpid()]
        try:
            record = json.loads(os.pread(self.fd, 4096, 0) or b"{}")
        except ValueError:
            record = {}
        if not isinstance(record, dict):
            record = {}
        pid = pids[0] if pids else record.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            return None
        mine = record.get("pid") == pid
        until = record.get("until") if mine and isinstance(record.get("until"), (int, float)) else None
        started = record.get("started") if mine and isinstance(record.get("started"), (int, float)) \
            else _started(pid)
        return Holder(pid, _command(pid), started, until)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _wait_lock(fd: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not _try_lock(fd):
        if time.monotonic() >= end:
            return False
        time.sleep(0.2)
    return True


def _end(pid: int) -> None:
    """SIGTERM, and SIGCONT: a stopped process gets the SIGTERM then (the caller SIGKILLs it if it stays)."""
    for sig in (signal.SIGTERM, signal.SIGCONT):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class Repo:
    """``DIR``: ``versions/<id>/`` (complete, each with its manifest), ``current`` -> ``versions/<id>``,
    ``.lock``, and while a sync runs ``versions/.staging-<id>/``."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.versions = os.path.join(self.root, "versions")
        self.current_link = os.path.join(self.root, "current")

    @contextlib.contextmanager
    def locked(self, wait: float = 0.0, bound: float | None = None,
               warnings: list[str] | None = None) -> Iterator[Lock]:
        """Hold ``DIR/.lock`` (one sync at a time), clear what dead runs left but staging dirs.

        A lock a dead process held is free (flock). Another live sync's lock is waited for up to ``wait``
        seconds; then its holder, if it is a tritonfleet agent more than ``GRACE`` seconds past the bound
        it recorded (stuck), is ended and the lock taken (said in ``warnings``); otherwise the sync fails
        naming it. ``bound``: the seconds this run records as its own bound."""
        os.makedirs(self.versions, exist_ok=True)
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        lock = Lock(fd)
        try:
            if not _wait_lock(fd, wait):
                self._take_over(lock, wait, warnings)
            lock.record(bound)
            if os.path.lexists(self.current_link) and not os.path.islink(self.current_link):
                raise SyncError(f"{self.current_link} exists and is not a symlink; move it away first")
            for name in os.listdir(self.root):
                if name.startswith(".current.tmp"):
                    os.unlink(os.path.join(self.root, name))
            for name in os.listdir(self.versions):
                if name.startswith(_TRASH):
                    shutil.rmtree(os.path.join(self.versions, name), ignore_errors=True)
            yield lock
        finally:
            os.close(fd)

    def _take_over(self, lock: Lock, waited: float, warnings: list[str] | None) -> None:
        """The lock is still held after the wait: end a stuck agent holding it, or fail naming the holder."""
        now = time.time()
        holder = lock.holder()
        where = os.path.join(self.root, ".lock")
        if holder is None:
            if _wait_lock(lock.fd, 1):  # released meanwhile
                return
            raise SyncError(f"another process holds {where} (waited {waited:g} s)")
        if not (holder.stuck(now) and holder.ours()):
            if _wait_lock(lock.fd, 0):
                return
            raise SyncError(f"another sync holds {where}: {holder.describe(now)}; waited {waited:g} s "
                            f"(it ends by itself within its bound, or stop it: kill {holder.pid})")
        _end(holder.pid)
        if not _wait_lock(lock.fd, 5):
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder.pid, signal.SIGKILL)
            if not _wait_lock(lock.fd, 10):
                raise SyncError(f"{where}: the stuck sync {holder.describe(now)} did not end when killed")
        if warnings is not None:
            warnings.append(f"ended a stuck sync that held {where}: {holder.describe(now)}")

    def path(self, version: str) -> str:
        return os.path.join(self.versions, version)

    def current(self) -> str | None:
        """The id of the version ``current`` points at, None when there is none."""
        try:
            target = os.readlink(self.current_link)
        except FileNotFoundError:
            return None
        version = os.path.basename(target.rstrip("/"))
        return version if _VERSION.match(version) and os.path.isdir(self.path(version)) else None

    def manifest(self, version: str) -> dict[str, Entry]:
        return read_manifest(os.path.join(self.path(version), MANIFEST_NAME))

    def complete(self) -> list[str]:
        """Ids of the versions on disk (those with a manifest), oldest first."""
        names = [n for n in os.listdir(self.versions)
                 if _VERSION.match(n) and os.path.isfile(os.path.join(self.versions, n, MANIFEST_NAME))]
        return sorted(names, key=_seq)

    def stale_staging(self) -> list[Staging]:
        """Staging dirs of dead runs (the lock is held), newest first."""
        names = [n for n in os.listdir(self.versions) if n.startswith(_STAGING) and _seq(n)]
        return [Staging(os.path.join(self.versions, n)) for n in sorted(names, key=_seq, reverse=True)]

    def new_staging(self) -> Staging:
        seq = max([_seq(n) for n in os.listdir(self.versions)] + [0]) + 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        return Staging(os.path.join(self.versions, f"{_STAGING}{seq:06d}-{stamp}")).create()

    def commit(self, staging: Staging, entries: dict[str, Entry], source: str, durable: bool) -> str:
        """Write the manifest into the staging tree and rename the tree to ``versions/<id>``."""
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_manifest(os.path.join(staging.tree, MANIFEST_NAME), staging.id, source, created, entries)
        for dirpath, _, _ in os.walk(staging.tree):
            os.chmod(dirpath, 0o755)  # readable by Triton's user whatever the agent's umask (files are 0644)
        if durable:  # files, directories and the manifest reach the disk before the tree becomes a version
            sync_filesystem(staging.tree)
        os.rename(staging.tree, self.path(staging.id))
        if durable:
            fsync_dir(self.versions)
        return staging.id

    def switch(self, version: str, durable: bool) -> None:
        """Point ``current`` at the version: a new link under a temporary name, renamed over ``current``."""
        tmp = os.path.join(self.root, f".current.tmp-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(os.path.join("versions", version), tmp)
        os.replace(tmp, self.current_link)
        if durable:
            fsync_dir(self.root)

    def remove(self, name: str) -> None:
        """Delete ``versions/<name>`` (a version or staging dir): renamed out of sight first."""
        src = os.path.join(self.versions, name)
        trash = os.path.join(self.versions, _TRASH + name.lstrip("."))
        os.rename(src, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def prune(self, keep: int) -> list[str]:
        """Delete all but the ``keep`` newest versions; the current one is always kept (and counted)."""
        current = self.current()
        others = [v for v in self.complete() if v != current]
        room = keep - (1 if current else 0)
        doomed = others[:max(len(others) - room, 0)]
        for version in doomed:
            self.remove(version)
        return doomed
