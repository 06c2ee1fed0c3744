"""The pure helpers of bench/release.py: its options, the code of each release, the serving times, the table and
the verdicts against the issue's targets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

_spec = importlib.util.spec_from_file_location("bench_release",
                                               Path(__file__).resolve().parents[2] / "bench" / "release.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_options_default_quick_and_explicit() -> None:
    full = bench.parse_args([])
    assert (full.hosts, full.checks, full.runs, full.interval, full.rate, full.quick) == (8, 20, 3, 1.0, 20.0, False)
    assert full.json.endswith("bench/results/release.json")
    quick = bench.parse_args(["--quick"])
    assert (quick.hosts, quick.checks, quick.runs) == (2, 10, 1)
    mixed = bench.parse_args(["--quick", "--hosts", "4", "--checks", "5", "--interval", "0.5", "--json", "/tmp/x.json"])
    assert (mixed.hosts, mixed.checks, mixed.runs, mixed.interval, mixed.json) == (4, 5, 1, 0.5, "/tmp/x.json")


@pytest.mark.parametrize("argv", [["--hosts", "0"], ["--hosts", "17"], ["--interval", "0.1"], ["--rate", "0"],
                                  ["--rate", "101"], ["--checks", "0"], ["--runs", "0"], ["--deadline", "0"]])
def test_options_out_of_bounds_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2


def test_each_release_answers_differently() -> None:
    assert bench.release_code("v1") == bench.ADD_SUB
    v2 = bench.release_code("v2")
    assert "(in0 + in1 + 100)" in v2 and "(in0 + in1)" not in v2
    assert v2.replace("(in0 + in1 + 100)", "(in0 + in1)") == bench.ADD_SUB
    assert "(in0 + in1 + 300)" in bench.release_code("v4")
    assert [bench.answer(r) for r in ("v1", "v2", "v3", "v4")] == [3.0, 103.0, 203.0, 303.0]
    assert [bench.release_of(v) for v in (3.0, 103.0, 203.0, 303.0, 4.0, None)] == ["v1", "v2", "v3", "v4", None, None]
    tree = bench.model_tree("v3")
    assert set(tree) == {"add_sub/config.pbtxt", "add_sub/1/model.py"}
    assert tree["add_sub/1/model.py"] == bench.release_code("v3") and 'name: "add_sub"' in tree["add_sub/config.pbtxt"]


def test_release_code_needs_the_sample_expression(monkeypatch) -> None:
    monkeypatch.setattr(bench, "ADD_SUB", "OUTPUT0 = in0 + in1\n")
    with pytest.raises(ValueError, match="no longer computes"):
        bench.release_code("v2")


def test_serving_times_and_spread() -> None:
    events = [(1.0, 3.0, None), (2.0, None, "h: refused"), (3.0, 103.0, None), (4.0, 3.0, None), (5.0, 103.0, None)]
    assert bench.first_serving(events, 103.0, 0.0) == 3.0
    assert bench.first_serving(events, 103.0, 3.5) == 5.0
    assert bench.first_serving(events, 203.0, 0.0) is None
    assert bench.flapped(events, 103.0, 3.0) == 1  # back to 3.0 at t=4
    assert bench.flapped(events, 103.0, None) == 0
    assert bench.all_serving({"a": 1.0, "b": 2.5}) == 2.5
    assert bench.all_serving({"a": 1.0, "b": None}) is None
    assert bench.all_serving({}) is None
    assert bench.spread({"a": 1.0, "b": 3.0, "c": 2.0}) == "1.0 / 2.0 / 3.0 s"
    assert bench.spread({"a": 1.0, "b": None}) == "1.0 / 1.0 / 1.0 s (never: b)"
    assert bench.spread({"a": None}) == "- (never: a)"


def test_unit_argv_reads_the_service_command_line() -> None:
    unit = ("[Service]\nType=simple\nExecStart=/usr/bin/env AWS_EC2_METADATA_SERVICE_ENDPOINT=http://192.168.250.1:8169 "
            "/opt/tritonfleet/venv/bin/tritonfleet-agent pull --source s3://b/p --dest /opt/tritonfleet/models "
            "--server-models 'triton=a b' --interval 1\n\nRestart=always\n")
    env, argv = bench.unit_argv(unit)
    assert env == {"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://192.168.250.1:8169"}
    assert argv == ["pull", "--source", "s3://b/p", "--dest", "/opt/tritonfleet/models", "--server-models", "triton=a b",
                    "--interval", "1"]
    assert bench.unit_argv("ExecStart=tritonfleet-agent pull --once\n") == ({}, ["pull", "--once"])
    with pytest.raises(ValueError, match="no ExecStart"):
        bench.unit_argv("[Service]\n")
    with pytest.raises(ValueError, match="no tritonfleet-agent"):
        bench.unit_argv("ExecStart=/bin/true\n")


def results(pull_seconds=3.2, failed=0, slowest=7.5, hosts=8, wrong=0) -> dict:
    names = [f"bench-{i}" for i in range(1, hosts + 1)]
    traffic = {"sent": 1000, "failed": failed, "wrong": wrong}
    per = {h: (pull_seconds or 1.0) - 0.1 * i for i, h in enumerate(names)}
    if pull_seconds is None:
        per[names[0]] = None
    return {"hosts": names, "interval": 1.0,
            "pull": {"seconds": pull_seconds, "per_host": per, "traffic": traffic},
            "push": {"seconds": 25.0, "wall": 27.5, "per_host": {h: 20.0 for h in names},
                     "traffic": {"sent": 2000, "failed": 0, "wrong": 0}},
            "seed": {"seconds": 80.0, "per_host": {h: 10.0 * (i + 1) for i, h in enumerate(names)},
                     "traffic": {"sent": 3000, "failed": 412, "wrong": 0}, "emulated": "copy and restart"},
            "noop": {"pull_check_slowest_ms": slowest, "pull_check_median_ms": 6.0, "pull_pyinfra_per_host": 0.5,
                     "push_dry_run_median_ms": 850.0, "push_pyinfra_per_host": 0.6,
                     "pull_check_ms": {names[0]: {"median_ms": 6.0}}, "push_dry_run_ms": {names[0]: [850.0, 900.0]},
                     "pull_pyinfra_walls": [4.0], "push_pyinfra_walls": [4.8]}}


def test_verdicts_pass_at_the_targets_and_fail_past_them() -> None:
    assert [ok for _, ok in bench.verdicts(results())] == [True, True, True]
    assert [ok for _, ok in bench.verdicts(results(pull_seconds=10.0, slowest=50.0))] == [True, True, True]
    assert [ok for _, ok in bench.verdicts(results(pull_seconds=10.1))] == [False, True, True]
    assert [ok for _, ok in bench.verdicts(results(pull_seconds=None))] == [False, True, True]
    assert [ok for _, ok in bench.verdicts(results(failed=1))] == [True, False, True]
    assert [ok for _, ok in bench.verdicts(results(wrong=1))] == [True, False, True]
    assert [ok for _, ok in bench.verdicts(results(slowest=50.1))] == [True, True, False]
    assert [ok for _, ok in bench.verdicts(results(slowest=None))] == [True, True, False]
    texts = [t for t, _ in bench.verdicts(results())]
    assert texts[0] == "pull: release to all 8 hosts serving 3.2 s (target <= 10 s)"
    assert texts[1] == "pull: failed requests during the release 0 of 1000 (target 0)"
    assert texts[2] == "pull: resident no-op check 7.5 ms (slowest host's median; target <= 50 ms)"
    assert "(target is for 8 hosts; 2 here)" in bench.verdicts(results(hosts=2))[0][0]


def test_table_and_report() -> None:
    text = bench.report(results(failed=2))
    lines = text.splitlines()
    assert lines[0].startswith("way") and "release to all 8 hosts serving" in lines[0]
    assert lines[1].startswith("pull (agent checks every 1 s)") and "3.2 s" in lines[1] and "2 of 1000" in lines[1]
    assert "2.5 / 2.9 / 3.2 s" in lines[1] and "6.0 ms a check (0.50 s of a no-op models.py)" in lines[1]
    assert lines[2].startswith("push (pyinfra deploys/models.py)") and "25.0 s (run: 27.5 s)" in lines[2]
    assert "850.0 ms dry run (0.60 s of a no-op models.py)" in lines[2]
    assert lines[3].startswith("seed's way") and "412 of 3000" in lines[3] and "10.0 / 45.0 / 80.0 s" in lines[3]
    assert "PASS pull: release to all 8 hosts serving 3.2 s (target <= 10 s)" in lines
    assert "FAIL pull: failed requests during the release 2 of 1000 (target 0)" in lines
    assert "seed's way, emulated: copy and restart" in text
    assert "bench-1 875" in text  # the dry run's median per host
    md = bench.table(results(), markdown=True).splitlines()
    assert md[0].startswith("| way | release to all 8 hosts serving |") and md[1] == "|---|---|---|---|---|"
    assert len(md) == 5 and all(line.startswith("| ") and line.endswith(" |") for line in md[2:])
    no_seed = results()
    del no_seed["seed"]
    assert len(bench.table(no_seed).splitlines()) == 3


def test_report_flags_runs_that_were_no_no_ops() -> None:
    r = results()
    r["noop"]["pull_pyinfra_totals"] = [{"operations": 24, "changed": 4}]
    r["noop"]["push_pyinfra_totals"] = [{"operations": 12, "changed": 0}]
    r["push"]["totals"] = {"operations": 30, "changed": 9}
    text = bench.report(r)
    assert "pull: no-op pyinfra deploys/models.py on 8 hosts: 4.00 s (NOT no-ops: [4] operations changed)" in text
    assert "push: no-op pyinfra deploys/models.py on 8 hosts: 4.80 s\n" in text
    assert "push: the timed run changed 9 operations" in text
    r["push"]["totals"] = {"operations": 30, "changed": 8}
    assert "the timed run changed" not in bench.report(r)
