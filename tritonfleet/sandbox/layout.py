"""Names, paths and the state file of the sandbox fleet (everything else builds on these).

The state file (``state.json`` under :data:`STATE_DIR`) records what the sandbox started and where:
its hosts (with their disks and base image), its services (pid and full argv) and the cache directory
it used. ``down`` and ``up`` act on what the state says, not on the current environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

SUBNET_PREFIX = "192.168.250."
SUBNET = SUBNET_PREFIX + "0/24"
BRIDGE = "tfbr0"
BRIDGE_IP = SUBNET_PREFIX + "1"
FIRST_HOST_OCTET = 11
REPO_PORT = 8080
IMDS_PORT = 8169
S3_PORT = 9000
PROMETHEUS_PORT = 9090
NETNS_PREFIX = "tf-"
VETH_PREFIX = "tfv-"
CGROUP_PARENT = "tritonfleet-sandbox"  # every host's cgroup is <current cgroup>/<CGROUP_PARENT>/<host>
S3_BUCKET = "tritonfleet-models"
S3_PREFIX = "repos/sandbox/"
S3_REGION = "us-east-1"

CACHE_DIR = Path(os.environ.get("TRITONFLEET_CACHE", "/var/cache/tritonfleet"))
STATE_DIR = Path(os.environ.get("TRITONFLEET_SANDBOX_DIR", "/var/lib/tritonfleet/sandbox"))
FILES = Path(__file__).parent / "files"
SAMPLES = Path(__file__).parent / "samples"
#: sample models that are NOT in the seeded repository (:data:`SAMPLES` is, whole): tests copy them in by name.
#: ``emoji_echo`` imports ``emoji``, which only an image built with ``triton_python_requirements`` has.
EXTRA_SAMPLES = Path(__file__).parent / "extra_samples"
#: the local PyPI simple index (PEP 503) below :func:`repo_root`, served by the repository service
PYPI_PATH = "pypi/simple"
#: QA suites of the sample repository (the sandbox inventory's qa_suites)
QA_SUITES = Path(__file__).parent / "qa"


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
# Hosts
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
    nspawn_pid: int = 0  # the host's launcher (``hostrun``), which runs nspawn again on every reboot
    base: str = ""  # the base image under the host's disk (its overlay lower dir)

    @property
    def netns(self) -> str:
        return NETNS_PREFIX + self.name

    @property
    def veth(self) -> str:
        return f"{VETH_PREFIX}{self.ip.rsplit('.', 1)[1]}"  # unique per host, within IFNAMSIZ

    @property
    def cgroup(self) -> str:
        return self.name  # below CGROUP_PARENT

    @property
    def dir(self) -> Path:
        return STATE_DIR / "hosts" / self.name

    @property
    def root(self) -> Path:
        return self.dir / "root"


def host_state(record: dict) -> HostState:
    """A host from its state record (keys this version does not know are ignored)."""
    fields = {f.name for f in dataclasses.fields(HostState)}
    return HostState(**{k: v for k, v in record.items() if k in fields})


def hosts_from_state(state: dict) -> list[HostState]:
    return [host_state(h) for h in state.get("hosts", {}).values()]


# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------


def state_file() -> Path:
    return STATE_DIR / "state.json"


def key_path() -> Path:
    return STATE_DIR / "keys" / "id_ed25519"


def known_hosts_path() -> Path:
    return STATE_DIR / "known_hosts"


def imds_hosts_file() -> Path:
    return STATE_DIR / "imds-hosts.json"


def logs_dir() -> Path:
    path = STATE_DIR / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def repo_root(cache: Path | None = None) -> Path:
    return (cache or CACHE_DIR) / "serve"


def images_dir(cache: Path | None = None) -> Path:
    return (cache or CACHE_DIR) / "images"


def monitoring_dir() -> Path:
    """The sandbox Prometheus' config and the target files ``tritonfleet monitoring targets`` writes for it."""
    return STATE_DIR / "monitoring"


def prometheus_url() -> str:
    return f"http://{BRIDGE_IP}:{PROMETHEUS_PORT}"


def pypi_index_url() -> str:
    """The sandbox's PyPI simple index (its wheels: :data:`tritonfleet.sandbox.pypi.WHEELS`), for
    ``triton_pip_index``; plain HTTP on the bridge, so pip needs ``--trusted-host`` for it."""
    return f"http://{BRIDGE_IP}:{REPO_PORT}/{PYPI_PATH}/"


def s3_endpoint() -> str:
    return f"http://{BRIDGE_IP}:{S3_PORT}"


# ---------------------------------------------------------------------------------------------
# State file
# ---------------------------------------------------------------------------------------------


def empty_state() -> dict:
    return {"hosts": {}, "services": {}}


def load_state() -> dict:
    try:
        return json.loads(state_file().read_text())
    except FileNotFoundError:
        return empty_state()


def write_private(path: Path, text: str) -> None:
    """Write ``path`` atomically, readable by its owner only (from the first byte on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)  # whatever the umask
        fh.write(text)
    tmp.replace(path)


def save_state(state: dict) -> None:
    """The state holds the repository secret: owner-only (0600)."""
    write_private(state_file(), json.dumps(state, indent=2, sort_keys=True))


@contextlib.contextmanager
def build_lock(directory: Path, name: str) -> Iterator[None]:
    """One builder of ``name`` in ``directory`` at a time on this machine (``flock``): a second process, or thread,
    waits, saying so, and then finds it built (the background prefetch of `make test` and the fleet's ``up``)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{name}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process building {name} in {directory} (log: {logs_dir() / 'prefetch.log'})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One sandbox operation at a time on this machine."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
