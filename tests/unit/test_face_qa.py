"""The fleet table over the hosts' QA reports: rows per host and model, worst error, and failure."""

from __future__ import annotations

import json

import pytest

from tritonfleet.face import qa

PASS = {"model": "add_sub", "status": "passed", "worst": {"output": "OUTPUT0", "index": [0, 1], "abs": 0.0, "rel": 0.0},
        "p50_ms": 1.0, "p99_ms": 2.5}
FAIL = {"model": "add_sub", "status": "failed", "message": "OUTPUT0[0,3]: got 5 expected 4",
        "worst": {"output": "OUTPUT0", "index": [0, 3], "abs": 1.0, "rel": 0.25}, "p50_ms": 1.0, "p99_ms": 3.0}


def _write(root, host, stamp, cases):
    d = root / host
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stamp}.json").write_text(json.dumps({"schema": 1, "host": host, "cases": cases}))


def test_all_passing_hosts_print_and_return(tmp_path, capsys):
    _write(tmp_path, "a", "S1", [PASS, PASS])
    _write(tmp_path, "b", "S1", [PASS])
    qa.fleet_table(str(tmp_path), "S1")
    out = capsys.readouterr().out
    assert "add_sub" in out and "2.5" in out


def test_a_failing_host_is_named_with_its_worst_element(tmp_path, capsys):
    _write(tmp_path, "a", "S1", [PASS])
    _write(tmp_path, "b", "S1", [PASS, FAIL])
    with pytest.raises(qa.QAFailed, match=r"QA failed on b \("):
        qa.fleet_table(str(tmp_path), "S1")
    (row,) = [r for r in qa.rows(qa.load_reports(str(tmp_path), "S1")) if r["host"] == "b"]
    assert row["failures"] == 1 and row["worst"].startswith("OUTPUT0[0,3] abs 1") and row["p99_ms"] == 3.0


def test_a_host_without_the_runs_report_fails(tmp_path):
    _write(tmp_path, "a", "S1", [PASS])
    _write(tmp_path, "b", "S0", [PASS])  # an older run only
    with pytest.raises(qa.QAFailed, match="QA failed on b"):
        qa.fleet_table(str(tmp_path), "S1")


def test_no_reports_at_all_is_a_failure(tmp_path):
    with pytest.raises(qa.QAFailed, match="no QA reports"):
        qa.fleet_table(str(tmp_path), None)


def test_null_errors_and_negative_cases_do_not_break_or_colour_the_table(tmp_path):
    planted = {**FAIL, "status": "passed", "expected": "fail", "worst": {"output": "OUTPUT1", "index": [0], "abs": 7.0,
                                                                         "rel": None}}
    bytes_case = {**PASS, "worst": {"output": "LABEL", "index": [0], "abs": None, "rel": None}}
    _write(tmp_path, "a", "S1", [PASS, planted, bytes_case])
    qa.fleet_table(str(tmp_path), "S1")
    (row,) = qa.rows(qa.load_reports(str(tmp_path), "S1"))
    assert row["failures"] == 0 and "OUTPUT1" not in row["worst"]


def test_a_run_limited_to_some_hosts_judges_only_those(tmp_path):
    _write(tmp_path, "a", "S0", [PASS])  # an earlier run's host, not in this one
    _write(tmp_path, "b", "S1", [PASS])
    qa.fleet_table(str(tmp_path), "S1", hosts=["b"])
    with pytest.raises(qa.QAFailed, match="QA failed on c"):
        qa.fleet_table(str(tmp_path), "S1", hosts=["b", "c"])


ERROR = {"model": "add_sub", "status": "error", "outcome": "request-error",
         "message": "add_sub on triton: [StatusCode.UNAVAILABLE] failed to connect", "worst": None,
         "p50_ms": None, "p99_ms": None}
SKIPPED = {"model": "big", "status": "skipped", "outcome": "skipped", "message": "needs 32 NeuronCores, host has 2",
           "worst": None, "p50_ms": None, "p99_ms": None}


def test_error_rows_fail_the_gate_and_say_why(tmp_path):
    _write(tmp_path, "a", "S1", [PASS])
    _write(tmp_path, "b", "S1", [PASS, ERROR])
    with pytest.raises(qa.QAFailed, match=r"QA failed on b \("):
        qa.fleet_table(str(tmp_path), "S1")
    (row,) = [r for r in qa.rows(qa.load_reports(str(tmp_path), "S1")) if r["host"] == "b"]
    assert row["failures"] == 1 and row["cases"] == 2


def test_a_status_the_table_does_not_know_is_a_failure(tmp_path):
    _write(tmp_path, "a", "S1", [PASS, {**PASS, "status": "crashed"}])
    with pytest.raises(qa.QAFailed, match="QA failed on a"):
        qa.fleet_table(str(tmp_path), "S1")


@pytest.mark.parametrize("cases, says", [
    ([], "no cases ran"),
    ([SKIPPED, SKIPPED], "all 2 cases skipped: needs 32 NeuronCores"),
])
def test_a_host_whose_report_ran_nothing_fails_instead_of_vanishing(tmp_path, cases, says):
    _write(tmp_path, "a", "S1", [PASS])
    _write(tmp_path, "b", "S1", cases)
    with pytest.raises(qa.QAFailed, match=r"QA failed on b \("):
        qa.fleet_table(str(tmp_path), "S1", hosts=["a", "b"])
    (row,) = [r for r in qa.rows(qa.load_reports(str(tmp_path), "S1")) if r["host"] == "b"]
    assert row["failures"] == 1 and row["worst"].startswith(says)


def test_skipped_cases_beside_passing_ones_do_not_fail(tmp_path):
    _write(tmp_path, "a", "S1", [PASS, SKIPPED])
    qa.fleet_table(str(tmp_path), "S1")
    assert sum(r["failures"] for r in qa.rows(qa.load_reports(str(tmp_path), "S1"))) == 0
