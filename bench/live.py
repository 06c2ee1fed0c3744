"""Clients of an unchanged model during a live update (issue "Faults on the data path", part 8): the real
Triton 2.51 from the nvidia-pytriton wheel on CPU, explicit model control on DIR/current, two Python-backend
models (``steady``, untouched; ``moving``, a new release per update). An HTTP and a gRPC client (processes of
their own: tests/genmodel/steady_client.py, loopback only, bounded) send RATE requests a second each to
``steady`` while ``tritonfleet-agent sync`` (a process, niced like the models role runs it) switches and
reloads ``moving``, UPDATES times, with idle windows of the same machine in between.

The named peer, measured in the same run: the same updates with the agent loading over HTTP (Triton's HTTP
repository API), as it did before; Triton then holds up HTTP requests to other models for the whole load.

    make bench-live                        # 60 req/s per protocol, 6 updates per path
    python bench/live.py --rate 100 --updates 10 --json out.json

Target: with the agent's gRPC loads, 0 failed requests and p99 during the updates <= 3x the idle p99, on both
protocols. A missed target is reported, not an error: exit 1 only when something fails to run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "genmodel"))  # the Triton server harness of the triton test layer

from genmodel_harness import free_ports, layout_triton  # noqa: E402

BIN = Path(sys.executable).parent
CLIENT = ROOT / "tests" / "genmodel" / "steady_client.py"
TARGET = 3.0
AWS_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
           "AWS_EC2_METADATA_DISABLED": "true"}
MODEL_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

RELEASE = {release}


class TritonPythonModel:
    def execute(self, requests):
        out = np.array([RELEASE], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ANSWER", out)]) for _ in requests]
'''
CONFIG = '''backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_INT32, dims: [1] }]
output [{ name: "ANSWER", data_type: TYPE_INT32, dims: [1] }]
instance_group [{ kind: KIND_CPU, count: 1 }]
'''


def tree(moving: int) -> dict[str, bytes]:
    out = {}
    for name, release in (("steady", 7), ("moving", moving)):
        out[f"{name}/config.pbtxt"] = CONFIG.encode()
        out[f"{name}/1/model.py"] = MODEL_PY.format(release=release).encode()
    return out


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def within(samples: list, spans: list[tuple[float, float]]) -> list[float]:
    return [lat for t, lat, _ok in samples if any(a <= t <= b for a, b in spans)]


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


class Bench:
    def __init__(self, work: Path, rate: float, updates: int, rest: float) -> None:
        self.work, self.rate, self.updates, self.rest = work, rate, updates, rest
        self.procs: list[subprocess.Popen] = []
        self.release = 1

    def start(self) -> None:
        import boto3

        (s3_port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{s3_port}"
        self.procs.append(subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(s3_port)
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                               aws_access_key_id="bench", aws_secret_access_key="bench")
        self.s3.create_bucket(Bucket="bench")
        self.put(tree(1))
        self.dest = self.work / "models"
        self.agent([])  # the first version, before the server starts
        layout = layout_triton(self.work / "triton")
        self.http, self.grpc, metrics = free_ports(3)
        args = [str(layout.binary), f"--model-repository={self.dest / 'current'}",
                f"--backend-directory={layout.root / 'backends'}", f"--cache-directory={layout.root / 'caches'}",
                "--http-address=127.0.0.1", f"--http-port={self.http}", "--grpc-address=127.0.0.1",
                f"--grpc-port={self.grpc}", "--metrics-address=127.0.0.1", f"--metrics-port={metrics}",
                "--allow-gpu-metrics=false", "--model-control-mode=explicit", "--load-model=*", "--log-verbose=0"]
        log = open(self.work / "tritonserver.log", "wb")  # noqa: SIM115 - the server's until the end
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=layout.env,
                                           cwd=layout.root, start_new_session=True))
        wait_port(self.http, 120)
        import urllib.request

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"tritonserver not ready; see {self.work / 'tritonserver.log'}")

    def put(self, files: dict[str, bytes]) -> None:
        for path, data in files.items():
            self.s3.put_object(Bucket="bench", Key=f"repo/{path}", Body=data)

    def agent(self, extra: list[str]) -> float:
        cmd = ["nice", "-n", "10", str(BIN / "tritonfleet-agent"), "sync", "--source", "s3://bench/repo",
               "--dest", str(self.dest), "--endpoint-url", self.endpoint, "--json", *extra]
        began = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **AWS_ENV})
        if proc.returncode != 0:
            raise SystemExit(f"the agent failed: {proc.stderr.strip().splitlines()[-1:]}")
        return time.monotonic() - began

    def run(self, via: str) -> dict:
        """UPDATES updates with the agent loading over ``via``, the clients meanwhile."""
        url = f"grpc://127.0.0.1:{self.grpc}" if via == "grpc" else f"http://127.0.0.1:{self.http}"
        stop = self.work / f"stop-{via}"
        clients = {proto: subprocess.Popen([sys.executable, str(CLIENT), proto, f"127.0.0.1:{port}", "steady",
                                            str(self.rate), "3", "600", str(stop)], stdout=subprocess.PIPE)
                   for proto, port in (("http", self.http), ("grpc", self.grpc))}
        idle, busy, seconds = [], [], []
        try:
            time.sleep(1.0)
            for _ in range(self.updates):
                self.release += 1
                self.put(tree(self.release))
                began = time.monotonic()
                time.sleep(self.rest)
                idle.append((began, time.monotonic()))
                began = time.monotonic()
                seconds.append(self.agent(["--server", f"triton={url}", "--timeout", "120"]))
                busy.append((began, time.monotonic()))
        finally:
            stop.touch()
            outs = {p: json.loads(c.communicate(timeout=120)[0] or b'{"samples": []}')["samples"]
                    for p, c in clients.items()}
        result = {"updates": self.updates, "update_seconds": round(sum(seconds) / len(seconds), 2)}
        for proto, samples in outs.items():
            during, before = within(samples, busy), within(samples, idle)
            result[proto] = {"requests": len(samples), "failed": sum(1 for *_, ok in samples if not ok),
                             "rate": round(len(during) / sum(b - a for a, b in busy), 1),
                             "idle_p99_ms": round(p99(before) * 1000, 1), "update_p99_ms": round(p99(during) * 1000, 1),
                             "update_max_ms": round(max(during, default=0) * 1000, 1)}
            result[proto]["ratio"] = round(result[proto]["update_p99_ms"] / result[proto]["idle_p99_ms"], 2)
        return result

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=60, help="requests a second per protocol (default 60)")
    parser.add_argument("--updates", type=int, default=6, help="updates per path (default 6)")
    parser.add_argument("--rest", type=float, default=2.0, help="idle seconds before each update (default 2)")
    parser.add_argument("--json", metavar="FILE", help="write the results here too")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-bench-live-"))
    bench = Bench(work, args.rate, args.updates, args.rest)
    try:
        bench.start()
        results = {"grpc": bench.run("grpc"), "http (peer)": bench.run("http")}
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"Live update of one model; clients of another at {args.rate:g} req/s per protocol "
          f"({os.cpu_count()} CPUs)\n")
    print("| agent loads over | client | requests | failed | idle p99 ms | update p99 ms | max ms | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for via, r in results.items():
        for proto in ("http", "grpc"):
            n = r[proto]
            print(f"| {via} | {proto} | {n['requests']} | {n['failed']} | {n['idle_p99_ms']} | {n['update_p99_ms']} "
                  f"| {n['update_max_ms']:.0f} | {n['ratio']} |")
    ok = all(results["grpc"][p]["failed"] == 0 and results["grpc"][p]["ratio"] <= TARGET for p in ("http", "grpc"))
    print(f"\ntarget (gRPC loads: 0 failed, update p99 <= {TARGET:g}x idle p99 on both protocols): "
          f"{'PASS' if ok else 'FAIL'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
