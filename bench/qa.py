"""QA runner throughput against perf_analyzer (issue "Accuracy QA", part 6): the same server (the real
Triton 2.51 from the nvidia-pytriton wheel, on CPU), the same model (the self-test's add_sub, TorchScript on
CPU through gen-model's Python backend), the same data and concurrency; one run of each, then the ratio.

    make bench-qa                               # concurrency 5, batches of 6 (dynamic batching), gRPC
    python bench/qa.py --concurrency 1 --unbatched --protocol http --seconds 8 --json out.json

perf_analyzer is the binary of the ``tritonclient==2.51.0`` wheel (fetched once with ``pip download`` into
.cache/qa-bench/), run with the libraries the nvidia-pytriton wheel ships (``nvidia_pytriton.libs``; its
hashed names are linked to the names perf_analyzer asks for). It gets the data without
``validation_data``: perf_analyzer 2.51 compares every row of a batch with the first row's expected bytes,
so correct batches made of different entries fail there. The runner checks every response.

perf_analyzer measures first (``-p`` window, up to 6 trials until within 20 %); the runner then sends as many
requests as perf_analyzer's rate fills in ``--seconds``. Target: runner / perf_analyzer >= 0.80. A missed
target is reported, not an error: exit 1 only when a tool fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "genmodel"))  # the Triton server harness of the triton test layer

CACHE = ROOT / ".cache" / "qa-bench"
TRITONCLIENT = "tritonclient==2.51.0"
TARGET = 0.8
BATCH = 6


class BenchError(Exception):
    """A tool failed (exit 1)."""


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def parse_perf_analyzer(text: str) -> dict[str, float]:
    """Throughput (infer/s) and p50/p99 latency (ms) of perf_analyzer's last summary."""
    throughput = re.findall(r"Throughput: ([\d.]+) infer/sec", text)
    if not throughput:
        raise BenchError("perf_analyzer printed no throughput:\n" + "\n".join(text.strip().splitlines()[-8:]))
    out = {"throughput": float(throughput[-1])}
    for key in ("p50", "p99"):
        found = re.findall(rf"{key} latency: (\d+) usec", text)
        if found:
            out[f"{key}_ms"] = int(found[-1]) / 1000
    return out


def perf_analyzer() -> tuple[Path, dict[str, str]]:
    """The binary and its environment; downloads the tritonclient wheel once."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    binary = Path(os.environ.get("PERF_ANALYZER", CACHE / "perf_analyzer"))
    shipped = purelib / "tritonclient" / "bin" / "perf_analyzer"
    if not binary.exists() and shipped.exists():
        binary = shipped
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"fetching perf_analyzer ({TRITONCLIENT}) into {CACHE} ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(CACHE), TRITONCLIENT],
                       check=True, timeout=600)
        wheel = next(CACHE.glob("tritonclient-2.51.0-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            binary.write_bytes(z.read("tritonclient-2.51.0.data/data/bin/perf_analyzer"))
        binary.chmod(0o755)
    libs = purelib / "nvidia_pytriton.libs"
    links = CACHE / "lib"
    links.mkdir(parents=True, exist_ok=True)
    for want, pattern in (("libb64.so.0d", "libb64-*.so.0d"), ("libcudart.so.12", "libcudart-*.so.12*")):
        found = sorted(libs.glob(pattern))
        if not found:
            raise BenchError(f"{libs}: no {pattern} (is nvidia-pytriton installed?)")
        link = links / want
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(found[0])
    env = dict(os.environ, LD_LIBRARY_PATH=f"{links}:{libs}")
    return binary, env


def run_perf_analyzer(binary: Path, env: dict, model: str, url: str, protocol: str, batch: int, data: Path,
                      concurrency: int, window_ms: int) -> dict[str, float]:
    args = [str(binary), "-m", model, "-u", url, "-i", protocol, "--input-data", str(data),
            "--concurrency-range", str(concurrency), "-p", str(window_ms), "--max-trials", "6",
            "--stability-percentage", "20"]
    if batch > 1:
        args += ["-b", str(batch)]
    proc = None
    for _ in range(3):  # a shared host may keep it from a stable measurement: try again
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode == 0 and "Throughput" in proc.stdout:
            return parse_perf_analyzer(proc.stdout)
    raise BenchError(f"perf_analyzer exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-400:]}")


def run_runner(work: Path, model: str, url: str, protocol: str, batch: int, data: Path, concurrency: int,
               requests: int, stamp: str) -> dict:
    suites = work / f"suites-{stamp}"
    suites.mkdir()
    doc = {"model": model, "concurrency": [concurrency], "requests": requests, "timeout": 600,
           "cases": [{"name": "correct", "data": str(data)}]}
    if batch > 1:
        doc["batch_size"] = batch
    (suites / f"{model}.json").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, "-m", "tritonfleet.agent", "qa", "run", "--suites", str(suites),
                           "--server", f"bench={protocol}://{url}", "--out", str(work), "--stamp", stamp],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    if proc.returncode != 0:
        raise BenchError(f"qa run exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-600:]}")
    (row,) = json.loads((work / f"{stamp}.json").read_text())["cases"]
    return row


def bench(args: argparse.Namespace, work: Path) -> dict:
    from genmodel_harness import TritonServer, layout_triton, pytriton_dist

    from tritonfleet.agent.qa.selftest import data_file
    from tritonfleet.genmodel.selftest import write_repository

    if pytriton_dist() is None:
        raise BenchError("nvidia-pytriton==0.7.0 (the Triton 2.51 server) is not installed")
    binary, env = perf_analyzer()
    batched = not args.unbatched
    model = f"add_sub_single_{'batched' if batched else 'unbatched'}_default_batch"
    batch = BATCH if batched else 1
    repo = write_repository(work / "selftest", "cpu", only=[model])
    correct = work / "correct.json"
    correct.write_text(json.dumps(data_file("correct", batched)))
    inputs_only = work / "inputs.json"
    inputs_only.write_text(json.dumps({"data": data_file("correct", batched)["data"]}))
    server = TritonServer(layout_triton(work / "triton"), repo.models, work / "tritonserver.log")
    server.start()
    try:
        url = server.grpc_url if args.protocol == "grpc" else server.http_url
        run_runner(work, model, url, args.protocol, batch, correct, args.concurrency, 200, "warmup")
        pa = run_perf_analyzer(binary, env, model, url, args.protocol, batch, inputs_only, args.concurrency,
                               args.window_ms)
        requests = max(500, int(pa["throughput"] / batch * args.seconds))
        row = run_runner(work, model, url, args.protocol, batch, correct, args.concurrency, requests, "bench")
    finally:
        server.stop()
    r = ratio(row["throughput"] or 0.0, pa["throughput"])
    return {"model": model, "protocol": args.protocol, "concurrency": args.concurrency, "batch": batch,
            "perf_analyzer": pa, "runner": {k: row[k] for k in ("throughput", "p50_ms", "p99_ms", "requests")},
            "ratio": r, "target": TARGET, "pass": r is not None and r >= TARGET, "cpus": os.cpu_count()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=5, help="requests in flight (default 5)")
    parser.add_argument("--unbatched", action="store_true", help="the max_batch_size 0 model (requests of 6 rows)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the runner's run should take")
    parser.add_argument("--window-ms", type=int, default=3000, help="perf_analyzer's measurement window")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = parser.parse_args()
    if not 1 <= args.concurrency <= 256:
        parser.error("--concurrency must be within 1 to 256")
    try:
        with tempfile.TemporaryDirectory(prefix="tf-bench-qa-") as d:
            result = bench(args, Path(d))
    except (BenchError, subprocess.SubprocessError, OSError, ValueError, RuntimeError) as exc:
        print(f"bench/qa.py: error: {exc}", file=sys.stderr)
        return 1
    pa, rn = result["perf_analyzer"], result["runner"]
    print(f"\nQA runner vs perf_analyzer: {result['model']} over {result['protocol']}, concurrency "
          f"{result['concurrency']}, batch {result['batch']}, {result['cpus']} CPUs (server and client share them)")
    print(f"  perf_analyzer  {pa['throughput']:10.1f} infer/s  p50 {pa.get('p50_ms', 0):6.2f} ms  "
          f"p99 {pa.get('p99_ms', 0):6.2f} ms  (no output validation)")
    print(f"  qa runner      {rn['throughput']:10.1f} infer/s  p50 {rn['p50_ms']:6.2f} ms  p99 {rn['p99_ms']:6.2f} ms"
          f"  ({rn['requests']} requests, every response checked)")
    verdict = "PASS" if result["pass"] else "FAIL"
    print(f"{verdict}  runner / perf_analyzer = {result['ratio']:.2f}x (target >= {TARGET:.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
