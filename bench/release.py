"""Model releases on sandbox hosts (issue 27, pull mode): how long a new model release takes to reach every host,
and how many client requests fail meanwhile, three ways, on the same 8 sandbox inf2.xlarge hosts (``--hosts N``,
``--quick``: 2) in one run. Every host serves model ``add_sub``; each release changes its code
``(in0 + in1)`` -> ``(in0 + in1 + K)``, so an inference tells which release a host serves. A bounded client per
host (``--rate`` HTTP inferences a second, bounded in count and time) runs through each release; its answers are
also the poll that sees a host serving the new release (one every 50 ms at 20/s).

1. **pull mode** (``models_pull``, the resident agent checking the pointer every ``--interval`` s): the hosts are
   deployed once (``deploys/serve.py``) serving release v1; then v2's pointer is written with
   ``tritonfleet.fleet.release.release`` (what ``tritonfleet models release`` runs) and timed from that call
   until every host answers with v2;
2. **push mode** (plain S3 sync: ``models_s3_uri`` is one prefix, no agent between runs): the prefix is
   overwritten with release v3's files, and timed from the start of ``pyinfra INV deploys/models.py`` until
   every host answers with v3;
3. **the seed's way** (what users do by hand without tritonfleet), host after host: the host downloads release
   v4 from S3 into the directory its Triton container reads (an ``aws s3 sync`` emulated with boto3 in the host
   agent's Python: the hosts have no aws CLI), then ``docker restart triton``; timed from the first host's
   copy until every host answers with v4. (At the end the hosts are put back in order: v4 into the push prefix,
   one more ``deploys/models.py``, which repairs the version the copies wrote into.)

And the no-op cost per host and check: pull mode, one resident check with an unchanged pointer, measured on
the host with the agent's Python (a ``pull.Watcher`` built from the service's own command line, its state and
textfile written to a temporary directory, as the service's pass after its first: one conditional GET answered
304), and the service's CPU per check (from /proc over a window); push mode, the agent's
``sync --dry-run --json`` (what the models role runs on a no-op) timed on each host, and the wall of a no-op
``pyinfra INV deploys/models.py`` (both modes), divided per host.

    make bench-release                        # needs root (the sandbox); prints the table and PASS/FAIL
    python bench/release.py --quick           # 2 hosts, fewer repetitions
    python bench/release.py --markdown --json /tmp/release.json

Targets (issue 27): pull mode, a release reaches all 8 hosts within 10 s of its pointer write (the poll interval
included) with 0 failed requests; a resident no-op check <= 50 ms. Reported PASS/FAIL, not asserted: exit 1
only when a run fails. Every request goes to sandbox addresses only, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import pprint
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tritonfleet.sandbox import fleet  # noqa: E402

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
HOSTS = 8
QUICK_HOSTS = 2
ADD_SUB = (fleet.SAMPLES / "add_sub/1/model.py").read_text()
CONFIG = (fleet.SAMPLES / "add_sub/config.pbtxt").read_text()
#: what each release adds to add_sub's OUTPUT0 (the client asks 2 + 1)
RELEASES = {"v1": 0, "v2": 100, "v3": 200, "v4": 300}
A, B = 2.0, 1.0
PULL_TARGET_S = 10.0
NOOP_TARGET_MS = 50.0
STATE = "/var/lib/tritonfleet/models-pull.json"
UNIT = "/etc/systemd/system/tritonfleet-models-pull.service"
AGENT_PYTHON = "/opt/tritonfleet/venv/bin/python"
SEED_WAY = ("per host, one after the other: the host downloads every object of the release's S3 prefix with boto3 "
            "in the agent's Python (aws s3 sync emulated: no aws CLI on the hosts), each file written to a temporary "
            "name and renamed over the one in the directory its container reads (readlink -f models_dir/current), "
            "then `docker restart triton` (returns once the container has started, not when Triton is ready)")


def log(msg: str) -> None:
    print(f"[bench-release {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- pure helpers (tests/unit/test_bench_release.py) --------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=None, help=f"sandbox hosts (default {HOSTS}; --quick: {QUICK_HOSTS})")
    ap.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_HOSTS} hosts, fewer repetitions")
    ap.add_argument("--interval", type=float, default=1.0, help="models_pull_interval: seconds between two pointer "
                                                                "checks (default 1)")
    ap.add_argument("--rate", type=float, default=20.0, help="client inferences a second per host (default 20)")
    ap.add_argument("--checks", type=int, default=None, help="resident no-op checks timed per host (default 20; "
                                                             "--quick: 10)")
    ap.add_argument("--runs", type=int, default=None, help="no-op pyinfra runs and dry runs per host (median; "
                                                           "default 3, --quick: 1)")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds a release may take to reach every host "
                                                                  "(default 300)")
    ap.add_argument("--no-seed", action="store_true", help="skip the seed's way (copy and docker restart)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown (README)")
    ap.add_argument("--json", metavar="FILE", default=str(ROOT / "bench" / "results" / "release.json"),
                    help="write the results here (default bench/results/release.json)")
    args = ap.parse_args(argv)
    if args.hosts is None:
        args.hosts = QUICK_HOSTS if args.quick else HOSTS
    if args.checks is None:
        args.checks = 10 if args.quick else 20
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if not 1 <= args.hosts <= 16:
        ap.error("--hosts: 1 to 16")
    if not 0.2 <= args.interval <= 60:
        ap.error("--interval: 0.2 to 60 seconds (models_pull_interval)")
    if not 0 < args.rate <= 100:
        ap.error("--rate: above 0, at most 100 a second per host")
    if args.checks < 1 or args.runs < 1 or args.deadline <= 0:
        ap.error("--checks, --runs and --deadline must be above 0")
    return args


def release_code(release: str) -> str:
    """add_sub's model.py in ``release``: OUTPUT0 = INPUT0 + INPUT1 + K (K from :data:`RELEASES`)."""
    k = RELEASES[release]
    if "(in0 + in1)" not in ADD_SUB:
        raise ValueError("the sample add_sub no longer computes (in0 + in1)")
    return ADD_SUB if k == 0 else ADD_SUB.replace("(in0 + in1)", f"(in0 + in1 + {k})")


def answer(release: str) -> float:
    """What add_sub answers to 2 + 1 in ``release``."""
    return A + B + RELEASES[release]


def release_of(value: float | None) -> str | None:
    """The release whose answer ``value`` is (None: no release's)."""
    return next((r for r in RELEASES if value is not None and abs(value - answer(r)) < 1e-3), None)


def model_tree(release: str) -> dict[str, str]:
    """The release's model repository: one model, add_sub."""
    return {"add_sub/config.pbtxt": CONFIG, "add_sub/1/model.py": release_code(release)}


def first_serving(events: list[tuple[float, float | None, str | None]], value: float, after: float) -> float | None:
    """The time of the first answer ``value`` at or after ``after`` in one host's ``(time, answer, error)``."""
    return next((t for t, v, _ in events if t >= after and v is not None and abs(v - value) < 1e-3), None)


def flapped(events: list[tuple[float, float | None, str | None]], value: float, since: float | None) -> int:
    """Answers other than ``value`` after a host first answered it (a host that went back)."""
    if since is None:
        return 0
    return sum(1 for t, v, _ in events if t > since and v is not None and abs(v - value) >= 1e-3)


def spread(per_host: dict[str, float | None]) -> str:
    """``first / median / last`` seconds over the hosts (``-`` for none; a host that never served: its name)."""
    values = sorted(v for v in per_host.values() if v is not None)
    missing = sorted(h for h, v in per_host.items() if v is None)
    text = f"{values[0]:.1f} / {statistics.median(values):.1f} / {values[-1]:.1f} s" if values else "-"
    return text + (f" (never: {', '.join(missing)})" if missing else "")


def all_serving(per_host: dict[str, float | None]) -> float | None:
    """Seconds until the last host served (None when one never did)."""
    if not per_host or any(v is None for v in per_host.values()):
        return None
    return max(per_host.values())


def unit_argv(unit: str) -> tuple[dict[str, str], list[str]]:
    """The environment (``/usr/bin/env K=V`` words) and the agent's arguments (after ``tritonfleet-agent``) of a
    unit file's ``ExecStart=`` line. Runs on the hosts too (Python 3.9, standard library)."""
    import shlex as _shlex

    words = None
    for line in unit.splitlines():
        if line.startswith("ExecStart="):
            words = _shlex.split(line[len("ExecStart="):])
            break
    if words is None:
        raise ValueError("no ExecStart= line in the unit")
    env = {}
    for i, word in enumerate(words):
        if word == "tritonfleet-agent" or word.endswith("/tritonfleet-agent"):
            return env, words[i + 1:]
        if "=" in word and not word.startswith("/"):
            key, _, value = word.partition("=")
            env[key] = value
    raise ValueError("no tritonfleet-agent in the unit's ExecStart=")


def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def traffic_text(t: dict) -> str:
    return f"{t['failed']} of {t['sent']}" + (f" ({t['wrong']} wrong)" if t.get("wrong") else "")


def verdicts(results: dict) -> list[tuple[str, bool]]:
    """(text, passed) for each target of the issue."""
    n = len(results["hosts"])
    pull, noop = results["pull"], results["noop"]
    scope = "" if n == HOSTS else f" (target is for {HOSTS} hosts; {n} here)"
    seconds, failed, slowest = pull["seconds"], pull["traffic"]["failed"], noop.get("pull_check_slowest_ms")
    return [(f"pull: release to all {n} hosts serving {fmt_s(seconds)} (target <= {PULL_TARGET_S:g} s){scope}",
             seconds is not None and seconds <= PULL_TARGET_S),
            (f"pull: failed requests during the release {failed} of {pull['traffic']['sent']} (target 0)",
             failed == 0 and pull["traffic"]["wrong"] == 0),
            (f"pull: resident no-op check {fmt_ms(slowest)} (slowest host's median; target <= {NOOP_TARGET_MS:g} ms)",
             slowest is not None and slowest <= NOOP_TARGET_MS)]


def table(results: dict, markdown: bool = False) -> str:
    """One row per way of releasing: time to every host serving, per host, failed requests, no-op cost."""
    n, noop = len(results["hosts"]), results["noop"]
    head = ["way", f"release to all {n} hosts serving", "per host: first / median / last", "failed requests",
            "no-op per host"]
    body = []
    pull = results.get("pull")
    if pull:
        per = f" ({noop['pull_pyinfra_per_host']:.2f} s of a no-op models.py)" if noop.get("pull_pyinfra_per_host") \
            is not None else ""
        body.append([f"pull (agent checks every {results['interval']:g} s)", fmt_s(pull["seconds"]),
                     spread(pull["per_host"]), traffic_text(pull["traffic"]),
                     f"{fmt_ms(noop.get('pull_check_median_ms'))} a check{per}"])
    push = results.get("push")
    if push:
        body.append(["push (pyinfra deploys/models.py)", f"{fmt_s(push['seconds'])} (run: {fmt_s(push['wall'])})",
                     spread(push["per_host"]), traffic_text(push["traffic"]),
                     f"{fmt_ms(noop.get('push_dry_run_median_ms'))} dry run"
                     + (f" ({noop['push_pyinfra_per_host']:.2f} s of a no-op models.py)"
                        if noop.get("push_pyinfra_per_host") is not None else "")])
    seed = results.get("seed")
    if seed:
        body.append(["seed's way (copy + docker restart, host after host)", fmt_s(seed["seconds"]),
                     spread(seed["per_host"]), traffic_text(seed["traffic"]), "-"])
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
                         + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in [head, *body])


def report(results: dict, markdown: bool = False) -> str:
    lines = [table(results, markdown), ""]
    bullet = "- " if markdown else ""
    noop = results["noop"]
    if noop.get("pull_check_ms"):
        lines.append(bullet + "resident check (median ms per host, 1 conditional GET answered 304 each): " + ", ".join(
            f"{h} {v['median_ms']:.1f}" for h, v in noop["pull_check_ms"].items()))
    if noop.get("pull_cpu_ms_per_check"):
        lines.append(bullet + "the pull service's CPU per check (from /proc over a window): " + ", ".join(
            f"{h} {v:.1f} ms" for h, v in noop["pull_cpu_ms_per_check"].items()))
    if noop.get("push_dry_run_ms"):
        lines.append(bullet + "push: the agent's sync --dry-run per host (median ms): " + ", ".join(
            f"{h} {statistics.median(v):.0f}" for h, v in noop["push_dry_run_ms"].items()))
    for mode in ("pull", "push"):
        walls = noop.get(f"{mode}_pyinfra_walls")
        if walls:
            changed = [t.get("changed", 0) for t in noop.get(f"{mode}_pyinfra_totals", [])]
            lines.append(bullet + f"{mode}: no-op pyinfra deploys/models.py on {len(results['hosts'])} hosts: "
                         + ", ".join(f"{w:.2f}" for w in walls) + " s"
                         + (f" (NOT no-ops: {changed} operations changed)" if any(changed) else ""))
    push_changed = (results.get("push") or {}).get("totals", {}).get("changed")
    if push_changed is not None and push_changed > len(results["hosts"]):
        lines.append(bullet + f"push: the timed run changed {push_changed} operations (one sync per host expected: "
                     "the agent was reinstalled or its service changed in it)")
    if results.get("seed"):
        lines.append(bullet + f"seed's way, emulated: {results['seed']['emulated']}")
    lines.append("")
    lines += [("PASS " if ok else "FAIL ") + text for text, ok in verdicts(results)]
    return "\n".join(lines)


# --- S3, inventories, pyinfra -------------------------------------------------------------------------------

def s3_client():
    import boto3

    return boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                        aws_access_key_id="sandbox", aws_secret_access_key="sandbox")


def put_tree(s3, prefix: str, tree: dict[str, str]) -> None:
    """Make ``prefix`` (ending in /) hold exactly ``tree``."""
    have = [o["Key"] for o in s3.list_objects_v2(Bucket=fleet.S3_BUCKET, Prefix=prefix).get("Contents", [])]
    for path, text in tree.items():
        s3.put_object(Bucket=fleet.S3_BUCKET, Key=prefix + path, Body=text.encode())
    for key in set(have) - {prefix + p for p in tree}:
        s3.delete_object(Bucket=fleet.S3_BUCKET, Key=key)


def write_inventory(tmp: Path, name: str, hosts: list[str], extra: dict) -> Path:
    from tritonfleet.sandbox.inventory import sandbox_hosts

    data = [(h, {**d, **extra}) for h, d in sandbox_hosts(hosts)]
    inv = tmp / f"{name}.py"
    inv.write_text("triton = " + pprint.pformat(data) + "\n")
    inv.chmod(0o600)  # the sandbox data holds the repository secret
    return inv


def pyinfra(inv: Path, deploy: str, what: str, timeout: float = 1200) -> dict:
    """One pyinfra run; its wall, exit code and totals. A failed run ends the bench."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    start = time.monotonic()
    proc = subprocess.run([PYINFRA, "-y", str(inv), deploy], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    wall = time.monotonic() - start
    output = proc.stdout + proc.stderr
    if proc.returncode:
        raise SystemExit(f"{what}: {deploy} on {inv.name} failed (exit {proc.returncode}):\n{output[-4000:]}")
    m = list(re.finditer(r"Grand total\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)", output))
    totals = dict(zip(("operations", "changed", "errors", "no_change"),
                      (0 if v == "-" else int(v) for v in m[-1].groups()), strict=True)) if m else {}
    return {"wall": wall, "rc": proc.returncode, "totals": totals}


def ssh(host: str, command: str, timeout: float = 300, input: str | None = None) -> str:
    return fleet.ssh(fleet.get_host(host), command, timeout=timeout, input=input).stdout


# --- the client ---------------------------------------------------------------------------------------------

class Probe:
    """One client thread per host: an add_sub inference (HTTP) every ``1 / rate`` s, each answer or failure kept
    with the time it came; at most ``max_seconds`` and ``rate * max_seconds`` requests per host."""

    def __init__(self, hosts: dict[str, str], rate: float, max_seconds: float, timeout: float = 5.0) -> None:
        self.hosts, self.interval, self.max_seconds, self.timeout = hosts, 1.0 / rate, max_seconds, timeout
        self.max_requests = int(rate * max_seconds) + 1
        self.events: dict[str, list[tuple[float, float | None, str | None]]] = {h: [] for h in hosts}
        self.started = self.stopped = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(h, ip), daemon=True) for h, ip in hosts.items()]

    def _client(self, ip: str):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(f"{ip}:8000", connection_timeout=self.timeout,
                                                network_timeout=self.timeout)

    @staticmethod
    def _infer(client) -> float:
        import numpy as np
        import tritonclient.http as httpclient

        a, b = np.full((1, 4), A, np.float32), np.full((1, 4), B, np.float32)
        inputs = [httpclient.InferInput("INPUT0", a.shape, "FP32"), httpclient.InferInput("INPUT1", b.shape, "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        return float(client.infer("add_sub", inputs).as_numpy("OUTPUT0")[0][0])

    def _run(self, host: str, ip: str) -> None:
        events = self.events[host]
        client = self._client(ip)
        next_at = time.monotonic()
        for _ in range(self.max_requests):
            if self._stop.is_set() or time.monotonic() - self.started > self.max_seconds:
                break
            try:
                value, error = self._infer(client), None
            except Exception as exc:  # noqa: BLE001 - every failure is counted, the first few kept
                value, error = None, f"{host}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:200]
                try:
                    client = self._client(ip)  # a fresh connection, as a client's retry would
                except Exception:  # noqa: BLE001 - the next request fails and is counted
                    pass
            events.append((time.monotonic(), value, error))
            next_at = max(next_at + self.interval, time.monotonic() - self.interval)
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> Probe:
        self.started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)
        self.stopped = time.monotonic()

    def wait_serving(self, release: str, t0: float, deadline: float) -> dict[str, float | None]:
        """Seconds from ``t0`` until each host first answered with ``release`` (None: not within ``deadline``)."""
        value = answer(release)
        end = t0 + deadline
        while True:
            seen = {h: first_serving(list(ev), value, t0) for h, ev in self.events.items()}
            if all(t is not None for t in seen.values()) or time.monotonic() > end:
                return {h: None if t is None else round(t - t0, 3) for h, t in seen.items()}
            time.sleep(0.05)

    def summary(self, release: str, t0: float, per_host: dict[str, float | None], known: tuple[str, ...]) -> dict:
        """Requests sent, failed (no answer), wrong (an answer of no release in ``known``), and hosts that went
        back to another release after they first served ``release``."""
        out = {"sent": 0, "ok": 0, "failed": 0, "wrong": 0, "flapped": 0, "errors": [], "per_host": {},
               "seconds": round((self.stopped or time.monotonic()) - self.started, 1)}
        answers = {answer(r) for r in known}
        for h, ev in self.events.items():
            ev = list(ev)
            failed = [e for _, v, e in ev if v is None]
            wrong = [v for _, v, _ in ev if v is not None and not any(abs(v - a) < 1e-3 for a in answers)]
            since = None if per_host.get(h) is None else t0 + per_host[h]
            back = flapped(ev, answer(release), since)
            out["per_host"][h] = {"sent": len(ev), "failed": len(failed), "wrong": len(wrong), "flapped": back}
            out["sent"] += len(ev)
            out["failed"] += len(failed)
            out["wrong"] += len(wrong)
            out["flapped"] += back
            out["ok"] += len(ev) - len(failed) - len(wrong)
            out["errors"] += [e for e in failed[:3] if e]
        out["errors"] = out["errors"][:10]
        return out


def expect_serving(ips: dict[str, str], release: str, deadline: float = 120) -> None:
    """Every host answers with ``release`` (bounded); the bench stops otherwise."""
    with Probe(ips, rate=5, max_seconds=deadline + 5) as probe:
        t0 = probe.started
        seen = probe.wait_serving(release, t0, deadline)
    missing = [h for h, t in seen.items() if t is None]
    if missing:
        last = {h: probe.events[h][-1:] for h in missing}
        raise SystemExit(f"{', '.join(missing)} not serving {release} within {deadline:g}s (last: {last})")


# --- the host side ------------------------------------------------------------------------------------------

NOOP_CHECKS = r'''
import json, os, shutil, statistics, sys, tempfile, time
from tritonfleet.agent.cli import build_parser, sync_setup
from tritonfleet.agent.pull import State, Watcher

UNIT_ARGV

n, pause = int(sys.argv[1]), float(sys.argv[2])
env, argv = unit_argv(open(sys.argv[3]).read())
os.environ.update(env)
args = build_parser().parse_args(argv)
setup = sync_setup(args, args.parser)
if isinstance(setup, int):
    sys.exit("the service's options do not set up: exit %d" % setup)
opts, live = setup
state = State.load(args.state)  # what the service serves (read only: this watcher writes its own files)
work = tempfile.mkdtemp(prefix="bench-release-")
try:
    w = Watcher(opts, group=args.group, live=live, state_path=os.path.join(work, "state.json"), textfile_dir=work,
                interval=args.interval, max_backoff=args.max_backoff, state=state)
    w.synced_once = True  # as the service's passes after its first (which synced): check, nothing to do
    first = w.check()
    times, actions, requests, changed = [], set(), set(), False
    for _ in range(n):
        time.sleep(pause)
        t = time.perf_counter()
        c = w.check()
        times.append((time.perf_counter() - t) * 1000)
        actions.add(c.action)
        requests.add(c.requests)
        changed = changed or c.changed
    print(json.dumps({"first_ms": first.seconds * 1000, "first_action": first.action, "first_error": first.error,
                      "median_ms": statistics.median(times), "max_ms": max(times), "min_ms": min(times),
                      "times_ms": [round(x, 2) for x in times], "actions": sorted(actions),
                      "requests": sorted(requests), "changed": changed, "release": state.release}))
finally:
    shutil.rmtree(work, ignore_errors=True)
'''

SEED_COPY = r'''
import os, sys
import boto3

endpoint, region, bucket, prefix, dest = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region, aws_access_key_id="sandbox",
                  aws_secret_access_key="sandbox")
n = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    for obj in page.get("Contents", []):
        path = os.path.join(dest, obj["Key"][len(prefix):])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        s3.download_file(bucket, obj["Key"], path + ".seed-copy")
        os.replace(path + ".seed-copy", path)
        n += 1
print(n)
'''

CPU_WINDOW = r'''
pid=$(systemctl show -p MainPID --value tritonfleet-models-pull)
t() { awk '{print $14 + $15}' /proc/$pid/stat; }
a=$(t); sleep {window}; b=$(t)
echo "$pid $a $b $(getconf CLK_TCK)"
'''


def pull_state(host: str) -> dict:
    out = ssh(host, f"systemctl show -p MainPID --value tritonfleet-models-pull; cat {STATE} 2>/dev/null || true")
    pid, _, body = out.partition("\n")
    try:
        state = json.loads(body) if body.strip() else {}
    except ValueError:
        state = {}
    return {"main_pid": int(pid.strip() or 0), **state}


def wait_agents(hosts: list[str], release: str, deadline: float = 120) -> None:
    """Each host's pull service has finished its first pass (its own pid in the state) serving ``release``."""
    end = time.monotonic() + deadline
    while True:
        states = {h: pull_state(h) for h in hosts}
        if all(s.get("pid") == s["main_pid"] != 0 and s.get("release") == release == s.get("pointed")
               and s.get("failures") == 0 for s in states.values()):
            return
        if time.monotonic() > end:
            raise SystemExit(f"the pull services are not steady on {release} after {deadline:g}s: {states}")
        time.sleep(0.5)


def resident_checks(hosts: list[str], n: int) -> dict[str, dict]:
    """Per host, the resident agent's no-op check timed on the host (one after the other)."""
    script = NOOP_CHECKS.replace("UNIT_ARGV", inspect.getsource(unit_argv))
    out = {}
    for h in hosts:
        text = ssh(h, f"{AGENT_PYTHON} - {n} 0.25 {UNIT}", input=script, timeout=300)
        out[h] = json.loads(text.strip().splitlines()[-1])
        if out[h]["actions"] != ["none"] or out[h]["requests"] != [1] or out[h]["changed"]:
            log(f"{h}: a resident check did more than one unchanged GET: {out[h]}")
    return out


def service_cpu(hosts: list[str], window: float, interval: float) -> dict[str, float]:
    """The pull service's CPU milliseconds per check, over ``window`` seconds (all hosts at once)."""
    def one(h: str) -> float:
        pid, a, b, tck = ssh(h, CPU_WINDOW.replace("{window}", f"{window:g}"), timeout=window + 60).split()
        return (int(b) - int(a)) * 1000 / int(tck) / (window / interval)

    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        return dict(zip(hosts, pool.map(one, hosts), strict=True))


def dry_runs(hosts: list[str], push_data: dict, runs: int) -> dict[str, list[float]]:
    """Per host, the wall (ms, on the host) of the agent's sync --dry-run --json as the models role runs it."""
    from roles import all_roles
    from roles.models import sync_command
    from tritonfleet.config import load_host_config
    from tritonfleet.sandbox.inventory import sandbox_hosts

    out = {}
    for h, data in sandbox_hosts(hosts):
        cfg = load_host_config(h, {**data, **push_data}, all_roles())
        line = shlex.join(sync_command(cfg)) + " --dry-run --json --lock-wait 0"
        script = (f"for i in $(seq {runs}); do s=$(date +%s%N); {line} >/tmp/bench-release-dry.json 2>&1 || "
                  "{ cat /tmp/bench-release-dry.json >&2; exit 1; }; e=$(date +%s%N); echo $(( (e - s) / 1000 )); "
                  "done; tail -n 1 /tmp/bench-release-dry.json; rm -f /tmp/bench-release-dry.json")
        lines = ssh(h, script, timeout=120 + 60 * runs).strip().splitlines()
        plan = json.loads(lines[-1])
        if plan.get("status") != "dry-run" or any(plan.get("files", {}).values()):
            log(f"{h}: the push dry run is not a no-op: {json.dumps(plan)[:500]}")
        out[h] = [int(x) / 1000 for x in lines[:runs]]
    return out


def seed_way(hosts: list[str], prefix: str) -> float:
    """The seed's release, host after host (:data:`SEED_WAY`); the loop's wall."""
    start = time.monotonic()
    for h in hosts:
        ssh(h, f"{AGENT_PYTHON} - {shlex.quote(fleet.s3_endpoint())} {fleet.S3_REGION} {fleet.S3_BUCKET} "
               f"{shlex.quote(prefix)} \"$(readlink -f /opt/tritonfleet/models/current)\" && docker restart triton "
               ">/dev/null", input=SEED_COPY, timeout=300)
    return time.monotonic() - start


def noop_runs(noop: dict, mode: str, inv: Path, runs: int, hosts: int) -> None:
    """``runs`` no-op ``deploys/models.py`` runs after one unmeasured (its fact plan written, the agent's
    wheelhouse current): their walls and totals, the median per host."""
    pyinfra(inv, "deploys/models.py", f"the run before the no-op runs ({mode})")
    done = [pyinfra(inv, "deploys/models.py", f"a no-op run ({mode})") for _ in range(runs)]
    noop[f"{mode}_pyinfra_walls"] = [r["wall"] for r in done]
    noop[f"{mode}_pyinfra_totals"] = [r["totals"] for r in done]
    noop[f"{mode}_pyinfra_per_host"] = statistics.median(noop[f"{mode}_pyinfra_walls"]) / hosts
    changed = [r["totals"].get("changed") for r in done if r["totals"].get("changed")]
    if changed:
        log(f"{mode}: a no-op deploys/models.py changed something: {noop[f'{mode}_pyinfra_totals']}")


# --- the run ------------------------------------------------------------------------------------------------

def measured_release(ips: dict[str, str], rate: float, deadline: float, release: str, known: tuple[str, ...],
                     act) -> dict:
    """Clients on every host; ``act()`` releases; seconds until every host answers with ``release``."""
    with Probe(ips, rate=rate, max_seconds=deadline + 60) as probe:
        time.sleep(1.0)  # a second of requests before
        t0 = time.monotonic()
        extra = act() or {}
        per_host = probe.wait_serving(release, t0, deadline)
        time.sleep(2.0)  # and two after the last host switched
    out = {"seconds": all_serving(per_host), "per_host": per_host, **extra,
           "traffic": probe.summary(release, t0, per_host, known)}
    log(f"{release}: {json.dumps({k: v for k, v in out.items() if k != 'traffic'})}; traffic "
        f"{json.dumps({k: out['traffic'][k] for k in ('sent', 'failed', 'wrong', 'flapped', 'errors')})[:1500]}")
    return out


def run(args: argparse.Namespace, tmp: Path) -> dict:
    from tritonfleet.fleet import release as rel

    names = [f"bench-{i}" for i in range(1, args.hosts + 1)]
    others = [r["name"] for r in fleet.status() if r["name"] not in names]
    log(f"sandbox: {', '.join(names)} (inf2.xlarge)" + (f"; fleet.up removes the other hosts: {', '.join(others)}"
                                                        if others else ""))
    fleet.up([fleet.HostSpec("inf2.xlarge", name=h) for h in names])
    ips = {h: fleet.get_host(h).ip for h in names}
    s3 = s3_client()
    prefix = f"bench-release-{uuid.uuid4().hex[:8]}"
    root = f"s3://{fleet.S3_BUCKET}/{prefix}"
    push_prefix = f"{prefix}-push/"
    for r in RELEASES:
        put_tree(s3, f"{prefix}/{r}/", model_tree(r))
    results: dict = {"hosts": names, "interval": args.interval, "rate": args.rate, "root": root,
                     "machine_cpus": os.cpu_count(), "noop": {}}
    noop = results["noop"]
    pull_data = {"models_s3_uri": root, "models_pull": True, "models_pull_interval": args.interval}
    push_data = {"models_s3_uri": f"s3://{fleet.S3_BUCKET}/{push_prefix.rstrip('/')}", "models_pull": False}
    pull_inv = write_inventory(tmp, "pull", names, pull_data)
    push_inv = write_inventory(tmp, "push", names, push_data)

    # 1. pull mode
    rel.release(s3, root, "v1")
    log("pull mode: deploys/serve.py, release v1")
    results["deploy"] = pyinfra(pull_inv, "deploys/serve.py", "the pull-mode deploy")
    expect_serving(ips, "v1")
    wait_agents(names, "v1")
    log(f"1. pull: release v2 (pointer), clients at {args.rate:g}/s per host")

    def pull_release() -> dict:
        start = time.monotonic()
        rel.release(s3, root, "v2")
        return {"pointer_written": round(time.monotonic() - start, 3)}

    results["pull"] = measured_release(ips, args.rate, args.deadline, "v2", ("v1", "v2"), pull_release)
    results["pull"]["states"] = {h: {k: s.get(k) for k in ("release", "pointed", "failures", "last_error")}
                                 for h, s in ((h, pull_state(h)) for h in names)}

    # 4a. no-op, pull mode
    wait_agents(names, "v2", deadline=60)
    log(f"no-op: {args.checks} resident checks per host; the service's CPU per check; no-op models.py (pull)")
    checks = resident_checks(names, args.checks)
    noop["pull_check_ms"] = checks
    noop["pull_check_median_ms"] = statistics.median(x for c in checks.values() for x in c["times_ms"])
    noop["pull_check_slowest_ms"] = max(c["median_ms"] for c in checks.values())
    noop["pull_cpu_ms_per_check"] = service_cpu(names, 5.0 if args.quick else 10.0, args.interval)
    noop_runs(noop, "pull", pull_inv, args.runs, len(names))

    # 2. push mode: the same hosts on one prefix (v2's files first: the switch of modes changes no answer)
    put_tree(s3, push_prefix, model_tree("v2"))
    log("push mode: deploys/models.py with models_pull off, the prefix holding v2")
    results["push_setup"] = pyinfra(push_inv, "deploys/models.py", "the switch to push mode")
    expect_serving(ips, "v2")
    # a second run right before the timed one: a change to the agent's sources since the first (others edit the
    # checkout) rebuilds the wheelhouse and reinstalls the agent here, not in the timed run
    results["push_warmup"] = pyinfra(push_inv, "deploys/models.py", "the run before the push release")
    put_tree(s3, push_prefix, model_tree("v3"))
    log("2. push: v3's files into the prefix, deploys/models.py")

    def push_release() -> dict:
        r = pyinfra(push_inv, "deploys/models.py", "the push release")
        return {"wall": round(r["wall"], 3), "totals": r["totals"]}

    results["push"] = measured_release(ips, args.rate, args.deadline, "v3", ("v2", "v3"), push_release)

    # 4b. no-op, push mode
    log("no-op: the agent's sync --dry-run per host; no-op models.py (push)")
    dry = dry_runs(names, push_data, args.runs)
    noop["push_dry_run_ms"] = dry
    noop["push_dry_run_median_ms"] = statistics.median(statistics.median(v) for v in dry.values())
    noop_runs(noop, "push", push_inv, args.runs, len(names))

    # 3. the seed's way
    if not args.no_seed:
        log("3. the seed's way: copy v4 into each host's repository, docker restart triton, host after host")
        results["seed"] = measured_release(ips, args.rate, args.deadline, "v4", ("v3", "v4"),
                                           lambda: {"loop_wall": round(seed_way(names, f"{prefix}/v4/"), 3)})
        results["seed"]["emulated"] = SEED_WAY
        log("putting the hosts back in order: v4 into the push prefix, deploys/models.py")
        put_tree(s3, push_prefix, model_tree("v4"))
        results["restore"] = pyinfra(push_inv, "deploys/models.py", "the repair after the seed's way")
    for p in (f"{prefix}/", push_prefix):  # the bench's objects (the hosts keep what they downloaded)
        put_tree(s3, p, {})
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench-release needs root (the sandbox fleet)")
    with tempfile.TemporaryDirectory(prefix="bench-release-") as d:
        results = run(args, Path(d))
    results["verdicts"] = [{"text": t, "passed": ok} for t, ok in verdicts(results)]
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nmodel releases on {len(results['hosts'])} sandbox inf2.xlarge hosts ({results['machine_cpus']} CPUs "
          f"shared by the controller, the hosts and the clients); clients {args.rate:g} inferences/s per host\n")
    print(report(results, args.markdown))
    log(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
