"""The QA fleet table in detail (from the mutation survivors of tritonfleet/face/qa.py): the exact rows for
reports that ran nothing, skipped everything or failed without a worst error, which report of a host is read,
the numbers' formats, the printed table's titles, alignment and colour, and the messages of a failed gate."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner
from rich.console import Console

from tritonfleet.face import qa

PASS = {"model": "m", "status": "passed", "worst": {"output": "OUT", "index": [0, 1], "abs": 0.5, "rel": 0.25},
        "p99_ms": 2.25}


def _write(root, host, stamp, body):
    d = root / host
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stamp}.json").write_text(body if isinstance(body, str) else json.dumps({"cases": body}))


def _table(rows, **console) -> str:
    buf = io.StringIO()
    qa.print_table(rows, Console(file=buf, width=100, **console))
    return buf.getvalue()


def test_a_missing_report_is_one_failed_row_saying_so():
    assert qa.rows({"h": None}) == [{"host": "h", "model": "-", "cases": 0, "failures": 1, "worst": "no report",
                                     "p99_ms": None}]


def test_a_report_with_no_cases_or_only_skipped_ones_is_one_failed_row_with_the_reason():
    skipped = {"model": "m", "status": "skipped", "message": "needs 32 cores"}
    assert qa.rows({"h": {"cases": []}, "i": {}, "j": {"cases": [skipped, skipped]},
                    "k": {"cases": [{"status": "skipped"}]}, "l": {"cases": [{**skipped, "message": "x" * 200}]}}) == [
        {"host": "h", "model": "-", "cases": 0, "failures": 1, "worst": "no cases ran", "p99_ms": None},
        {"host": "i", "model": "-", "cases": 0, "failures": 1, "worst": "no cases ran", "p99_ms": None},
        {"host": "j", "model": "-", "cases": 2, "failures": 1, "worst": "all 2 cases skipped: needs 32 cores",
         "p99_ms": None},
        {"host": "k", "model": "-", "cases": 1, "failures": 1, "worst": "all 1 cases skipped: no reason given",
         "p99_ms": None},
        {"host": "l", "model": "-", "cases": 1, "failures": 1, "worst": ("all 1 cases skipped: " + "x" * 200)[:120],
         "p99_ms": None},
    ]


def test_rows_per_model_with_the_largest_absolute_error_and_p99():
    cases = [PASS, {**PASS, "worst": {"output": "OUT", "index": [3], "abs": 0.75, "rel": 0.125}, "p99_ms": 1.0},
             {**PASS, "worst": {"output": "BIG", "index": [9], "abs": None, "rel": None}, "p99_ms": None},
             {"status": "passed", "p99_ms": 4.0},
             {**PASS, "model": "n", "worst": {"output": "LBL", "abs": None}, "p99_ms": None}]
    assert qa.rows({"h": {"cases": cases}}) == [
        {"host": "h", "model": "?", "cases": 1, "failures": 0, "worst": "-", "p99_ms": 4.0},
        {"host": "h", "model": "m", "cases": 3, "failures": 0, "worst": "OUT[3] abs 0.75 rel 0.125", "p99_ms": 2.25},
        {"host": "h", "model": "n", "cases": 1, "failures": 0, "worst": "LBL[] abs - rel -", "p99_ms": None},
    ]


def test_a_failure_without_a_worst_error_shows_its_message_and_a_negative_case_is_not_graded():
    error = {"model": "m", "status": "error", "message": "e" * 100}
    planted = {**PASS, "expected": "fail", "worst": {"output": "P", "index": [0], "abs": 9.0, "rel": 1.0}}
    assert qa.rows({"h": {"cases": [error, planted]}, "i": {"cases": [{"model": "m", "status": "failed"}]}}) == [
        {"host": "h", "model": "m", "cases": 2, "failures": 1, "worst": "e" * 80, "p99_ms": 2.25},
        {"host": "i", "model": "m", "cases": 1, "failures": 1, "worst": "", "p99_ms": None},
    ]
    graded = {**PASS, "expected": "pass"}
    assert qa.rows({"h": {"cases": [graded, planted]}})[0]["worst"] == "OUT[0,1] abs 0.5 rel 0.25"


def test_numbers_keep_three_significant_digits():
    assert [qa._num(v) for v in (None, 0.012345, 1234.5, 2)] == ["-", "0.0123", "1.23e+03", "2"]


def test_load_reports_reads_each_hosts_newest_report_or_the_runs_and_marks_unreadable_ones(tmp_path):
    _write(tmp_path, "a", "S1", [PASS])
    _write(tmp_path, "a", "S2", [{**PASS, "model": "newer"}])
    _write(tmp_path, "b", "S1", "{not json")
    (tmp_path / "c").mkdir()  # a host without reports
    (tmp_path / "stray.json").write_text("{}")  # not a host
    assert qa.load_reports(str(tmp_path)) == {"a": {"cases": [{**PASS, "model": "newer"}]}, "b": None}
    assert qa.load_reports(str(tmp_path), "S1") == {"a": {"cases": [PASS]}, "b": None, "c": None}
    assert qa.load_reports(str(tmp_path), None, hosts=["c", "a"]) == {"a": {"cases": [{**PASS, "model": "newer"}]}}
    assert qa.load_reports(str(tmp_path), "S2", hosts=["b", "a"]) == {"b": None, "a": {"cases": [{**PASS,
                                                                                                    "model": "newer"}]}}


def test_the_printed_table_has_its_title_columns_alignment_and_numbers():
    text = _table([{"host": "h", "model": "m", "cases": 12, "failures": 0, "worst": "w", "p99_ms": 2.25},
                   {"host": "i", "model": "-", "cases": 0, "failures": 1, "worst": "no report", "p99_ms": None}])
    assert [line.rstrip() for line in text.splitlines()] == [
        "QA",
        "┏━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━┓",
        "┃ host ┃ model ┃ cases ┃ failures ┃ worst error ┃ p99 ms ┃",
        "┡━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━┩",
        "│ h    │ m     │    12 │        0 │ w           │    2.2 │",
        "│ i    │ -     │     0 │        1 │ no report   │      - │",
        "└──────┴───────┴───────┴──────────┴─────────────┴────────┘",
        "",
    ][:len(text.splitlines())]
    assert text.splitlines()[0].startswith("QA ")  # the title on the left, not centred


def test_a_failing_row_is_red_and_a_passing_one_is_not():
    rows = [{"host": "good", "model": "m", "cases": 1, "failures": 0, "worst": "-", "p99_ms": 1.0},
            {"host": "bad", "model": "m", "cases": 1, "failures": 2, "worst": "-", "p99_ms": 1.0}]
    text = _table(rows, force_terminal=True, color_system="standard")
    good = next(line for line in text.splitlines() if "good" in line)
    bad = next(line for line in text.splitlines() if "bad" in line)
    assert "\x1b[31m" in bad and "\x1b[31m" not in good


def test_fleet_table_prints_to_stdout_and_names_the_failed_hosts_and_the_missing_run(tmp_path, capsys):
    _write(tmp_path, "b", "S1", [{**PASS, "status": "failed"}])
    _write(tmp_path, "a", "S1", [{**PASS, "status": "error"}])
    _write(tmp_path, "c", "S1", [PASS])
    with pytest.raises(qa.QAFailed) as exc:
        qa.fleet_table(str(tmp_path), "S1")
    assert str(exc.value) == f"QA failed on a, b (reports under {tmp_path}/<host>/)"
    out = capsys.readouterr().out
    assert "QA" in out and "OUT[0,1] abs 0.5 rel 0.25" in out
    with pytest.raises(qa.QAFailed) as exc:
        qa.fleet_table(str(tmp_path / "none"), "S9")
    assert str(exc.value) == f"no QA reports under {tmp_path / 'none'} for run S9"
    with pytest.raises(qa.QAFailed) as exc:
        qa.fleet_table(str(tmp_path / "none"))
    assert str(exc.value) == f"no QA reports under {tmp_path / 'none'}"
    qa.fleet_table(str(tmp_path), "S1", hosts=["c"])


def test_the_table_command_reads_reports_by_default_and_fails_with_the_gates_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "reports", "a", "S1", [PASS])
    result = CliRunner().invoke(qa.qa, ["table"])
    assert result.exit_code == 0 and "OUT[0,1]" in result.output
    _write(tmp_path / "reports", "a", "S2", [{**PASS, "status": "failed"}])
    result = CliRunner().invoke(qa.qa, ["table"])
    assert result.exit_code == 1 and "Error: QA failed on a (reports under reports/<host>/)" in result.output
    result = CliRunner().invoke(qa.qa, ["table", "--stamp", "S1"])
    assert result.exit_code == 0


def test_hosts_after_a_missing_or_skipped_only_report_still_get_their_rows():
    ok = {"cases": [PASS]}
    skipped = {"cases": [{"status": "skipped"}]}
    assert [r["host"] for r in qa.rows({"a": None, "b": ok, "c": skipped, "d": ok})] == ["a", "b", "c", "d"]
