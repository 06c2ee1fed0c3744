"""The sandbox fleet: local hosts that behave like EC2 instances, minus the accelerator silicon.

Each host is a ``systemd-nspawn -b`` container booted from an overlay on a cached Debian 12 base,
in its own network namespace on the bridge ``tfbr0`` (192.168.250.0/24, the controller is .1), in
its own cgroup subtree, reachable over SSH with strict host key checking. The controller serves the
signed apt repositories (Debian mirror, Neuron and NVIDIA stand-ins), an IMDS stand-in and a moto
S3 endpoint on the bridge address. Hosts have no default route: they reach nothing else.

Only hardware is simulated, and only here: ``/etc/tritonfleet-sandbox/hardware.json`` (read by the
stand-in driver/tool packages), the IMDS answers, and a runc wrapper that clamps rlimits this
machine cannot grant. Roles never know they run in the sandbox.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from tritonfleet import catalog

# ---------------------------------------------------------------------------------------------
# Layout and constants
# ---------------------------------------------------------------------------------------------

SUBNET_PREFIX = "192.168.250."
SUBNET = SUBNET_PREFIX + "0/24"
BRIDGE = "tfbr0"
BRIDGE_IP = SUBNET_PREFIX + "1"
FIRST_HOST_OCTET = 11
REPO_PORT = 8080
IMDS_PORT = 8169
S3_PORT = 9000
NETNS_PREFIX = "tf-"
VETH_PREFIX = "tfv-"
CGROUP_PREFIX = "tritonfleet-sandbox-"
S3_BUCKET = "tritonfleet-models"
S3_PREFIX = "repos/sandbox/"
S3_REGION = "us-east-1"

CACHE_DIR = Path(os.environ.get("TRITONFLEET_CACHE", "/var/cache/tritonfleet"))
STATE_DIR = Path(os.environ.get("TRITONFLEET_SANDBOX_DIR", "/var/lib/tritonfleet/sandbox"))
FILES = Path(__file__).parent / "files"
SAMPLES = Path(__file__).parent / "samples"

BASE_PACKAGES = [
    "openssh-server", "python3", "sudo", "ca-certificates", "gnupg", "curl",
    "systemd", "systemd-sysv", "dbus", "libpam-systemd", "iproute2", "procps", "kmod",
]
# Bump when the base recipe changes in a way the package list does not show.
BASE_RECIPE_VERSION = "3"


class SandboxError(RuntimeError):
    """A sandbox problem with a one-line explanation (and nothing half-built)."""


def log(msg: str) -> None:
    print(f"sandbox: {msg}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str], *, check: bool = True, capture: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), text=True, capture_output=capture, **kw)
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise SandboxError(f"{' '.join(cmd[:4])}... failed (exit {proc.returncode}): {err[-1] if err else ''}")
    return proc


# ---------------------------------------------------------------------------------------------
# Host specs and state
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class HostSpec:
    """What a sandbox host should be. ``name`` defaults to ``sbx-NN``."""

    instance_type: str
    name: str = ""
    driver_creates_devices: bool = True  # False: the stand-in driver "fails to load" (no devices)
    preinstall: list[str] = dataclasses.field(default_factory=list)  # stand-in packages present at boot

    def key(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class HostState:
    name: str
    ip: str
    instance_type: str
    instance_id: str
    spec: dict
    nspawn_pid: int = 0

    @property
    def netns(self) -> str:
        return NETNS_PREFIX + self.name

    @property
    def veth(self) -> str:
        return f"{VETH_PREFIX}{self.ip.rsplit('.', 1)[1]}"  # unique per host, within IFNAMSIZ

    @property
    def cgroup(self) -> str:
        return CGROUP_PREFIX + self.name

    @property
    def dir(self) -> Path:
        return STATE_DIR / "hosts" / self.name

    @property
    def root(self) -> Path:
        return self.dir / "root"


def state_file() -> Path:
    return STATE_DIR / "state.json"


def key_path() -> Path:
    return STATE_DIR / "keys" / "id_ed25519"


def known_hosts_path() -> Path:
    return STATE_DIR / "known_hosts"


def load_state() -> dict:
    try:
        return json.loads(state_file().read_text())
    except FileNotFoundError:
        return {"hosts": {}, "services": {}}


def save_state(state: dict) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = state_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
    tmp.replace(state_file())


def hosts_from_state(state: dict) -> list[HostState]:
    return [HostState(**h) for h in state.get("hosts", {}).values()]


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One sandbox operation at a time on this machine."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# ---------------------------------------------------------------------------------------------
# Preconditions
# ---------------------------------------------------------------------------------------------


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


def check_subnet_free() -> None:
    """Our subnet and ports must not be in use by anything that is not ours."""
    out = run(["ip", "-o", "-4", "addr", "show"]).stdout
    for line in out.splitlines():
        parts = line.split()
        dev, addr = parts[1], parts[3]
        if addr.startswith(SUBNET_PREFIX) and dev != BRIDGE:
            raise SandboxError(f"subnet {SUBNET} is already used by {dev} ({addr}); the sandbox needs it for its hosts")
    routes = run(["ip", "-4", "route", "show", SUBNET]).stdout.strip()
    if routes and f"dev {BRIDGE}" not in routes:
        raise SandboxError(f"subnet {SUBNET} is already routed ({routes}); the sandbox needs it")


def check_port_free(port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((BRIDGE_IP, port))
        except OSError as exc:
            raise SandboxError(f"port {BRIDGE_IP}:{port} is in use ({exc.strerror}); the sandbox needs it") from None


# ---------------------------------------------------------------------------------------------
# Base image (cached)
# ---------------------------------------------------------------------------------------------


def debian_mirror() -> str:
    src = Path("/etc/apt/sources.list.d/debian.sources")
    if src.exists():
        for line in src.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


def base_recipe_hash() -> str:
    h = hashlib.sha256()
    h.update(BASE_RECIPE_VERSION.encode())
    h.update(" ".join(BASE_PACKAGES).encode())
    h.update((FILES / "runc-clamp").read_bytes())
    return h.hexdigest()[:12]


def ensure_base() -> Path:
    """The Debian 12 base rootfs (systemd, sshd, runc wrapper diverted in), built once per recipe."""
    digest = base_recipe_hash()
    base = CACHE_DIR / f"base-{digest}"
    if (base / ".complete").exists():
        return base
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = CACHE_DIR / f"base-{digest}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    mirror = debian_mirror()
    security = mirror.replace("/debian", "/debian-security") if mirror.endswith("/debian") else mirror
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
        "bookworm", str(tmp),
        f"deb {mirror} bookworm main", f"deb {mirror} bookworm-updates main",
        f"deb {security} bookworm-security main",
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
    for old in CACHE_DIR.glob("base-*"):
        # an older base may still be the lower layer of running hosts; it goes on a later rebuild
        if old != base and old.is_dir() and not old.name.endswith(".tmp") and f"lowerdir={old}," not in in_use:
            shutil.rmtree(old, ignore_errors=True)
    log(f"base image ready in {time.monotonic() - t0:.0f}s")
    return base


# ---------------------------------------------------------------------------------------------
# Controller-side services: repos (HTTP), IMDS, S3 (moto)
# ---------------------------------------------------------------------------------------------


def repo_root() -> Path:
    return CACHE_DIR / "serve"


def images_dir() -> Path:
    return CACHE_DIR / "images"


def ensure_supplies(base: Path) -> dict:
    """Signed repos, EFA installer and the Triton image archive (cached; fast when unchanged)."""
    from tritonfleet.sandbox import aptrepo, image

    log("checking signed repositories and the Triton image archive (built once, then cached)")
    t0 = time.monotonic()
    repos = aptrepo.build_all(repo_root(), CACHE_DIR / "repo-cache", base, os.uname().release)
    images_dir().mkdir(parents=True, exist_ok=True)
    archive = image.build_triton_image(CACHE_DIR / "image-cache", images_dir() / "tritonserver-2.51.0-sandbox.tar")
    spent = time.monotonic() - t0
    if spent > 2:  # only worth saying when something was (re)built
        log(f"signed repositories and the Triton image archive ready in {spent:.0f}s")
    return {"repos": repos, "image_archive": archive}


def _spawn_service(name: str, cmd: list[str]) -> int:
    logdir = STATE_DIR / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    with open(logdir / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=STATE_DIR)
    return proc.pid


def _wait_port(ip: str, port: int, timeout: float, what: str, pid: int | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ip, port), timeout=0.5):
                return
        except OSError:
            if pid is not None and not pid_alive(pid):
                raise SandboxError(f"{what} exited at start; see {STATE_DIR / 'logs'}") from None
            time.sleep(0.1)
    raise SandboxError(f"{what} did not answer on {ip}:{port} within {timeout:.0f}s")


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


def _is_service(cmd: str) -> bool:
    """argv signatures of the controller-side services this sandbox starts."""
    return (("http.server" in cmd and f"--bind {BRIDGE_IP}" in cmd and str(repo_root()) in cmd)
            or ("tritonfleet.sandbox.imds" in cmd and str(imds_hosts_file()) in cmd)
            or ("moto_server" in cmd and f"-H {BRIDGE_IP}" in cmd))


def _is_nspawn(cmd: str, root: Path | None = None) -> bool:
    return cmd.startswith("systemd-nspawn ") and f"-D {root or (STATE_DIR / 'hosts')}" in cmd


def ours(pid: int, check: Callable[[str], bool]) -> bool:
    """``pid`` is alive and its command line is ours (state files outlive reboots; PIDs get reused)."""
    return pid_alive(pid) and check(_cmdline(pid))


def imds_hosts_file() -> Path:
    return STATE_DIR / "imds-hosts.json"


def ensure_services(state: dict) -> None:
    services = state.setdefault("services", {})
    py = sys.executable
    wanted = {
        "repo": (REPO_PORT, [py, "-m", "http.server", str(REPO_PORT), "--bind", BRIDGE_IP,
                             "--directory", str(repo_root())]),
        "imds": (IMDS_PORT, [py, "-m", "tritonfleet.sandbox.imds", "--bind", BRIDGE_IP, "--port", str(IMDS_PORT),
                             "--hosts-file", str(imds_hosts_file())]),
        "s3": (S3_PORT, [str(Path(py).parent / "moto_server"), "-H", BRIDGE_IP, "-p", str(S3_PORT)]),
    }
    if not imds_hosts_file().exists():
        imds_hosts_file().write_text("{}")
    for name, (port, cmd) in wanted.items():
        pid = services.get(name, 0)
        if pid and ours(pid, _is_service):
            continue
        check_port_free(port)
        pid = _spawn_service(name, cmd)
        services[name] = pid
        save_state(state)
        _wait_port(BRIDGE_IP, port, 30, f"the sandbox {name} service", pid)
    seed_s3()


def s3_endpoint() -> str:
    return f"http://{BRIDGE_IP}:{S3_PORT}"


def seed_s3() -> None:
    """Create the bucket and upload the sample model repository (idempotent)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint(), region_name=S3_REGION,
                      aws_access_key_id="sandbox", aws_secret_access_key="sandbox")
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if S3_BUCKET not in existing:
        s3.create_bucket(Bucket=S3_BUCKET)
    for path in sorted(SAMPLES.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            s3.upload_file(str(path), S3_BUCKET, S3_PREFIX + path.relative_to(SAMPLES).as_posix())


# ---------------------------------------------------------------------------------------------
# Network and cgroups
# ---------------------------------------------------------------------------------------------


def ensure_bridge() -> None:
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addrs = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if f"{BRIDGE_IP}/24" not in addrs:
        run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def _cgroup_mounts() -> list[tuple[str, Path]]:
    """(controller-key, mount path) for every cgroup hierarchy of this process."""
    out = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctl, path = line.split(":", 2)
        if ctl == "":
            d = Path("/sys/fs/cgroup/unified")
            if not d.is_dir():
                d = Path("/sys/fs/cgroup")
        elif ctl.startswith("name="):
            d = Path("/sys/fs/cgroup") / ctl.split("=", 1)[1]
        else:
            d = Path("/sys/fs/cgroup") / ctl
        if d.is_dir():
            out.append((ctl, d / path.lstrip("/")))
    return out


def _enter_cgroup(name: str) -> Callable[[], None]:
    """preexec_fn moving the child into ``<current>/<name>`` in every hierarchy (own subtree per host)."""
    targets = []
    for ctl, current in _cgroup_mounts():
        t = current / name
        t.mkdir(exist_ok=True)
        if ctl == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                (t / f).write_text((current / f).read_text())
        targets.append(str(t / "cgroup.procs"))

    def enter() -> None:
        pid = str(os.getpid())
        for procs in targets:
            try:
                with open(procs, "w") as fh:
                    fh.write(pid)
            except OSError:
                pass

    return enter


def find_cgroups(prefix: str = CGROUP_PREFIX, *, exact: bool = False) -> list[Path]:
    """Every cgroup directory named ``<prefix>*`` (or exactly ``prefix``) in any hierarchy (ours,
    current or stale)."""
    found = []
    root = Path("/sys/fs/cgroup")
    for hier in root.iterdir():
        if not hier.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(hier):
            depth = Path(dirpath).relative_to(hier).parts
            for d in list(dirnames):
                if d == prefix if exact else d.startswith(prefix):
                    found.append(Path(dirpath) / d)
                    dirnames.remove(d)  # do not descend into our own tree
            if len(depth) >= 3:
                dirnames.clear()
    return found


def _cgroup_pids(cg: Path) -> set[int]:
    pids: set[int] = set()
    for dirpath, _, files in os.walk(cg):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split())
    return pids


def _remove_cgroup_tree(cg: Path) -> None:
    for dirpath, _, _ in sorted(os.walk(cg), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)


# ---------------------------------------------------------------------------------------------
# Hosts
# ---------------------------------------------------------------------------------------------


def ensure_client_key() -> None:
    if not key_path().exists():
        key_path().parent.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tritonfleet-sandbox", "-f", str(key_path())])


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


def _nspawn_cmd(h: HostState) -> list[str]:
    return [
        "systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "-b", "-D", str(h.root), "-M", h.name,
        f"--network-namespace-path=/run/netns/{h.netns}", "--console=passive", "--resolv-conf=off",
        "--timezone=off", "--link-journal=no",
        f"--bind={h.dir / 'docker'}:/var/lib/docker",
        f"--bind-ro={images_dir()}:/srv/images",
        "--capability=CAP_NET_ADMIN", "--system-call-filter=@keyring",
    ]


def create_host(h: HostState, spec: HostSpec, base: Path, supplies: dict) -> None:
    for sub in ("root", "upper", "work", "docker"):
        (h.dir / sub).mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={base},upperdir={h.dir / 'upper'},workdir={h.dir / 'work'}", str(h.root)])
    prepare_root(h, spec, supplies)
    run(["ip", "netns", "add", h.netns])
    run(["ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns])
    run(["ip", "link", "set", h.veth, "master", BRIDGE, "up"])
    run(["ip", "-n", h.netns, "link", "set", "lo", "up"])
    run(["ip", "-n", h.netns, "addr", "add", f"{h.ip}/24", "dev", "eth0"])
    run(["ip", "-n", h.netns, "link", "set", "eth0", "up"])
    logdir = STATE_DIR / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    with open(logdir / f"{h.name}.console.log", "wb") as out:
        proc = subprocess.Popen(_nspawn_cmd(h), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_enter_cgroup(h.cgroup))
    h.nspawn_pid = proc.pid


def host_pubkey(h: HostState) -> str:
    return (h.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[1]


def write_known_hosts(hosts: list[HostState]) -> None:
    lines = [f"{h.ip} ssh-ed25519 {host_pubkey(h)}\n" for h in sorted(hosts, key=lambda x: x.ip)]
    known_hosts_path().write_text("".join(lines))


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
    _wait_port(h.ip, 22, timeout, f"host {h.name} sshd", h.nspawn_pid)
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


def stop_host(h: HostState, timeout: float = 20) -> None:
    pid = h.nspawn_pid
    if pid and ours(pid, lambda cmd: _is_nspawn(cmd, h.root)):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    # Whatever is left in the host's cgroups (e.g. after a crash) goes too.
    for cg in find_cgroups(h.cgroup, exact=True):
        _kill_pids(_cgroup_pids(cg))
    _umount_under(h.dir)
    run(["ip", "netns", "del", h.netns], check=False)
    run(["ip", "link", "del", h.veth], check=False)
    for cg in find_cgroups(h.cgroup, exact=True):
        _remove_cgroup_tree(cg)


def _kill_pids(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) if path.exists() else str(path)
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == prefix or target.startswith(prefix + "/"):
            out.append(target)
    return out


def _umount_under(path: Path) -> None:
    for target in sorted(_mounts_under(path), key=len, reverse=True):
        if run(["umount", target], check=False).returncode != 0:
            run(["umount", "-l", target], check=False)


# ---------------------------------------------------------------------------------------------
# Fleet lifecycle
# ---------------------------------------------------------------------------------------------


def leftovers() -> list[str]:
    """Everything of ours that exists on the machine (empty after ``down``)."""
    found = []
    netns = run(["ip", "netns", "list"], check=False).stdout.split()
    found += [f"netns {n}" for n in netns if n.startswith(NETNS_PREFIX)]
    links = run(["ip", "-o", "link", "show"]).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == BRIDGE or name.startswith(VETH_PREFIX):
            found.append(f"link {name}")
    found += [f"mount {m}" for m in _mounts_under(STATE_DIR)]
    found += [f"cgroup {c}" for c in find_cgroups()]
    for pid in _our_processes():
        found.append(f"process {pid} {_cmdline(pid)[:80]}")
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _our_processes() -> list[int]:
    """Processes started by the sandbox: services and nspawn launchers (by command line) and
    everything inside our hosts' cgroups."""
    me = os.getpid()
    pids = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == me:
            continue
        if ours(int(p.name), lambda cmd: _is_service(cmd) or _is_nspawn(cmd)):
            pids.add(int(p.name))
    for cg in find_cgroups():
        pids |= {p for p in _cgroup_pids(cg) if pid_alive(p)}
    return sorted(pids)


def cleanup_all() -> list[str]:
    """Remove every trace of any sandbox (current or stale from a killed session). Returns what it removed."""
    removed = leftovers()
    state = load_state()
    for h in hosts_from_state(state):
        stop_host(h, timeout=10)
    _kill_pids(set(_our_processes()))
    for line in run(["ip", "netns", "list"], check=False).stdout.splitlines():
        n = line.split()[0] if line.split() else ""
        if n.startswith(NETNS_PREFIX):
            run(["ip", "netns", "del", n], check=False)
    links = run(["ip", "-o", "link", "show"]).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(VETH_PREFIX):
            run(["ip", "link", "del", name], check=False)
    _umount_under(STATE_DIR)
    for cg in find_cgroups():
        _kill_pids(_cgroup_pids(cg))
        _remove_cgroup_tree(cg)
    run(["ip", "link", "del", BRIDGE], check=False)
    shutil.rmtree(STATE_DIR / "hosts", ignore_errors=True)
    for f in (state_file(), imds_hosts_file(), known_hosts_path()):
        f.unlink(missing_ok=True)
    return removed


def _alive(h: HostState) -> bool:
    return (ours(h.nspawn_pid, lambda cmd: _is_nspawn(cmd, h.root)) and Path(f"/run/netns/{h.netns}").exists()
            and bool(_mounts_under(h.root)))


def default_specs(n: int, types: Sequence[str]) -> list[HostSpec]:
    if not types:
        types = ["inf2.xlarge"]
    if n and len(types) == 1:
        types = list(types) * n
    elif n and n != len(types):
        raise SandboxError(f"--hosts {n} does not match the {len(types)} instance types given ({', '.join(types)})")
    return [HostSpec(instance_type=t) for t in types]


def _assign_names(specs: list[HostSpec]) -> list[HostSpec]:
    seen = set()
    for i, s in enumerate(specs, 1):
        if not s.name:
            s.name = f"sbx-{i:02d}"
        if s.name in seen:
            raise SandboxError(f"duplicate sandbox host name {s.name}")
        if len(NETNS_PREFIX + s.name) > 30 or not s.name.replace("-", "").isalnum():
            raise SandboxError(f"bad sandbox host name {s.name!r} (letters, digits and '-', at most 27 characters)")
        seen.add(s.name)
        catalog.get(s.instance_type)  # unknown types fail here, before anything is built
    return specs


def up(specs: list[HostSpec]) -> dict:
    """Bring the fleet to ``specs`` (idempotent). Returns the state.

    A failed bring-up of a new fleet removes whatever it had started (nothing half-built)."""
    specs = _assign_names(list(specs))
    if len(specs) > 200:
        raise SandboxError("at most 200 sandbox hosts")
    check_prerequisites()
    with locked():
        had_hosts = any(_alive(h) for h in hosts_from_state(load_state()))
        try:
            return _up(specs)
        except BaseException:
            if not had_hosts:
                cleanup_all()
            raise


def _up(specs: list[HostSpec]) -> dict:
    t0 = time.monotonic()
    state = load_state()
    live = {h.name: h for h in hosts_from_state(state) if _alive(h)}
    if not live or not Path(f"/sys/class/net/{BRIDGE}").exists():
        # Nothing of ours is running: whatever exists is stale (e.g. a killed session). Start clean.
        stale = cleanup_all()
        if stale:
            log(f"cleaned {len(stale)} stale leftovers of an earlier sandbox")
        state, live = {"hosts": {}, "services": {}}, {}
    for name in set(state.get("hosts", {})) - set(live):
        dead = HostState(**state["hosts"].pop(name))
        log(f"host {name} is not running; recreating it")
        stop_host(dead)
        shutil.rmtree(dead.dir, ignore_errors=True)
    check_subnet_free()
    base = ensure_base()
    ensure_client_key()
    supplies = ensure_supplies(base)
    ensure_bridge()
    ensure_services(state)
    wanted = {s.name: s for s in specs}
    # Hosts no longer wanted, or wanted differently, go.
    for name, h in list(live.items()):
        if name not in wanted or h.spec != wanted[name].key():
            log(f"removing host {name}")
            stop_host(h)
            shutil.rmtree(h.dir, ignore_errors=True)
            del live[name]
            state["hosts"].pop(name, None)
    used = {h.ip for h in live.values()}
    new: list[tuple[HostState, HostSpec]] = []
    octet = FIRST_HOST_OCTET
    for spec in specs:
        if spec.name in live:
            continue
        while f"{SUBNET_PREFIX}{octet}" in used:
            octet += 1
        ip = f"{SUBNET_PREFIX}{octet}"
        used.add(ip)
        iid = "i-0" + hashlib.sha256(f"{spec.name}/{ip}".encode()).hexdigest()[:16]
        h = HostState(name=spec.name, ip=ip, instance_type=spec.instance_type, instance_id=iid, spec=spec.key())
        shutil.rmtree(h.dir, ignore_errors=True)
        log(f"starting host {h.name} ({spec.instance_type}) at {ip}")
        try:
            create_host(h, spec, base, supplies)
        except Exception:
            stop_host(h)
            raise
        state["hosts"][h.name] = dataclasses.asdict(h)
        save_state(state)
        new.append((h, spec))
    hosts = hosts_from_state(state)
    write_known_hosts(hosts)
    imds_hosts_file().write_text(json.dumps({
        h.ip: {"instance_type": h.instance_type, "instance_id": h.instance_id,
               "availability_zone": "us-east-1a", "hostname": h.name, "local_ipv4": h.ip}
        for h in hosts}, indent=2))
    for h, spec in new:
        wait_host(h)
        preinstall(h, spec.preinstall)
    state.setdefault("repository_secret", secrets.token_urlsafe(24))
    state["supplies"] = {
        "image_archive": str(supplies["image_archive"]),
        "repos": {k: _repo_dict(v) for k, v in supplies["repos"].items()},
    }
    save_state(state)
    log(f"fleet up: {len(hosts)} host(s) in {time.monotonic() - t0:.1f}s")
    return state


def _repo_dict(info) -> dict:
    d = dataclasses.asdict(info) if dataclasses.is_dataclass(info) else dict(info)
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}


def reset_host(name: str) -> HostState:
    """Give host ``name`` a fresh root (same name, IP, type and spec): for tests that need a bare host."""
    with locked():
        state = load_state()
        if name not in state.get("hosts", {}):
            raise SandboxError(f"no sandbox host {name}")
        h = HostState(**state["hosts"][name])
        spec = HostSpec(**h.spec)
        stop_host(h)
        shutil.rmtree(h.dir, ignore_errors=True)
        base = ensure_base()
        supplies = ensure_supplies(base)
        create_host(h, spec, base, supplies)
        state["hosts"][name] = dataclasses.asdict(h)
        save_state(state)
        write_known_hosts(hosts_from_state(state))
    wait_host(h)
    preinstall(h, spec.preinstall)
    return h


def down() -> list[str]:
    """Tear everything down. Returns what is still left (should be empty)."""
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root")
    with locked():
        state = load_state()
        for h in hosts_from_state(state):
            log(f"stopping host {h.name}")
            stop_host(h)
        services = [p for p in state.get("services", {}).values() if p and ours(p, _is_service)]
        for pid in services:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in services) and time.monotonic() < deadline:
            time.sleep(0.05)
        cleanup_all()
        return leftovers()


def status() -> list[dict]:
    state = load_state()
    rows = []
    for h in hosts_from_state(state):
        rows.append({"name": h.name, "ip": h.ip, "instance_type": h.instance_type, "instance_id": h.instance_id,
                     "state": "running" if _alive(h) else "dead"})
    return rows


def get_host(name: str) -> HostState:
    state = load_state()
    if name not in state.get("hosts", {}):
        raise SandboxError(f"no sandbox host {name}")
    return HostState(**state["hosts"][name])
