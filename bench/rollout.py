"""Rollouts through the front door (issue "The front door"): 4 sandbox Triton hosts behind the sandbox's HAProxy,
a bounded client at ``--rate`` requests a second (half HTTP, half gRPC, every answer checked) through the
balancer while the rollout runs. Measured in one run:

1. **canary and full rollout**: v1 -> v2 (a new model version and a new container: ``triton_shm_size`` changes, so
   every Triton container is replaced) with a traffic canary (``--canary 1 --canary-weight W --bake B``, gates from
   the sandbox Prometheus), then the other hosts one batch at a time. Failed requests (target 0), time per batch,
   and the canary's measured share of requests from Triton's per-server counters (Prometheus,
   ``nv_inference_request_success`` by host over the bake window; target: the weight +/- 3 points);
2. **a breach**: v1 -> v2slow (right answers, 40 ms late): the latency gate fails after the bake; the time from the
   gates' verdict to the canary rolled back and back in the balancer, and failed requests;
3. **the peer, no balancer**: the same v1 -> v2 rollout without ``--lb``, the client spreading its requests over
   the hosts itself (round robin, as a client without a load balancer does): its failed requests.

    make bench-rollout                      # needs root (the sandbox); prints the tables
    python bench/rollout.py --markdown      # the README table
    python bench/rollout.py --rate 80 --bake 40

Every request goes to sandbox addresses only, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import pprint
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tritonfleet.sandbox import fleet, layout  # noqa: E402
from tritonfleet.sandbox.inventory import sandbox_hosts  # noqa: E402
from tritonfleet.sandbox.traffic import Traffic  # noqa: E402

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
TF = str(Path(sys.executable).parent / "tritonfleet")
HOSTS = [f"bench-{i}" for i in range(1, 5)]
LB = "lb"
ADD_SUB = (fleet.SAMPLES / "add_sub/1/model.py").read_text()
CONFIG = (fleet.SAMPLES / "add_sub/config.pbtxt").read_text()
SLOW = ADD_SUB.replace("    def execute(self, requests):\n",
                       "    def execute(self, requests):\n        __import__('time').sleep(0.04)\n")


def log(msg: str) -> None:
    print(f"[bench-rollout {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _model(name: str, code: str = ADD_SUB, note: str = "") -> dict[str, str]:
    return {f"{name}/config.pbtxt": CONFIG.replace('name: "add_sub"', f'name: "{name}"'),
            f"{name}/1/model.py": code + note}


def seed(prefix: str) -> dict[str, str]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                      aws_access_key_id="sandbox", aws_secret_access_key="sandbox")
    trees = {"v1": {**_model("add_sub"), **_model("steady")},
             "v2": {**_model("add_sub", note="# v2\n"), **_model("steady"), **_model("extra")},
             "v2slow": {**_model("add_sub", SLOW), **_model("steady"), **_model("extra")}}
    out = {}
    for version, tree in trees.items():
        for path, text in tree.items():
            s3.put_object(Bucket=fleet.S3_BUCKET, Key=f"{prefix}/{version}/{path}", Body=text.encode())
        out[version] = f"s3://{fleet.S3_BUCKET}/{prefix}/{version}"
    return out


def inventory(tmp: Path, name: str, extra: dict, per_host: dict | None = None) -> Path:
    hosts = [(n, {**d, **extra, **((per_host or {}).get(n, {}))}) for n, d in sandbox_hosts(HOSTS)]
    inv = tmp / f"{name}.py"
    inv.write_text(f"triton = {pprint.pformat(hosts)}\nlb = {pprint.pformat(sandbox_hosts([LB]))}\n")
    return inv


def pyinfra(inv: Path, deploy: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    proc = subprocess.run([PYINFRA, "-y", str(inv), deploy], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    if proc.returncode:
        raise SystemExit(f"{deploy} on {inv.name} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def rollout(inv: Path, reports: Path, *args: str) -> tuple[int, dict, list[tuple[float, str]]]:
    """The rollout CLI; its exit code, report and output lines with the monotonic time each arrived."""
    before = set(reports.glob("rollout-*.json"))
    proc = subprocess.Popen([TF, "rollout", "--inventory", str(inv), "--reports", str(reports), *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    timer = threading.Timer(1800, proc.kill)  # bounded
    timer.start()
    try:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip()))
        rc = proc.wait()
    finally:
        timer.cancel()
    (path,) = set(reports.glob("rollout-*.json")) - before
    return rc, json.loads(path.read_text()), lines


def prometheus(expr: str, at: float) -> float:
    url = f"{layout.prometheus_url()}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(url, timeout=10) as resp:
        result = json.load(resp)["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def canary_share(report: dict) -> float | None:
    """The canary hosts' share (%) of add_sub requests over the bake window, from Triton's per-server counters."""
    traffic = report.get("traffic_canary") or {}
    window = (traffic.get("verdict") or {}).get("window", "")
    m = re.search(r"ending (\S+Z)", window)
    if not m:
        return None
    end = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ"))
    w = int(traffic["bake"])

    def requests(hosts: list[str]) -> float:
        return prometheus(f'sum(increase(nv_inference_request_success{{job="triton",model="add_sub",'
                          f'host=~"{"|".join(hosts)}"}}[{w}s]))', end)

    everyone = requests(HOSTS)
    return round(100 * requests(traffic["hosts"]) / everyone, 2) if everyone else None


def batch_times(report: dict) -> list[float]:
    """Seconds per batch: its slowest host (the hosts of a batch run at once)."""
    per: dict[int, float] = {}
    for h in report["hosts"]:
        if h["batch"]:
            per[h["batch"]] = max(per.get(h["batch"], 0.0), h["seconds"])
    return [per[b] for b in sorted(per)]


def since(lines: list[tuple[float, str]], start: str, end: str) -> float | None:
    t0 = next((t for t, line in lines if start in line), None)
    t1 = next((t for t, line in lines if t0 is not None and t >= t0 and end in line), None)
    return round(t1 - t0, 1) if t0 is not None and t1 is not None else None


def ready_in_balancer(deadline: float = 120) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        text = urllib.request.urlopen(f"http://{lb_ip()}:8405/metrics", timeout=10).read().decode()
        up = set(re.findall(r'^haproxy_server_status\{proxy="triton_(?:http|grpc)",server="([^"]+)",state="UP"\} 1$',
                            text, re.M))
        if {f"{h}-triton" for h in HOSTS} <= up:
            return
        time.sleep(1)
    raise SystemExit(f"the servers are not all UP in HAProxy after {deadline}s")


def lb_ip() -> str:
    return dict(sandbox_hosts([LB]))[LB]["ssh_hostname"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=60, help="client requests a second (half HTTP, half gRPC)")
    ap.add_argument("--weight", type=int, default=10, help="the canary's traffic weight (%%)")
    ap.add_argument("--bake", type=float, default=30, help="seconds the canary bakes")
    ap.add_argument("--markdown", action="store_true", help="print the README table")
    ap.add_argument("--no-peer", action="store_true", help="skip the rollout without a balancer")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench-rollout needs root (the sandbox fleet)")

    log(f"sandbox: {', '.join(HOSTS)} (inf2.xlarge) and {LB} ({fleet.LB_TYPE})")
    fleet.up([*(fleet.HostSpec("inf2.xlarge", name=h) for h in HOSTS), fleet.HostSpec(fleet.LB_TYPE, name=LB)])
    tmp = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    reports = tmp / "reports"
    uris = seed(f"bench-rollout-{uuid.uuid4().hex[:8]}")
    common = {"monitoring_fleet": "sandbox", "qa_reports_dir": str(tmp / "qa")}
    inv = {"v1": inventory(tmp, "v1", {**common, "models_s3_uri": uris["v1"]}),
           # a new model version and a new container (its --shm-size): every host's Triton is replaced
           "v2": inventory(tmp, "v2", {**common, "models_s3_uri": uris["v2"], "triton_shm_size": "512m"}),
           "v2slow": inventory(tmp, "v2slow", {**common, "models_s3_uri": uris["v2"], "triton_shm_size": "512m"},
                               per_host={HOSTS[0]: {"models_s3_uri": uris["v2slow"]}})}
    gates = ["--lb", "haproxy", "--lb-timeout", "120", "--canary", "1", "--canary-weight", str(args.weight),
             "--bake", f"{args.bake:g}", "--prometheus", layout.prometheus_url(), "--fail-percent", "0"]

    def serve_v1() -> None:
        log("serving v1 (and HAProxy in front, Prometheus targets)")
        pyinfra(inv["v1"], "deploys/serve.py")
        pyinfra(inv["v1"], "deploys/lb.py")
        subprocess.run([TF, "monitoring", "targets", "--inventory", str(inv["v1"]), "--out",
                        str(layout.monitoring_dir())], cwd=ROOT, check=True, capture_output=True, timeout=120)
        ready_in_balancer()

    results: dict[str, dict] = {}
    serve_v1()
    log(f"1. canary ({args.weight}% for {args.bake:g}s) and full rollout v1 -> v2 through the front door")
    with Traffic(lb_ip(), rate=args.rate, max_seconds=1800) as traffic:
        rc, report, lines = rollout(inv["v2"], reports, *gates)
    results["full"] = {"rc": rc, "traffic": traffic.summary(), "batches": batch_times(report),
                       "share": canary_share(report),
                       "verdict": ((report.get("traffic_canary") or {}).get("verdict") or {}).get("line"),
                       "stopped": report["stopped"], "statuses": [h["status"] for h in report["hosts"]]}
    log(json.dumps(results["full"], default=str)[:2000])

    serve_v1()
    log("2. a canary 40 ms slower: the latency gate's breach and the rollback")
    with Traffic(lb_ip(), rate=args.rate, max_seconds=1800) as traffic:
        rc, report, lines = rollout(inv["v2slow"], reports, *gates)
    results["breach"] = {"rc": rc, "traffic": traffic.summary(), "share": canary_share(report),
                         "breach_to_rollback": since(lines, "canary gates failed", f"{HOSTS[0]}: rolled back"),
                         "verdict": ((report.get("traffic_canary") or {}).get("verdict") or {}).get("line"),
                         "stopped": report["stopped"], "statuses": [h["status"] for h in report["hosts"]]}
    log(json.dumps(results["breach"], default=str)[:2000])

    if not args.no_peer:
        serve_v1()
        log("3. the peer: the same rollout without a balancer, the client spreading requests over the hosts")
        addresses = [d["ssh_hostname"] for _, d in sandbox_hosts(HOSTS)]
        with Traffic(addresses, rate=args.rate, max_seconds=1800) as traffic:
            rc, report, lines = rollout(inv["v2"], reports, "--canary", "1", "--fail-percent", "0")
        results["peer"] = {"rc": rc, "traffic": traffic.summary(), "batches": batch_times(report),
                           "statuses": [h["status"] for h in report["hosts"]]}
        log(json.dumps(results["peer"], default=str)[:2000])
    serve_v1()  # leave v1 serving behind the front door

    (tmp / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print_tables(results, args)
    log(f"results: {tmp / 'results.json'}")
    ok = (results["full"]["traffic"]["failed"] == 0 and results["full"]["rc"] == 0
          and results["full"]["share"] is not None and abs(results["full"]["share"] - args.weight) <= 3
          and results["breach"]["rc"] != 0 and results["breach"]["traffic"]["failed"] == 0)
    log("targets met" if ok else "a target was missed (see the table)")
    return 0 if ok else 1


def print_tables(results: dict, args) -> None:
    full, breach, peer = results["full"], results["breach"], results.get("peer")
    t = full["traffic"]
    rows = [
        ("full rollout through HAProxy (4 hosts, canary + 3 batches)", f"{t['sent']} in {t['seconds']} s "
         f"({t['rate']}/s)", f"{t['failed']} failed, {t['wrong']} wrong",
         ", ".join(f"{s:.0f}" for s in full["batches"]) + " s",
         f"{full['share']}% (weight {args.weight}%)" if full["share"] is not None else "-"),
        ("latency breach: canary rolled back", f"{breach['traffic']['sent']} in {breach['traffic']['seconds']} s",
         f"{breach['traffic']['failed']} failed, {breach['traffic']['wrong']} wrong",
         f"verdict to rolled back and in: {breach['breach_to_rollback']} s",
         f"{breach['share']}% (weight {args.weight}%)" if breach["share"] is not None else "-"),
    ]
    if peer:
        pt = peer["traffic"]
        rows.append(("peer: same rollout, no balancer (client round robin)", f"{pt['sent']} in {pt['seconds']} s",
                     f"{pt['failed']} failed, {pt['wrong']} wrong", ", ".join(f"{s:.0f}" for s in peer["batches"]) + " s",
                     "-"))
    head = ("run", "requests (HTTP + gRPC)", "failed", "time per batch", "canary share")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        for r in rows:
            print("  ".join(f"{h}: {v}" for h, v in zip(head, r, strict=True)))


if __name__ == "__main__":
    sys.exit(main())
