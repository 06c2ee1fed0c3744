"""Processes, listening sockets and mounts on the controller, as the kernel shows them (``/proc``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tritonfleet.sandbox.layout import SandboxError, logs_dir, run

# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def argv(pid: int) -> list[str]:
    """The command line of ``pid`` (empty if it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []


def cmdline(pid: int) -> str:
    return " ".join(argv(pid))


def ours(pid: int, check: Callable[[str], bool]) -> bool:
    """``pid`` is alive and its command line is ours (state files outlive reboots; PIDs get reused)."""
    return pid_alive(pid) and check(cmdline(pid))


def all_pids(*, me: bool = False) -> list[int]:
    """Every process (this one only with ``me``)."""
    mine = -1 if me else os.getpid()
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) != mine]


def _wait_gone(pids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def terminate(pids: Iterable[int], *, sig: int = signal.SIGTERM, grace: float = 5.0) -> None:
    """Send ``sig`` to ``pids`` and wait up to ``grace`` seconds for them to go; SIGKILL what is left."""
    pids = {p for p in pids if p > 0}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    if _wait_gone(pids, grace) or sig == signal.SIGKILL:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(pids, 5.0)


# ---------------------------------------------------------------------------------------------
# Listening sockets
# ---------------------------------------------------------------------------------------------


def _socket_owners() -> dict[int, int]:
    """``{socket inode: pid}`` for every socket some process holds."""
    owners: dict[int, int] = {}
    for pid in all_pids(me=True):
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("socket:["):
                        owners.setdefault(int(target[8:-1]), pid)
    return owners


def listeners(ip: str, ports: Iterable[int]) -> dict[str, int]:
    """``{"ip:port": pid}`` of the TCP sockets listening on ``ip`` at one of ``ports`` (pid 0: owner unknown)."""
    want = {f"{socket.inet_aton(ip)[::-1].hex().upper()}:{port:04X}": f"{ip}:{port}" for port in ports}
    found: dict[str, int] = {}
    owners: dict[int, int] | None = None
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) > 9 and fields[3] == "0A" and fields[1] in want:  # 0A: LISTEN
            if owners is None:
                owners = _socket_owners()
            found[want[fields[1]]] = owners.get(int(fields[9]), 0)
    return found


def wait_port(ip: str, port: int, timeout: float, what: str, pid: int | None = None) -> None:
    """Until ``ip:port`` accepts connections (an error if ``pid``, the process to answer, exits first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ip, port), timeout=0.5):
                return
        except OSError:
            if pid is not None and not pid_alive(pid):
                raise SandboxError(f"{what} exited at start; see {logs_dir()}") from None
            time.sleep(0.1)
    raise SandboxError(f"{what} did not answer on {ip}:{port} within {timeout:.0f}s")


# ---------------------------------------------------------------------------------------------
# Mounts
# ---------------------------------------------------------------------------------------------


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) if path.exists() else str(path)
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == prefix or target.startswith(prefix + "/"):
            out.append(target)
    return out


def umount_under(path: Path) -> None:
    for target in sorted(mounts_under(path), key=len, reverse=True):
        if run(["umount", target], check=False).returncode != 0:
            run(["umount", "-l", target], check=False)

