"""One sandbox host: its disk (an overlay on the base image), identity, network, launcher and SSH access.

A host's disk is the overlay's upper dir under ``hosts/<name>/``; it outlives reboots and stops of the host
(as an EC2 instance's root volume does) and goes only with :func:`remove_host`.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tritonfleet import catalog
from tritonfleet.sandbox import cgroups, machine, network
from tritonfleet.sandbox.fsutil import write_atomic
from tritonfleet.sandbox.layout import (
    BRIDGE_IP,
    FILES,
    REPO_PORT,
    HostSpec,
    HostState,
    SandboxError,
    images_dir,
    key_path,
    known_hosts_path,
    log,
    logs_dir,
    repo_root,
    run,
)


def ensure_client_key() -> None:
    """The controller's SSH key (private: the key dir is owner-only, the key 0600)."""
    key = key_path()
    key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key.parent.chmod(0o700)
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tritonfleet-sandbox", "-f", str(key)])
    key.chmod(0o600)


def hardware_record(spec: HostSpec, instance_id: str) -> dict:
    it = catalog.get(spec.instance_type)
    return {
        "instance_type": it.name,
        "instance_id": instance_id,
        "availability_zone": "us-east-1a",
        "accelerator": it.accelerator,
        "device_name": it.device_name,
        "device_count": it.device_count,
        "cores_per_device": it.cores_per_device,
        "device_memory_bytes": it.device_memory_mib * 1024 * 1024,
        "logical_neuroncore_config": it.logical_neuroncore_config,
        "driver_creates_devices": spec.driver_creates_devices,
    }


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def prepare_root(h: HostState, spec: HostSpec, supplies: dict) -> None:
    """Per-host files written into the overlay before boot (identity, keys, hardware, apt mirror)."""
    root = h.root
    _write(root / "etc/hostname", h.name + "\n")
    _write(root / "etc/hosts", f"127.0.0.1 localhost\n{h.ip} {h.name}\n")
    hostkey = root / "etc/ssh/ssh_host_ed25519_key"
    hostkey.unlink(missing_ok=True)
    Path(str(hostkey) + ".pub").unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.name, "-f", str(hostkey)])
    (root / "root/.ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    _write(root / "root/.ssh/authorized_keys", Path(str(key_path()) + ".pub").read_text(), 0o600)
    # Only ed25519 host key: sshd must not try (and fail) to load others.
    _write(root / "etc/ssh/sshd_config.d/tritonfleet-sandbox.conf",
           "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\nUseDNS no\n")
    # Simulated hardware (read only by the stand-in packages) and the sandbox's private bits.
    _write(root / "etc/tritonfleet-sandbox/hardware.json", json.dumps(hardware_record(spec, h.instance_id), indent=2))
    unit = root / "etc/systemd/system/sandbox-cgroup-rw.service"
    _write(unit, (FILES / "sandbox-cgroup-rw.service").read_text())
    wants = root / "etc/systemd/system/sysinit.target.wants/sandbox-cgroup-rw.service"
    wants.parent.mkdir(parents=True, exist_ok=True)
    if not wants.is_symlink():
        wants.symlink_to("/etc/systemd/system/sandbox-cgroup-rw.service")
    # The distribution mirror this "instance" is configured with out of the box (a real instance has
    # deb.debian.org / the Ubuntu archive; the sandbox has its signed local mirror).
    debian = supplies["repos"]["debian"]
    keyring = root / "usr/share/keyrings/tritonfleet-sandbox-mirror.gpg"
    keyring.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(debian.keyring_path, keyring)
    _write(root / "etc/apt/sources.list.d/debian.sources",
           f"Types: deb\nURIs: http://{BRIDGE_IP}:{REPO_PORT}/{debian.url_path.strip('/')}\n"
           f"Suites: {debian.suite}\nComponents: main\nSigned-By: /usr/share/keyrings/tritonfleet-sandbox-mirror.gpg\n")


# ---------------------------------------------------------------------------------------------
# Start and stop
# ---------------------------------------------------------------------------------------------

LAUNCHER = "tritonfleet.sandbox.hostrun"


def nspawn_cmd(h: HostState) -> list[str]:
    """The host's nspawn. Its console is read-only: what the host's PID 1 and its units write to ``/dev/console``
    goes to ``logs/<host>.console.log`` (as an instance's serial console to its console output). A ``passive``
    console is a pseudo-TTY nobody reads: once its buffer is full PID 1 blocks in the write and answers nothing more,
    not logind, not ``systemctl`` (CI on fd853a7: a host still booting, from user data, for a minute showed its
    start jobs' status until every later SSH login hung in pam_systemd)."""
    return [
        "systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "-b", "-D", str(h.root), "-M", h.name,
        f"--network-namespace-path=/run/netns/{h.netns}", "--console=read-only", "--resolv-conf=off",
        "--timezone=off", "--link-journal=no",
        f"--bind={h.dir / 'docker'}:/var/lib/docker",
        f"--bind-ro={images_dir()}:/srv/images",
        "--capability=CAP_NET_ADMIN", "--system-call-filter=@keyring",
    ]


def launcher_cmd(h: HostState) -> list[str]:
    return [sys.executable, "-m", LAUNCHER, "--host", h.name, "--", *nspawn_cmd(h)]


def is_launcher(cmd: str, root: Path) -> bool:
    return LAUNCHER in cmd and f" -D {root} " in cmd + " "


def is_nspawn(cmd: str, root: Path) -> bool:
    """A bare nspawn of the host at ``root`` (of an older version, without launcher)."""
    return cmd.startswith("systemd-nspawn ") and f" -D {root} " in cmd + " "


def runs_some_host(cmd: str, hosts_dir: Path) -> bool:
    """A launcher or a bare nspawn of any host under ``hosts_dir`` (current or stale)."""
    return (LAUNCHER in cmd or cmd.startswith("systemd-nspawn ")) and f" -D {hosts_dir}/" in cmd


def start_host(h: HostState, base: Path, before_boot: Callable[[], None] | None = None) -> None:
    """Mount the host's disk over ``base``, give it its network and launch it (``h.nspawn_pid``)."""
    for sub in ("root", "upper", "work", "docker"):
        (h.dir / sub).mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={base},upperdir={h.dir / 'upper'},workdir={h.dir / 'work'}", str(h.root)])
    h.base = str(base)
    if before_boot:
        before_boot()
    network.add_host_network(h)
    with open(logs_dir() / f"{h.name}.console.log", "ab") as out:
        proc = subprocess.Popen(launcher_cmd(h), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=cgroups.enter(h.cgroup))
    h.nspawn_pid = proc.pid


def create_host(h: HostState, spec: HostSpec, base: Path, supplies: dict,
                then: Callable[[Path], None] | None = None) -> None:
    """A new host on an empty disk; ``then(root)`` writes more into it before it boots."""
    def before_boot() -> None:
        prepare_root(h, spec, supplies)
        if then:
            then(h.root)

    start_host(h, base, before_boot)


def has_disk(h: HostState) -> bool:
    return (h.dir / "upper").is_dir()


def stop_host(h: HostState, timeout: float = 20, *, discard: bool = False) -> None:
    """Shut the host down (its launcher, then whatever is left in its cgroups); the disk stays.

    ``discard``: the disk goes next (:func:`remove_host`, ``down``), so nothing on it needs a clean shutdown:
    the launcher and every process in the host's cgroups are killed at once, instead of waiting up to
    ``timeout`` for systemd in the host to stop Docker and its containers (some 10 s on a serving host)."""
    pid = h.nspawn_pid
    if pid and machine.ours(pid, lambda cmd: is_launcher(cmd, h.root) or is_nspawn(cmd, h.root)):
        if discard:
            # The host's init (nspawn's child) first: the kernel kills everything in its PID namespace and the
            # dying init reaps it, nspawn reaps the init and ends, and the launcher, whose nspawn ended without
            # asking for a reboot, ends too. Killing a parent before its children would leave them to PID 1 as
            # zombies.
            inits = [init for nspawn in [pid, *_children(pid)] for init in _children(nspawn)
                     if not is_nspawn(machine.cmdline(init), h.root)]
            machine.terminate(inits, sig=signal.SIGKILL, grace=timeout)
        machine.terminate([pid], grace=timeout)
    # Whatever is left in the host's cgroups (e.g. after a crash) goes too.
    for cg in cgroups.host_cgroups(h.cgroup):
        machine.terminate(cgroups.cgroup_pids(cg), sig=signal.SIGKILL)
    machine.umount_under(h.dir)
    network.del_host_network(h)
    for cg in cgroups.host_cgroups(h.cgroup):
        cgroups.remove_tree(cg)
        cgroups.remove_if_empty(cg.parent)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def remove_host(h: HostState) -> None:
    """Stop the host and discard its disk (no clean shutdown: the disk goes)."""
    stop_host(h, discard=True)
    shutil.rmtree(h.dir, ignore_errors=True)


def alive(h: HostState) -> bool:
    """Running (or rebooting) under its launcher, with its network and disk."""
    return (machine.ours(h.nspawn_pid, lambda cmd: is_launcher(cmd, h.root)) and network.netns_exists(h)
            and bool(machine.mounts_under(h.root)))


# ---------------------------------------------------------------------------------------------
# SSH
# ---------------------------------------------------------------------------------------------


def host_pubkey(h: HostState) -> str:
    return (h.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[1]


def write_known_hosts(hosts: list[HostState]) -> None:
    lines = [f"{h.ip} ssh-ed25519 {host_pubkey(h)}\n" for h in sorted(hosts, key=lambda x: x.ip)]
    # in one rename: an SSH client reading it meanwhile (a test on another host) sees the old or the new file
    write_atomic(known_hosts_path(), "".join(lines).encode())


def ssh_base_args(h: HostState) -> list[str]:
    return ["ssh", "-i", str(key_path()), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={known_hosts_path()}", "-o", "ConnectTimeout=5", f"root@{h.ip}"]


def ssh(h: HostState, command: str, *, check: bool = True, timeout: float = 300,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` on a sandbox host over SSH (strict host key checking)."""
    proc = subprocess.run(ssh_base_args(h) + [command], text=True, capture_output=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise SandboxError(f"{h.name}: `{command}` failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc


def wait_host(h: HostState, timeout: float = 60) -> None:
    machine.wait_port(h.ip, 22, timeout, f"host {h.name} sshd", h.nspawn_pid)
    deadline = time.monotonic() + timeout
    while True:
        proc = ssh(h, "systemctl is-system-running --wait", check=False, timeout=timeout)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            if state == "degraded":
                failed = ssh(h, "systemctl --failed --no-legend --plain", check=False).stdout.strip()
                log(f"{h.name}: systemd is degraded: {failed}")
            return
        if time.monotonic() > deadline:
            raise SandboxError(f"host {h.name} did not finish booting: systemd says '{state}'")
        time.sleep(0.3)


def preinstall(h: HostState, packages: list[str]) -> None:
    """Install stand-in packages as a previous admin would have (e.g. legacy Neuron packages)."""
    if not packages:
        return
    debs = []
    pool = repo_root()
    for pkg in packages:
        name, _, version = pkg.partition("=")
        matches = sorted(pool.rglob(f"{name}_{version or ''}*.deb"))
        if not matches:
            raise SandboxError(f"{h.name}: no stand-in package {pkg} in the sandbox repos")
        debs.append(matches[-1])
    tmp = h.root / "var/tmp/tritonfleet-preinstall"
    tmp.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        shutil.copy(deb, tmp / deb.name)
    ssh(h, "dpkg -i /var/tmp/tritonfleet-preinstall/*.deb && rm -rf /var/tmp/tritonfleet-preinstall")
