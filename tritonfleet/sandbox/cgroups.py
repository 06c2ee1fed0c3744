"""Host cgroups: every host runs in ``<cgroup of the process that started it>/tritonfleet-sandbox/<host>``,
in every hierarchy. Only directories named exactly :data:`~layout.CGROUP_PARENT` are ours (no prefix
matching); earlier versions made ``tritonfleet-sandbox-<host>`` directories, found by exact name."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from tritonfleet.sandbox.layout import CGROUP_PARENT

CGROUP_ROOT = Path("/sys/fs/cgroup")
MAX_DEPTH = 3  # where the starting process's cgroup may be, below a hierarchy's root


def _cgroup_mounts() -> list[tuple[str, Path]]:
    """(controller-key, mount path) for every cgroup hierarchy of this process."""
    out = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctl, path = line.split(":", 2)
        if ctl == "":
            d = CGROUP_ROOT / "unified"
            if not d.is_dir():
                d = CGROUP_ROOT
        elif ctl.startswith("name="):
            d = CGROUP_ROOT / ctl.split("=", 1)[1]
        else:
            d = CGROUP_ROOT / ctl
        if d.is_dir():
            out.append((ctl, d / path.lstrip("/")))
    return out


def _make(parent: Path, name: str, cpuset: bool) -> Path:
    child = parent / name
    child.mkdir(exist_ok=True)
    if cpuset:  # a v1 cpuset cgroup takes no task before it has cpus and mems
        for f in ("cpuset.cpus", "cpuset.mems"):
            if not (child / f).read_text().strip():
                (child / f).write_text((parent / f).read_text())
    return child


def enter(host: str) -> Callable[[], None]:
    """preexec_fn moving the child into ``<current>/CGROUP_PARENT/<host>`` in every hierarchy."""
    targets = []
    for ctl, current in _cgroup_mounts():
        group = _make(_make(current, CGROUP_PARENT, ctl == "cpuset"), host, ctl == "cpuset")
        targets.append(str(group / "cgroup.procs"))

    def move() -> None:
        pid = str(os.getpid())
        for procs in targets:
            try:
                with open(procs, "w") as fh:
                    fh.write(pid)
            except OSError:
                pass

    return move


def _walk(names: set[str], root: Path) -> list[Path]:
    """Directories named one of ``names`` in any hierarchy under ``root`` (not descending into them)."""
    found = []
    for hier in root.iterdir():
        if not hier.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(hier):
            depth = Path(dirpath).relative_to(hier).parts
            for d in list(dirnames):
                if d in names:
                    found.append(Path(dirpath) / d)
                    dirnames.remove(d)  # do not descend into our own tree
            if len(depth) >= MAX_DEPTH:
                dirnames.clear()
    return found


def legacy_name(host: str) -> str:
    return f"{CGROUP_PARENT}-{host}"


def host_cgroups(host: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """The cgroups of ``host`` (current layout and the legacy one) in every hierarchy."""
    out = []
    for found in _walk({CGROUP_PARENT, legacy_name(host)}, root):
        if found.name == CGROUP_PARENT:
            if (found / host).is_dir():
                out.append(found / host)
        else:
            out.append(found)
    return out


def find_cgroups(hosts: Iterable[str] = (), root: Path = CGROUP_ROOT) -> list[Path]:
    """Every cgroup of ours: each host's (current or stale, any host name), a parent without hosts, and
    the legacy cgroups of ``hosts``."""
    out = []
    for found in _walk({CGROUP_PARENT, *(legacy_name(h) for h in hosts)}, root):
        if found.name != CGROUP_PARENT:
            out.append(found)
            continue
        children = sorted(p for p in found.iterdir() if p.is_dir())
        out += children or [found]
    return out


def parents(root: Path = CGROUP_ROOT) -> list[Path]:
    return _walk({CGROUP_PARENT}, root)


def cgroup_pids(cg: Path) -> set[int]:
    pids: set[int] = set()
    for dirpath, _, files in os.walk(cg):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split())
    return pids


def remove_if_empty(parent: Path) -> None:
    """``parent`` goes if it is one of ours without hosts."""
    if parent.name == CGROUP_PARENT:
        with contextlib.suppress(OSError):
            parent.rmdir()


def remove_tree(cg: Path) -> None:
    for dirpath, _, _ in sorted(os.walk(cg), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
