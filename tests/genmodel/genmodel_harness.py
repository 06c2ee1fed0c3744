"""Helpers for the gen-model tests: the real Triton 2.51 server from the nvidia-pytriton wheel.

Layout as in the feasibility notes: copy ``pytriton/tritonserver/{bin,backends,caches}``, put the
Python-backend stub for the running Python into ``backends/python``, and run the binary with
``LD_LIBRARY_PATH=<site-packages>/nvidia_pytriton.libs:<python LIBDIR>`` and the venv's ``bin``
first on ``PATH`` (that is how the stub finds the venv's site-packages).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

LOG_TAG = "tritonfleet-genmodel"


def pytriton_dist() -> Path | None:
    """``site-packages/pytriton/tritonserver`` of this interpreter, if the wheel is installed."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    dist = purelib / "pytriton" / "tritonserver"
    return dist if (dist / "bin" / "tritonserver").exists() else None


@dataclass
class TritonLayout:
    root: Path
    env: dict[str, str]

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"


def layout_triton(dest: Path) -> TritonLayout:
    dist = pytriton_dist()
    if dist is None:
        raise RuntimeError("nvidia-pytriton is not installed")
    for part in ("bin", "backends", "caches"):
        shutil.copytree(dist / part, dest / part)
    shutil.rmtree(dest / "backends" / "python" / "__pycache__", ignore_errors=True)
    stub = (
        dist
        / "python_backend_stubs"
        / f"{sys.version_info.major}.{sys.version_info.minor}"
        / "triton_python_backend_stub"
    )
    shutil.copy2(stub, dest / "backends" / "python" / stub.name)
    libs = dist.parent.parent / "nvidia_pytriton.libs"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(libs), sysconfig.get_config_var("LIBDIR") or "") if p)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env.pop("PYTHONPATH", None)
    return TritonLayout(dest, env)


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class TritonServer:
    layout: TritonLayout
    repository: Path
    log_path: Path
    pythonpath: list[Path] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 180.0) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        env = dict(self.layout.env)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(str(p) for p in self.pythonpath)
        args = [
            str(self.layout.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={self.layout.root / 'backends'}",
            f"--cache-directory={self.layout.root / 'caches'}",
            "--http-address=127.0.0.1",
            f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.grpc_port}",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            "--model-control-mode=none",
            "--log-verbose=0",
        ]
        log = open(self.log_path, "wb")  # noqa: SIM115 - the server owns it until stop()
        self.proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=self.layout.root
        )
        log.close()
        deadline = time.monotonic() + timeout
        url = f"http://{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"tritonserver not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 40.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
                os.killpg(proc.pid, signal.SIGKILL)  # the server's own session: its stubs only
            proc.wait(timeout=10)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def tagged(self) -> list[dict[str, str]]:
        """``key=value`` records of every log line the generated model.py (or a stand-in) wrote."""
        return parse_tagged(self.log_text())


_KV = re.compile(r"(\w+)=(\S+)")


def parse_tagged(text: str, tag: str = LOG_TAG) -> list[dict[str, str]]:
    records = []
    for line in text.splitlines():
        pos = line.find(tag)
        if pos < 0:
            continue
        body = line[pos + len(tag) :].rstrip().rstrip('"')
        records.append(dict(_KV.findall(body)))
    return records
