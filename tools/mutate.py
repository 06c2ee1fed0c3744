"""Mutation testing report (``make mutate``): mutmut 3 over the modules ``[tool.mutmut] only_mutate`` lists in
pyproject.toml (or a subset), against the pure and @fake test layers, then a per-module markdown table.

    make mutate                                             # every listed module, one after the other
    make mutate MODULES='tritonfleet/fleet/lb.py roles/facts/cache.py'
    .venv/bin/python tools/mutate.py --report-only          # the table from what mutants/ holds now

Each module is one ``mutmut run --max-children N '<module>.*'`` (a module named is run again from scratch;
its wall time is kept in mutants/mutate-times.json). The counts come from ``mutmut results --all true``, the
survivors' diffs from ``mutmut show``. Score = (killed + timeout) / tested, as ``mutmut badge`` counts it.
A report like a benchmark, not a gate: the exit status says only whether mutmut ran.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import tomllib  # Python 3.11+, like the development machine's

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = str(Path(sys.executable).parent / "mutmut")
TIMES = ROOT / "mutants" / "mutate-times.json"
OTHER = ("timeout", "suspicious", "no tests")  # columns of their own; the rest (skipped, segfault, ...) is "other"


def listed_modules() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]


def dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def link_templates() -> None:
    """mutants/tritonfleet/templates a link to ../templates, as in the checkout (the bundle tests want it)."""
    link = ROOT / "mutants" / "tritonfleet" / "templates"
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("..") / "templates")


def run_module(path: str, max_children: int) -> tuple[float, int]:
    log = ROOT / "mutants" / f"mutate-{dotted(path)}.log"
    link_templates()
    start = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.call([MUTMUT, "run", "--max-children", str(max_children), f"{dotted(path)}.*"],
                             cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - start
    if rc:
        print(f"{path}: mutmut exited {rc}; the end of {log.relative_to(ROOT)}:", file=sys.stderr)
        print(log.read_text(errors="replace").replace("\r", "\n")[-3000:], file=sys.stderr)
    return seconds, rc


def results() -> tuple[dict[str, Counter], dict[str, list[str]]]:
    """Status counts and the survivors' names per dotted module, from ``mutmut results``."""
    out = subprocess.run([MUTMUT, "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    counts: dict[str, Counter] = {}
    survivors: dict[str, list[str]] = {}
    for name, status in re.findall(r"^\s+(\S+): (.+)$", out, re.M):
        module = re.split(r"\.x[_ǁ]", name, maxsplit=1)[0]
        counts.setdefault(module, Counter())[status] += 1
        if status == "survived":
            survivors.setdefault(module, []).append(name)
    return counts, survivors


def report(modules: list[str], diffs: bool) -> str:
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    counts, survived = results()
    lines = [f"# Mutation testing: mutmut {version('mutmut')}", "",
             "Tests: the pure and @fake layers (`pytest -m 'pure or fake' tests/unit tests/fake`, see "
             "`[tool.mutmut]` in pyproject.toml). Score = (killed + timeout) / tested.", "",
             "| module | mutants | killed | survived | timeout | suspicious | no tests | other | score | run | date |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    survivors: dict[str, list[str]] = {}
    for path in modules:
        c = counts.get(dotted(path), Counter())
        total = sum(c.values())
        tested = total - c["not checked"] - c["skipped"]
        t = times.get(path, {})
        if not tested:
            lines.append(f"| {path} | {total} | not run yet |||||||||")
            continue
        other = tested - c["killed"] - c["survived"] - sum(c[k] for k in OTHER)
        score = 100 * (c["killed"] + c["timeout"]) / tested
        run = f"{t['seconds'] / 60:.1f} min" if t else "?"
        if c["not checked"]:
            run += f", {c['not checked']} not run"
        lines.append(f"| {path} | {total} | {c['killed']} | {c['survived']} | {c['timeout']} | {c['suspicious']} "
                     f"| {c['no tests']} | {other} | {score:.0f}% | {run} | {t.get('date', '?')} |")
        survivors[path] = survived.get(dotted(path), [])
    lines += ["", f"## Surviving mutants ({sum(map(len, survivors.values()))})"]
    for path, names in survivors.items():
        lines += ["", f"### {path} ({len(names)})", ""]
        for name in names:
            if diffs:
                shown = subprocess.run([MUTMUT, "show", name], cwd=ROOT, capture_output=True, text=True).stdout
                lines += [f"`{name}`", "", "```diff", shown.split("\n", 1)[-1].strip(), "```", ""]
            else:
                lines.append(f"- `{name}`")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", default="", help="paths from [tool.mutmut] only_mutate, space or comma "
                        "separated (default: all of them)")
    parser.add_argument("--max-children", type=int, default=1, help="mutmut workers (default 1)")
    parser.add_argument("--report", default="mutate-report.md", help="markdown report (default %(default)s)")
    parser.add_argument("--report-only", action="store_true", help="run nothing; the table from mutants/")
    parser.add_argument("--no-diffs", action="store_true", help="survivors by name only, without mutmut show")
    args = parser.parse_args()
    listed = listed_modules()
    chosen = [m for m in re.split(r"[\s,]+", args.modules) if m] or listed
    unknown = sorted(set(chosen) - set(listed))
    if unknown:
        parser.error(f"not in [tool.mutmut] only_mutate: {' '.join(unknown)}")
    failed = 0
    if not args.report_only:
        for path in chosen:
            print(f"mutmut: {path}", flush=True)
            seconds, rc = run_module(path, args.max_children)
            failed += rc != 0
            times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
            times[path] = {"seconds": round(seconds), "date": datetime.date.today().isoformat(), "rc": rc}
            TIMES.write_text(json.dumps(times, indent=2) + "\n")
    Path(args.report).write_text(report(listed, diffs=not args.no_diffs))
    print(f"wrote {args.report}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
