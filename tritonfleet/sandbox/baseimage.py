"""What the controller needs (root, kernel features, tools) and the cached Debian 12 base image of hosts."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from tritonfleet.sandbox import layout
from tritonfleet.sandbox.debsources import bookworm_lines
from tritonfleet.sandbox.layout import FILES, SandboxError, log, run

BASE_PACKAGES = [
    "openssh-server", "python3", "sudo", "ca-certificates", "gnupg", "curl",
    "systemd", "systemd-sysv", "dbus", "libpam-systemd", "iproute2", "procps", "kmod",
]
# Bump when the base recipe changes in a way the package list does not show.
BASE_RECIPE_VERSION = "3"


def check_prerequisites() -> None:
    """Root, kernel features and tools; a clear error before anything is built."""
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root (network namespaces, overlay mounts, systemd-nspawn)")
    filesystems = Path("/proc/filesystems").read_text()
    if "overlay" not in filesystems:
        raise SandboxError("the kernel has no overlay filesystem; the sandbox needs it for host roots")
    for tool in ("systemd-nspawn", "ip", "mmdebstrap", "ssh-keygen", "gpg", "dpkg-deb", "apt-ftparchive"):
        if shutil.which(tool) is None:
            raise SandboxError(f"'{tool}' is missing; run `make setup` (it installs the sandbox's Debian packages)")
    if not Path("/sys/fs/cgroup").is_dir():
        raise SandboxError("no /sys/fs/cgroup; the sandbox needs cgroups for its hosts")
    probe = f"tfprobe{os.getpid() % 100000}"
    if not Path("/sys/class/net").exists() or run(["ip", "link", "add", probe, "type", "bridge"],
                                                  check=False).returncode != 0:
        raise SandboxError("cannot create a bridge (needs CAP_NET_ADMIN and bridge support)")
    run(["ip", "link", "del", probe], check=False)


def base_recipe_hash() -> str:
    h = hashlib.sha256()
    h.update(BASE_RECIPE_VERSION.encode())
    h.update(" ".join(BASE_PACKAGES).encode())
    h.update((FILES / "runc-clamp").read_bytes())
    return h.hexdigest()[:12]


def ensure_base(keep: Iterable[str | Path] = ()) -> Path:
    """The Debian 12 base rootfs (systemd, sshd, runc wrapper diverted in), built once per recipe.

    Older bases go when a new one is built, except those in ``keep`` (under the disks of stopped hosts)
    and those still mounted as an overlay's lower layer."""
    cache = layout.CACHE_DIR
    digest = base_recipe_hash()
    base = cache / f"base-{digest}"
    if (base / ".complete").exists():
        return base
    with layout.build_lock(cache, f"base-{digest}"):
        if (base / ".complete").exists():  # built by another process while this one waited
            return base
        return _build_base(cache, base, digest, keep)


def _build_base(cache: Path, base: Path, digest: str, keep: Iterable[str | Path]) -> Path:
    tmp = cache / f"base-{digest}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"building the Debian 12 base image with mmdebstrap (once per recipe, ~1-2 min): {base}")
    t0 = time.monotonic()
    clamp = FILES / "runc-clamp"
    hooks = [
        # runc wrapper in front of the runc that the docker role will install (dpkg puts it at runc.real)
        '--customize-hook=chroot "$1" dpkg-divert --quiet --local --add --rename --divert /usr/sbin/runc.real /usr/sbin/runc',
        f'--customize-hook=install -m 755 {clamp} "$1/usr/sbin/runc"',
        '--customize-hook=rm -f "$1"/etc/ssh/ssh_host_* "$1"/etc/apt/sources.list "$1"/etc/apt/sources.list.d/*',
        '--customize-hook=: > "$1/etc/resolv.conf"; : > "$1/etc/machine-id"',
        '--customize-hook=chroot "$1" systemctl mask getty.target console-getty.service systemd-sysctl.service'
        " systemd-binfmt.service proc-sys-fs-binfmt_misc.automount apt-daily.timer apt-daily-upgrade.timer"
        " e2scrub_all.timer fstrim.timer",
        '--customize-hook=mkdir -p "$1/var/lib/apt/periodic"',
    ]
    cmd = [
        "mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
        "--aptopt=APT::Install-Recommends \"false\"", *hooks,
        "bookworm", str(tmp), *bookworm_lines(),
    ]
    proc = run(cmd, check=False)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-5:])
        raise SandboxError(f"mmdebstrap failed building the base image:\n{tail}")
    (tmp / ".complete").write_text(digest)
    shutil.rmtree(base, ignore_errors=True)
    tmp.rename(base)
    in_use = Path("/proc/self/mounts").read_text()
    kept = {str(k) for k in keep}
    for old in cache.glob("base-*"):
        # an older base may still be the lower layer of hosts' disks; it goes on a later rebuild
        if (old != base and old.is_dir() and not old.name.endswith(".tmp") and str(old) not in kept
                and f"lowerdir={old}," not in in_use):
            shutil.rmtree(old, ignore_errors=True)
    log(f"base image ready in {time.monotonic() - t0:.0f}s")
    return base
