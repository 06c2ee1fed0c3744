"""The host agent's wheelhouse, built on the controller: what ``/opt/tritonfleet/venv`` is installed from.

Hosts reach no package index, so everything the agent needs travels with it: the ``tritonfleet-agent``
wheel (``tritonfleet/agent`` plus ``tritonfleet/__init__.py``, built with pip from
``templates/agent/pyproject.toml.j2``), boto3 and its pure-Python dependencies resolved by pip for every
supported host Python, and pip itself (hosts may lack it: the install runs pip from its wheel). All wheels
are ``py3-none-any``, so one wheelhouse serves x86_64 and arm64 alike.

The build is cached under ``~/.cache/tritonfleet/wheelhouse/<key>`` (the key: the agent's source, the
requirements and this recipe), so it runs once per agent change; pip's own cache serves repeated
downloads. ``digest`` (of every wheel's bytes) is what hosts compare to decide on a reinstall.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

import tritonfleet
from tritonfleet.templating import render

#: Host Pythons the agent supports (README "Model repositories"); preflight refuses others.
PYTHONS = ("3.9", "3.10", "3.11", "3.12")
#: boto3 for the S3 sync (botocore and s3transfer: imported directly too); prometheus-client for AWS's neuron-monitor-prometheus.py (the monitoring role runs it
#: with the agent's Python on Neuron hosts). Both pure Python.
REQUIREMENTS = ("boto3>=1.34,<2", "botocore>=1.34,<2", "s3transfer>=0.10,<0.20", "prometheus-client>=0.17,<1")
#: The QA runner's extra (``tritonfleet-agent[qa]``): platform wheels, so built per host Python and machine.
QA_REQUIREMENTS = ("numpy>=1.21,<2", "tritonclient[grpc]==2.51.*", "PyYAML>=5.4", "pydantic>=2.7,<3")
#: ``[live]``: the gRPC client the sync's live reloads use (Triton's gRPC repository API: a load over HTTP holds
#: up the server's HTTP clients). QA's extra has it too.
LIVE_REQUIREMENTS = ("tritonclient[grpc]==2.51.*",)
#: ``[qa-http]``: tritonclient's HTTP client, whose geventhttpclient pin has no wheels past Python 3.11 (pip
#: cannot pick this by a marker for another Python, so the extra is chosen per host Python: :func:`qa_extras`).
QA_HTTP_REQUIREMENTS = ("tritonclient[http]==2.51.*",)
#: ``uname -m`` -> the manylinux platform tags pip may pick wheels of (glibc 2.17 to 2.34: AL2023 has 2.34).
MACHINES = {m: tuple([f"manylinux2014_{m}"] + [f"manylinux_2_{v}_{m}" for v in (17, 24, 27, 28, 31, 34)])
            for m in ("x86_64", "aarch64")}
RECIPE = 3
PACKAGE = "tritonfleet-agent"


class WheelhouseError(RuntimeError):
    """The wheelhouse could not be built (one line: pip's last words)."""


@dataclass(frozen=True)
class Wheelhouse:
    path: Path  # directory of *.whl
    digest: str  # sha256 over the wheels' names and bytes
    version: str  # of the tritonfleet-agent wheel in it

    def wheels(self) -> list[str]:
        return sorted(p.name for p in self.path.glob("*.whl"))


def qa_extras(python: str) -> str:
    """The extras a host Python gets with QA: ``qa,qa-http`` up to 3.11, ``qa`` (gRPC only) after."""
    return "qa,qa-http" if tuple(int(p) for p in python.split(".")) <= (3, 11) else "qa"


def _sources() -> dict[str, bytes]:
    """Package path -> bytes of every file the agent wheel holds (tritonfleet.agent and .agent.qa)."""
    pkg = Path(tritonfleet.__file__).parent
    files = {"tritonfleet/__init__.py": (pkg / "__init__.py").read_bytes()}
    for sub in ("agent", "agent/qa"):
        for path in sorted((pkg / sub).glob("*.py")):
            files[f"tritonfleet/{sub}/{path.name}"] = path.read_bytes()
    return files


def _key(sources: dict[str, bytes], qa_for: tuple[str, str] | None = None) -> str:
    h = hashlib.sha256(f"{RECIPE}\n{PYTHONS}\n{REQUIREMENTS}\n{QA_REQUIREMENTS}\n{QA_HTTP_REQUIREMENTS}\n"
                      f"{LIVE_REQUIREMENTS}\n".encode())
    if qa_for:
        h.update(f"qa {qa_for[0]} {qa_for[1]}\n".encode())
    for name, data in sorted(sources.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def digest_of(path: Path) -> str:
    h = hashlib.sha256()
    for wheel in sorted(path.glob("*.whl")):
        h.update(wheel.name.encode() + b"\0" + hashlib.sha256(wheel.read_bytes()).digest())
    return h.hexdigest()


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tritonfleet" / "wheelhouse"


def _pip(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()
                 and not line.startswith("WARNING: Location")]
        raise WheelhouseError(f"pip {args[0]} failed: {lines[-1] if lines else f'exit {proc.returncode}'}")


def _build_into(out: Path, sources: dict[str, bytes], version: str, qa_for: tuple[str, str] | None) -> None:
    with tempfile.TemporaryDirectory(prefix="tf-agent-src-") as tmp:
        src = Path(tmp)
        for name, data in sources.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes(data)
        (src / "pyproject.toml").write_text(render("agent/pyproject.toml.j2", version=version,
                                                   python_min=PYTHONS[0], requirements=REQUIREMENTS,
                                                   qa_requirements=QA_REQUIREMENTS,
                                                   qa_http_requirements=QA_HTTP_REQUIREMENTS,
                                                   live_requirements=LIVE_REQUIREMENTS))
        isolation = [] if _builds_in_place() else ["--use-pep517"]
        no_isolation = ["--no-build-isolation"] if not isolation else []
        _pip("wheel", "--quiet", "--no-deps", *no_isolation, *isolation, "--wheel-dir", str(out), str(src))
    if qa_for:  # one host Python and machine: the agent with its QA extra (live's too), platform wheels included
        python, machine = qa_for
        platforms = [a for p in MACHINES[machine] for a in ("--platform", p)]
        _pip("download", "--quiet", "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
             *platforms, "--dest", str(out), "--find-links", str(out), f"{PACKAGE}[{qa_extras(python)},live]=={version}",
             "pip")
        return
    # The oldest Python first, then the others from what it got when that satisfies them (one boto3 for all
    # hosts keeps the upload small), else from the index (a dependency that dropped the old Python).
    for python in PYTHONS:
        args = ("download", "--quiet", "--only-binary=:all:", "--python-version", python, "--dest", str(out),
                "--find-links", str(out), f"{PACKAGE}=={version}", "pip")
        try:
            _pip(*args[:1], "--no-index", *args[1:])
        except WheelhouseError:
            _pip(*args)
    impure = [p.name for p in out.glob("*.whl") if not p.name.endswith("-none-any.whl")]
    if impure:
        raise WheelhouseError(f"platform-specific wheels in the agent's wheelhouse: {', '.join(impure)}")


def _builds_in_place() -> bool:
    """This Python's setuptools can build the agent's wheel without an index (``--no-build-isolation``): it is
    there and has ``bdist_wheel`` (setuptools 70.1 and later, or an older one with the ``wheel`` package). A
    Python 3.11 venv of Debian 12 or Ubuntu 22.04 has setuptools 66 and no wheel (an Auto Scaling group's
    bootstrap venv): pip then builds in an isolated environment from the index."""
    try:
        found = Version(metadata.version("setuptools"))
    except (metadata.PackageNotFoundError, InvalidVersion):
        return False
    if found >= Version("70.1"):
        return True
    try:
        metadata.version("wheel")
    except metadata.PackageNotFoundError:
        return False
    return True


#: One build at a time in this process. pyinfra runs under gevent, where this lock (threading is patched)
#: yields to other greenlets while another builds; a second flock of the cache by the same process would
#: block the whole process instead, with the first build unable to finish.
_BUILDING = threading.Lock()


@functools.cache
def build(qa_for: tuple[str, str] | None = None) -> Wheelhouse:
    with _BUILDING:
        return _build(qa_for)


def _build(qa_for: tuple[str, str] | None) -> Wheelhouse:
    """The wheelhouse for the agent as it is in this checkout (built once, then from the cache): pure
    wheels for every supported host Python, or with ``qa_for=(python, machine)`` the agent with its QA
    extra for that host Python (``"3.11"``) and machine (``uname -m``)."""
    if qa_for and (qa_for[0] not in PYTHONS or qa_for[1] not in MACHINES):
        raise WheelhouseError(f"no QA wheelhouse for Python {qa_for[0]} on {qa_for[1]}")
    sources = _sources()
    key = _key(sources, qa_for)
    version = f"{tritonfleet.__version__}+{_key(sources)[:12]}"  # the same agent in every wheelhouse
    root = cache_root()
    done = root / key
    if not (done / "DONE").is_file():
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root / ".lock"):
            if not (done / "DONE").is_file():
                work = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=root))
                try:
                    _build_into(work, sources, version, qa_for)
                    (work / "DONE").write_text(digest_of(work) + "\n")
                    shutil.rmtree(done, ignore_errors=True)
                    os.rename(work, done)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    return Wheelhouse(done, (done / "DONE").read_text().strip(), version)


@contextlib.contextmanager
def _locked(path: Path, timeout: float = 1800):
    """The cache's lock against other processes, waited for without blocking the process (gevent)."""
    with open(path, "a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise WheelhouseError(f"{path} is held by another process for over {timeout:.0f}s") from None
                time.sleep(0.2)
        yield
