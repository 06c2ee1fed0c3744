"""Converge cost of deploys/serve.py (issue "Converge cost"): wall time, remote commands and uploads per
host for a first run and a no-op run on the sandbox fleet at 1, 3 and 8 hosts, and the --dry run over
200 and 1000 @fake hosts (wall time, peak memory). Commands are counted on the connection (pyinfra's
--debug log of every command it sends).

Then, on the same hosts in the same run, the same state the Ansible way (``bench/ansible/serve.yml``, its
values computed by tritonfleet: ``bench/ansible/inventory.py``): one converge run right after pyinfra's
(it must change nothing of tritonfleet's state), then no-op runs with Ansible's defaults
(``bench/ansible/ansible.cfg``) and tuned the way an expert runs it (``bench/ansible/ansible-tuned.cfg``:
pipelining, ControlPersist, forks >= hosts, facts cached, strategy free, no interpreter discovery), the
tuned ones after one warm-up run (the converge run warms the defaults). Ratios are tritonfleet's no-op wall over Ansible's. Finally (``--cold-check``, on by
default) one host is reset, converged by Ansible alone, and a pyinfra run on it must change nothing: the
two describe the same state in both directions.

Every no-op also records where its time goes: the controller's CPU (the tool and its children), the hosts'
CPU (their cgroups, idle background subtracted) and how busy the whole 2-core machine was (other users'
load included: the sandbox hosts share the controller's CPUs).

    make bench-converge                          # needs root (the sandbox); prints the tables and ratios
    python bench/converge.py --markdown          # the README table
    python bench/converge.py --sizes 1,8 --no-dry --runs 3

Ansible (ansible-core with its collections, community.docker among them) goes into its own venv,
.cache/bench-ansible/ (made on first use, then reused), away from the project's dependencies.

Targets (issue): no-op <= 20 commands per host, first run <= 60; 8-host no-op wall <= 1.3x the 1-host
one; --dry over 1000 hosts <= 60 s and <= 1 GiB; tritonfleet's no-op <= 0.12x tuned Ansible's.
"""

from __future__ import annotations

import argparse
import os
import pprint
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ansible import inventory as ansible_inventory  # noqa: E402
from tests.fake.fakehost import healthy  # noqa: E402
from tritonfleet.sandbox import fleet  # noqa: E402
from tritonfleet.sandbox.inventory import sandbox_hosts  # noqa: E402

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
SIZES = (1, 3, 8)
NOOP_RUNS = 3
ANSIBLE_VENV = ROOT / ".cache" / "bench-ansible"
ANSIBLE_DIR = ROOT / "bench" / "ansible"
ANSIBLE_REQUIREMENT = "ansible>=12,<13"  # ansible-core 2.19 with community.docker 4 and ansible.posix
CONFIGS = {"defaults": ANSIBLE_DIR / "ansible.cfg", "tuned": ANSIBLE_DIR / "ansible-tuned.cfg"}
NCPU = os.cpu_count() or 1


class BenchError(SystemExit):
    """A run failed or did not converge (exit with its message)."""


# --- measuring one run -----------------------------------------------------------------------------------

@dataclass
class Sample:
    wall: float
    output: str
    returncode: int
    controller_cpu: float = 0.0  # user+sys of the tool and the children it waited for
    hosts_cpu: float = 0.0  # the hosts' cgroups, idle background subtracted
    busy: float = 0.0  # share of the machine's CPUs busy during the run (everything on the machine)
    extra: dict = field(default_factory=dict)


def _proc_stat() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return sum(parts) - idle, sum(parts)


def _host_cgroups(names: list[str]) -> list[Path]:
    """One CPU-accounting cgroup per host: v1 cpuacct where mounted (its counter includes the Docker
    containers the host runs, nested below it), else v2."""
    found: dict[str, Path] = {}
    cgroups = [cg for cg in fleet.find_cgroups() if cg.name in names]
    for cg in sorted(cgroups, key=lambda c: not (c / "cpuacct.usage").is_file()):
        if cg.name not in found and ((cg / "cpuacct.usage").is_file() or (cg / "cpu.stat").is_file()):
            found[cg.name] = cg
    return list(found.values())


def hosts_cpu_seconds(cgroups: list[Path]) -> float:
    total = 0.0
    for cg in cgroups:
        if (cg / "cpuacct.usage").is_file():
            total += int((cg / "cpuacct.usage").read_text()) / 1e9
        else:
            stat = dict(line.split() for line in (cg / "cpu.stat").read_text().splitlines())
            total += int(stat["usage_usec"]) / 1e6
    return total


def background_rate(names: list[str], seconds: float = 3.0) -> float:
    """CPU seconds per second the hosts use when nothing runs against them (Triton, dockerd, systemd)."""
    cgroups = _host_cgroups(names)
    before = hosts_cpu_seconds(cgroups)
    time.sleep(seconds)
    return (hosts_cpu_seconds(cgroups) - before) / seconds


def measured(cmd: list[str], env: dict, names: list[str], background: float = 0.0, timeout: float = 1800) -> Sample:
    cgroups = _host_cgroups(names)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    h0, (b0, t0) = hosts_cpu_seconds(cgroups), _proc_stat()
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - start
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    h1, (b1, t1) = hosts_cpu_seconds(cgroups), _proc_stat()
    return Sample(wall=wall, output=proc.stdout + proc.stderr, returncode=proc.returncode,
                  controller_cpu=(ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
                  hosts_cpu=max(0.0, (h1 - h0) - background * wall),
                  busy=(b1 - b0) / (t1 - t0) if t1 > t0 else 0.0)


def median_sample(samples: list[Sample]) -> Sample:
    """The sample with the median wall (its CPU figures belong to the same run)."""
    ranked = sorted(samples, key=lambda s: s.wall)
    return ranked[len(ranked) // 2]


# --- pyinfra ---------------------------------------------------------------------------------------------

_TOTAL = re.compile(r"Grand total\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)")


def pyinfra(*args: str, names: list[str] = (), background: float = 0.0) -> Sample:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    return measured([PYINFRA, "-y", *args], env, list(names), background)


def pyinfra_totals(output: str) -> dict[str, int]:
    matches = list(_TOTAL.finditer(output))
    if not matches:
        return {}
    vals = [0 if v == "-" else int(v) for v in matches[-1].groups()]
    return dict(zip(("operations", "changed", "errors", "no_change"), vals, strict=True))


def sent(output: str, hosts: list[str]) -> tuple[float, float]:
    commands = [len(re.findall(rf"Running command on {re.escape(h)}:", output)) for h in hosts]
    uploads = len(re.findall(r"Attempting upload of ", output))
    return statistics.mean(commands), uploads / len(hosts)


def write_inventory(path: Path, hosts: list[tuple[str, dict]]) -> Path:
    path.write_text("hosts = " + pprint.pformat(hosts) + "\n")
    path.chmod(0o600)  # the sandbox data holds the repository secret
    return path


def check_pyinfra(s: Sample, what: str, noop: bool = False) -> None:
    totals = pyinfra_totals(s.output)
    if s.returncode or not totals or totals["errors"] or (noop and (totals["changed"] or not totals["operations"])):
        raise BenchError(f"{what} failed or changed something ({totals}):\n{s.output[-3000:]}")


# --- Ansible ---------------------------------------------------------------------------------------------

def ansible_playbook() -> Path:
    """ansible-playbook from .cache/bench-ansible (installed on first use)."""
    exe = ANSIBLE_VENV / "bin" / "ansible-playbook"
    docker = list(ANSIBLE_VENV.glob("lib/python*/site-packages/ansible_collections/community/docker"))
    if not exe.exists() or not docker:
        print(f"installing {ANSIBLE_REQUIREMENT} into {ANSIBLE_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True, timeout=300)
        subprocess.run([str(ANSIBLE_VENV / "bin" / "python"), "-m", "pip", "install", "-q", ANSIBLE_REQUIREMENT],
                       check=True, timeout=1800)
    if not exe.exists():
        raise BenchError(f"no ansible-playbook in {ANSIBLE_VENV} after pip install")
    return exe


def ansible_env(config: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({"ANSIBLE_CONFIG": str(CONFIGS[config]), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                "PYTHONUNBUFFERED": "1"})
    # ControlMaster sockets of each config in their own directory (not ~/.ansible/cp), so the bench can close
    # them when it resets hosts; the defaults keep Ansible's ssh_args (ControlPersist=60s)
    env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(ANSIBLE_VENV / f"cp-{config}")
    if config == "tuned":
        env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(ANSIBLE_VENV / "facts")
    return env


def ansible(inv: Path, config: str, names: list[str], background: float = 0.0, *extra: str) -> Sample:
    cmd = [str(ansible_playbook()), "-i", str(inv), str(ANSIBLE_DIR / "serve.yml"), *extra]
    s = measured(cmd, ansible_env(config), names, background)
    s.extra = {"recap": ansible_recap(s.output), "changed_tasks": ansible_changed_tasks(s.output)}
    return s


_RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def ansible_recap(output: str) -> dict[str, dict[str, int]]:
    """``{host: {ok, changed, unreachable, failed}}`` from the PLAY RECAP."""
    tail = output[output.rfind("PLAY RECAP"):] if "PLAY RECAP" in output else ""
    return {m[0]: dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m[1:]), strict=True))
            for m in _RECAP.findall(tail)}


def ansible_changed_tasks(output: str) -> list[str]:
    """Names of the tasks that reported ``changed`` (strategy free interleaves; names are best effort)."""
    task, out = "", []
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[6:line.rfind("]")]
        elif line.startswith("changed: [") and task not in out:
            out.append(task)
    return out


def check_ansible(s: Sample, names: list[str], what: str, noop: bool = True) -> None:
    recap = s.extra["recap"]
    bad = [h for h in names if h not in recap or recap[h]["failed"] or recap[h]["unreachable"]
           or (noop and recap[h]["changed"])]
    if s.returncode or bad:
        raise BenchError(f"Ansible {what} failed or changed something on {', '.join(bad) or '?'} "
                         f"(changed tasks: {s.extra['changed_tasks']}):\n{s.output[-3000:]}")


def ssh_execs(output: str, ips: dict[str, str]) -> tuple[float, float]:
    """(SSH executions, file transfers) per host in an ``-vvv`` log (``SSH: EXEC ssh|sftp|scp``, ``PUT``)."""
    execs = [len(re.findall(rf"^<{re.escape(ip)}> SSH: EXEC ", output, re.M)) for ip in ips.values()]
    puts = [len(re.findall(rf"^<{re.escape(ip)}> PUT ", output, re.M)) for ip in ips.values()]
    return statistics.mean(execs), statistics.mean(puts)


def reset_control_masters() -> None:
    """Close the bench's ControlMaster connections and drop the fact cache (hosts were reset: a master to a
    host that is gone would hang until its keepalives give up)."""
    for config in CONFIGS:
        for sock in (ANSIBLE_VENV / f"cp-{config}").glob("*"):
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, timeout=10)
    shutil.rmtree(ANSIBLE_VENV / "facts", ignore_errors=True)
    for d in ("facts", *(f"cp-{config}" for config in CONFIGS)):
        (ANSIBLE_VENV / d).mkdir(parents=True, exist_ok=True)


def ansible_rows(tmp: Path, names: list[str], background: float, count_execs: bool, runs: int) -> dict:
    """Ansible on ``names`` right after tritonfleet converged them: converge, then no-ops per config."""
    inv = ansible_inventory.write(tmp / f"ansible{len(names)}.json", sandbox_hosts(names))
    ips = {h.name: h.ip for h in (fleet.get_host(n) for n in names)}
    reset_control_masters()
    row: dict = {}
    conv = ansible(inv, "defaults", names, background)
    check_ansible(conv, names, "converge after tritonfleet", noop=False)
    row["converge_wall"], row["converge_changed"] = conv.wall, conv.extra["changed_tasks"]
    for config in CONFIGS:
        if config == "tuned":  # the converge run warmed the defaults; this one fills the fact cache and masters
            warm = ansible(inv, config, names, background)
            check_ansible(warm, names, f"warm-up ({config})")
        samples = []
        for _ in range(runs):
            s = ansible(inv, config, names, background)
            check_ansible(s, names, f"no-op ({config})")
            samples.append(s)
        row[config] = median_sample(samples)
        row[f"{config}_walls"] = [s.wall for s in samples]
        if count_execs:
            v = ansible(inv, config, names, background, "-vvv")
            check_ansible(v, names, f"-vvv no-op ({config})")
            row[f"{config}_execs"], row[f"{config}_puts"] = ssh_execs(v.output, ips)
    return row


# --- the sandbox rows ------------------------------------------------------------------------------------

def prebuild(names: list[str], tmp: Path) -> Path:
    """The Ansible inventory, which also builds the agent's wheelhouse on the controller before pyinfra runs:
    pyinfra loads every host's deploy in its own greenlet, and hosts building the same new wheelhouse at once
    deadlock on its flock (tritonfleet/wheelhouse.py takes it per open file, in one process)."""
    return ansible_inventory.write(tmp / "prebuild.json", sandbox_hosts(names))


def sandbox_rows(tmp: Path, sizes: tuple[int, ...], runs: int, with_ansible: bool,
                 cold_check: bool) -> tuple[list[dict], dict]:
    specs = [fleet.HostSpec("inf2.xlarge", name=f"bench-{i}") for i in range(1, max(sizes) + 1)]
    fleet.up(specs)
    if with_ansible:
        ansible_playbook()
    rows = []
    for n in sizes:
        names = [s.name for s in specs[:n]]
        for name in names:
            fleet.reset_host(name)
        inv = write_inventory(tmp / f"inv{n}.py", sandbox_hosts(names))
        prebuild(names, tmp)
        first = pyinfra(str(inv), "--debug", "deploys/serve.py", names=names)
        check_pyinfra(first, f"first run on {n} hosts")
        first_cmds, first_up = sent(first.output, names)
        background = background_rate(names)
        samples, cmds = [], []
        for _ in range(runs):
            prebuild(names, tmp)
            s = pyinfra(str(inv), "--debug", "deploys/serve.py", names=names, background=background)
            check_pyinfra(s, f"no-op run on {n} hosts", noop=True)
            samples.append(s)
            cmds.append(sent(s.output, names)[0])
        row = {"hosts": n, "first_wall": first.wall, "first_cmds": first_cmds, "first_uploads": first_up,
               "noop": median_sample(samples), "noop_walls": [s.wall for s in samples],
               "noop_wall": statistics.median(s.wall for s in samples), "noop_cmds": statistics.median(cmds),
               "background": background}
        if with_ansible:
            row["ansible"] = ansible_rows(tmp, names, background, count_execs=(n == sizes[0]), runs=runs)
        rows.append(row)
        print(f"  {n} host(s) done: tritonfleet no-op {row['noop_wall']:.2f} s"
              + (f", Ansible defaults {row['ansible']['defaults'].wall:.2f} s, tuned {row['ansible']['tuned'].wall:.2f} s"
                 if with_ansible else ""), file=sys.stderr, flush=True)
    cold = cold_rows(tmp, specs[0].name) if with_ansible and cold_check else {}
    return rows, cold


def cold_rows(tmp: Path, name: str) -> dict:
    """A fresh host converged by Ansible (tuned) alone; then tritonfleet must find nothing to change."""
    fleet.reset_host(name)
    reset_control_masters()
    inv = ansible_inventory.write(tmp / "ansible-cold.json", sandbox_hosts([name]))
    first = ansible(inv, "tuned", [name])
    check_ansible(first, [name], "first run on a fresh host", noop=False)
    again = ansible(inv, "tuned", [name])
    check_ansible(again, [name], "second run after its first")
    pinv = write_inventory(tmp / "inv-cold.py", sandbox_hosts([name]))
    prebuild([name], tmp)
    after = pyinfra(str(pinv), "deploys/serve.py", names=[name])
    totals = pyinfra_totals(after.output)
    return {"ansible_first_wall": first.wall, "ansible_first_changed": first.extra["recap"][name]["changed"],
            "ansible_second_changed": again.extra["recap"][name]["changed"], "pyinfra_after": totals,
            "pyinfra_after_ok": after.returncode == 0 and bool(totals) and totals["changed"] == 0
            and totals["errors"] == 0 and totals["operations"] > 0}


# --- --dry over @fake hosts ------------------------------------------------------------------------------

def dry_rows(tmp: Path) -> list[dict]:
    rows = []
    for n in (200, 1000):
        data = {"instance_type": "inf2.xlarge", "neuron_key_fingerprint": "A" * 40,
                "triton_repository_secret": "s" * 24, "fake_delay": 0, "fake_delay_jitter": 0}
        hosts = [(f"@fake/h{i}", {**data, "fake_responses": _responses()}) for i in range(n)]
        inv = write_inventory(tmp / f"fake{n}.py", hosts)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        s = pyinfra(str(inv), "--dry", "deploys/serve.py")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if s.returncode:
            raise BenchError(f"--dry over {n} hosts failed:\n{s.output[-3000:]}")
        rows.append({"hosts": n, "wall": s.wall, "peak_mib": max(peak, before) / 1024})
    return rows


def _responses() -> dict:
    # plain-string keys only (an inventory file is Python source: patterns are written as their text)
    return {k: v for k, v in healthy("inf2.xlarge", "debian12").items() if isinstance(k, str)}


# --- report ----------------------------------------------------------------------------------------------

def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def report(rows: list[dict], dry: list[dict], cold: dict, markdown: bool) -> str:
    ans = all("ansible" in r for r in rows) and bool(rows)
    head = ["hosts", "first run wall", "first run commands/host", "uploads/host", "no-op wall", "no-op commands/host"]
    if ans:
        head += ["Ansible no-op, defaults", "Ansible no-op, tuned", "tritonfleet / defaults", "tritonfleet / tuned"]
    body = []
    for r in rows:
        line = [str(r["hosts"]), f"{r['first_wall']:.1f} s", f"{r['first_cmds']:.0f}", f"{r['first_uploads']:.0f}",
                f"{r['noop_wall']:.2f} s", f"{r['noop_cmds']:.0f}"]
        if ans:
            d, t = r["ansible"]["defaults"].wall, r["ansible"]["tuned"].wall
            line += [f"{d:.2f} s", f"{t:.2f} s", _ratio(r["noop_wall"], d), _ratio(r["noop_wall"], t)]
        body.append(line)
    cpu_head = ["hosts", "tool", "no-op wall", "controller CPU", "hosts CPU", "machine busy"]
    cpu_body = []
    for r in rows:
        tools = [("tritonfleet", r["noop"])]
        if ans:
            tools += [("Ansible defaults", r["ansible"]["defaults"]), ("Ansible tuned", r["ansible"]["tuned"])]
        for tool, s in tools:
            cpu_body.append([str(r["hosts"]), tool, f"{s.wall:.2f} s", f"{s.controller_cpu:.2f} s",
                             f"{s.hosts_cpu:.2f} s", f"{100 * s.busy:.0f}%"])
    notes = []
    if len(rows) > 1:
        one, last = rows[0], rows[-1]
        notes.append(f"{last['hosts']} hosts take {last['noop_wall'] / one['noop_wall']:.2f}x the no-op wall of "
                     f"{one['hosts']} (target 1.3x); tritonfleet no-op walls: "
                     + "; ".join(f"{r['hosts']}: " + ", ".join(f"{w:.2f}" for w in r["noop_walls"]) for r in rows))
    if ans:
        first = rows[0]["ansible"]
        for config in CONFIGS:
            if f"{config}_execs" in first:
                notes.append(f"Ansible {config}, no-op on {rows[0]['hosts']} host(s): {first[f'{config}_execs']:.0f} "
                             f"SSH executions and {first[f'{config}_puts']:.0f} file transfers per host (-vvv)")
        for r in rows:
            a = r["ansible"]
            changed = ", ".join(a["converge_changed"]) or "nothing"
            notes.append(f"{r['hosts']} host(s): Ansible's first run after tritonfleet's took {a['converge_wall']:.1f} s "
                         f"and changed: {changed}; no-op walls defaults "
                         + ", ".join(f"{w:.2f}" for w in a["defaults_walls"]) + "; tuned "
                         + ", ".join(f"{w:.2f}" for w in a["tuned_walls"]))
        best = min(r["noop_wall"] / r["ansible"]["tuned"].wall for r in rows)
        notes.append(f"tritonfleet / tuned Ansible, best size: {best:.2f}x (target <= 0.12x)")
    if cold:
        notes.append(f"fresh host converged by Ansible (tuned) alone: {cold['ansible_first_wall']:.1f} s, "
                     f"{cold['ansible_first_changed']} tasks changed, its second run changed "
                     f"{cold['ansible_second_changed']}; then tritonfleet on it: {cold['pyinfra_after']} -> "
                     + ("no change (same state)" if cold["pyinfra_after_ok"] else "CHANGES: the states differ"))
    for d in dry:
        notes.append(f"--dry over {d['hosts']} @fake hosts: {d['wall']:.1f} s, {d['peak_mib']:.0f} MiB peak")
    return _table(head, body, markdown) + "\n\n" + _table(cpu_head, cpu_body, markdown) + "\n\n" + "\n".join(
        ("- " if markdown else "") + n for n in notes)


def _table(head: list[str], body: list[list[str]], markdown: bool) -> str:
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
                         + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown (README)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="fleet sizes (default 1,3,8)")
    ap.add_argument("--runs", type=int, default=NOOP_RUNS, help="no-op runs per tool and size (median)")
    ap.add_argument("--no-dry", action="store_true", help="skip --dry over @fake hosts")
    ap.add_argument("--no-ansible", action="store_true", help="skip the Ansible comparison")
    ap.add_argument("--no-cold-check", action="store_true", help="skip the fresh-host Ansible-then-tritonfleet check")
    args = ap.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        dry = [] if args.no_dry else dry_rows(tmp)
        rows, cold = sandbox_rows(tmp, sizes, args.runs, not args.no_ansible, not args.no_cold_check)
    print(f"\nconverge cost, deploys/serve.py on the sandbox (inf2.xlarge hosts, Debian 12, {NCPU} CPUs shared "
          "by the controller and every host); Ansible: bench/ansible/serve.yml on the same hosts, same run\n")
    print(report(rows, dry, cold, args.markdown))
    return 0 if not cold or cold["pyinfra_after_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
