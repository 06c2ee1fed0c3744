"""tritonfleet.agent.qa.report: every JSON key and JUnit attribute, the files as written (indent, mode, XML
declaration, temporary file) and the statistics of the summary lines, which the QA tests did not pin.
Written for the mutants ``make mutate`` found surviving (docs/mutation-survivors.md)."""

from __future__ import annotations

import json
import stat
import tempfile
import xml.etree.ElementTree as ET

import pytest

from tritonfleet.agent.qa.compare import Worst
from tritonfleet.agent.qa.report import Report, junit, summary_lines, write
from tritonfleet.agent.qa.runner import Level

SUITE = "qa/add_sub.yaml"


def level(case: str, status: str, concurrency: int = 1, server: str = "local", suite: str = SUITE,
          model: str = "add_sub", **kw) -> Level:
    lv = Level(suite, model, case, server, "grpc", concurrency, kw.pop("expected", "pass"))
    lv.status = status
    lv.outcome = kw.pop("outcome", {"passed": "pass", "failed": "mismatch", "error": "request-error",
                                    "skipped": "skipped"}[status])
    for key, value in kw.items():
        setattr(lv, key, value)
    return lv


def small() -> Report:
    """A failed level (with a worst element), an error and a skipped level, in two suites."""
    worst = Worst("OUTPUT__1", [2, 3], 7.0, 1.0, got=0, expected=-7, failed=True, score=7.0)
    levels = [
        level("correct", "failed", 4, requests=4, mismatched=2, latencies=[0.001, 0.002, 0.003, 0.004],
              seconds=0.25, batch=2, worst=worst, message="add_sub: 2 of 4 responses differ"),
        level("down", "error", 2, seconds=0.5, message="add_sub: request 1 failed: UNAVAILABLE"),
        level("big", "skipped", 1, suite="qa/big.yaml", model="big", message="needs 8 NeuronCores"),
    ]
    return Report("host-1", "20261126T080000Z", "2026-11-26T08:00:00Z", 1.23456,
                  {"local": "grpc://127.0.0.1:8001"}, levels)


def test_json_document_has_every_key_and_value():
    doc = small().to_json()
    assert doc == {
        "schema": 1, "host": "host-1", "stamp": "20261126T080000Z", "started": "2026-11-26T08:00:00Z",
        "seconds": 1.235, "servers": {"local": "grpc://127.0.0.1:8001"},
        "summary": {"cases": 3, "passed": 0, "failed": 1, "errors": 1, "skipped": 1},
        "cases": [
            {"suite": SUITE, "model": "add_sub", "case": "correct", "server": "local", "protocol": "grpc",
             "concurrency": 4, "status": "failed", "expected": "pass", "outcome": "mismatch",
             "message": "add_sub: 2 of 4 responses differ",
             "worst": {"output": "OUTPUT__1", "index": [2, 3], "abs": 7.0, "rel": 1.0},
             "requests": 4, "mismatched": 2, "batch_size": 2, "p50_ms": 2.5, "p99_ms": 3.97, "throughput": 32.0},
            {"suite": SUITE, "model": "add_sub", "case": "down", "server": "local", "protocol": "grpc",
             "concurrency": 2, "status": "error", "expected": "pass", "outcome": "request-error",
             "message": "add_sub: request 1 failed: UNAVAILABLE", "worst": None, "requests": 0, "mismatched": 0,
             "batch_size": 1, "p50_ms": None, "p99_ms": None, "throughput": None},
            {"suite": "qa/big.yaml", "model": "big", "case": "big", "server": "local", "protocol": "grpc",
             "concurrency": 1, "status": "skipped", "expected": "pass", "outcome": "skipped",
             "message": "needs 8 NeuronCores", "worst": None, "requests": 0, "mismatched": 0, "batch_size": 1,
             "p50_ms": None, "p99_ms": None, "throughput": None},
        ]}


def test_json_seconds_are_rounded_to_milliseconds():
    r = small()
    for seconds, want in ((1.23456, 1.235), (2.0004, 2.0), (0.9996, 1.0)):
        r.seconds = seconds
        assert r.to_json()["seconds"] == want
        assert isinstance(r.to_json()["seconds"], float)


def test_junit_attributes_of_suites_cases_and_results():
    root = junit(small())
    assert root.tag == "testsuites"
    assert root.attrib == {"name": "tritonfleet-qa", "tests": "3", "failures": "1", "errors": "1", "skipped": "1",
                           "time": "1.235"}
    add_sub, big = root.findall("testsuite")
    assert add_sub.attrib == {"name": "add_sub", "file": SUITE, "hostname": "host-1",
                              "timestamp": "2026-11-26T08:00:00Z", "tests": "2", "failures": "1", "errors": "1",
                              "skipped": "0", "time": "0.750"}
    assert big.attrib == {"name": "big", "file": "qa/big.yaml", "hostname": "host-1",
                          "timestamp": "2026-11-26T08:00:00Z", "tests": "1", "failures": "0", "errors": "0",
                          "skipped": "1", "time": "0.000"}
    failed, error = add_sub.findall("testcase")
    assert failed.attrib == {"classname": "add_sub.correct", "name": "correct [concurrency=4, server=local]",
                             "time": "0.250", "file": SUITE}
    assert error.attrib == {"classname": "add_sub.down", "name": "down [concurrency=2, server=local]",
                            "time": "0.500", "file": SUITE}
    failure = failed.find("failure")
    assert failure.attrib == {"message": "add_sub: 2 of 4 responses differ", "type": "mismatch"}
    assert failure.text == ("add_sub: 2 of 4 responses differ\n"
                            "model=add_sub output=OUTPUT__1 element=[2, 3] got=0 expected=-7 abs=7.0 rel=1.0")
    err = error.find("error")
    assert err.attrib == {"message": "add_sub: request 1 failed: UNAVAILABLE", "type": "request-error"}
    assert err.text == "add_sub: request 1 failed: UNAVAILABLE"
    (skipped_case,) = big.findall("testcase")
    assert [child.tag for child in skipped_case] == ["skipped", "system-out"]
    skipped = skipped_case.find("skipped")
    assert skipped.attrib == {"message": "needs 8 NeuronCores"} and skipped.text is None


def test_written_files_indent_declaration_and_mode(tmp_path):
    r = small()
    r.levels[0].message = "add_sub: 2 of 4 responses differ – µs"
    out = tmp_path / "a" / "b" / "reports"  # parents made as needed
    json_path, xml_path = write(r, out)
    assert (json_path, xml_path) == (out / "20261126T080000Z.json", out / "20261126T080000Z.xml")
    text = json_path.read_text(encoding="utf-8")
    assert text.startswith('{\n "schema": 1,\n "host": "host-1",\n "stamp": ')
    assert text.endswith("\n}\n") and json.loads(text) == json.loads(json.dumps(r.to_json()))
    data = xml_path.read_bytes()
    assert data.startswith(b"<?xml version='1.0' encoding='utf-8'?>\n<testsuites ")
    assert "– µs".encode() in data and data.endswith(b"</testsuites>\n")
    assert ET.fromstring(data).find("testsuite/testcase/failure").get("message").endswith("– µs")
    for path in (json_path, xml_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in out.iterdir()) == ["20261126T080000Z.json", "20261126T080000Z.xml"]
    write(r, out)  # again, into the existing directory
    assert sorted(p.name for p in out.iterdir()) == ["20261126T080000Z.json", "20261126T080000Z.xml"]


def test_a_non_finite_number_is_refused_not_written_as_nan(tmp_path):
    r = small()
    r.seconds = float("nan")
    with pytest.raises(ValueError):
        write(r, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_temporary_file_is_a_hidden_file_next_to_the_target(tmp_path, monkeypatch):
    # $TMPDIR is not used: the report is written even where the temporary directory does not exist
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    out = tmp_path / "reports"
    write(small(), out)
    assert sorted(p.name for p in out.iterdir()) == ["20261126T080000Z.json", "20261126T080000Z.xml"]
    # a target that cannot be replaced: the error names the temporary file, which is removed
    blocker = out / "20261126T080000Z.json"
    blocker.unlink()
    blocker.mkdir()
    (blocker / "keep").write_text("x")
    with pytest.raises(OSError) as info:
        write(small(), out)
    assert str(info.value.filename).startswith(f"{out}/.20261126T080000Z.json.")  # hidden, beside the target
    assert sorted(p.name for p in out.iterdir()) == ["20261126T080000Z.json", "20261126T080000Z.xml"]


def stats_report() -> Report:
    """One suite on three servers: 200 distinct latencies (all passed), 10 latencies with no wall time, and
    a pass beside a skipped level."""
    many = [(i + 1) / 10000 for i in range(200)]  # 0.1 ms .. 20.0 ms
    levels = [
        level("correct", "passed", 1, server="big", requests=100, latencies=many[:100], seconds=0.5, batch=2),
        level("correct", "passed", 8, server="big", requests=100, latencies=many[100:], seconds=0.25, batch=2),
        level("correct", "passed", 1, server="quick", requests=10,
              latencies=[(i + 1) / 1000 for i in range(10)], seconds=0.0),
        level("correct", "passed", 1, server="mixed", requests=4, latencies=[0.001, 0.002, 0.003, 0.004],
              seconds=0.5),
        level("other", "skipped", 1, server="mixed", requests=1, latencies=[5.0], seconds=1.0,
              message="not for this server"),
    ]
    return Report("host-1", "20261126T080000Z", "2026-11-26T08:00:00Z", 3.25, {}, levels)


def test_summary_statistics_per_server():
    lines = summary_lines(stats_report())
    assert lines == [
        # p50 = 101st of 200 sorted (10.1 ms), p99 = 199th (19.9 ms); best 100 x 2 / 0.25 s
        "PASS add_sub on big (qa/add_sub.yaml): 2/2 passed; 200 requests, p50 10.10 ms, p99 19.90 ms, "
        "up to 800 infer/s",
        # p50 = 6th of 10, p99 = the 10th; no wall time, so no throughput
        "PASS add_sub on quick (qa/add_sub.yaml): 1/1 passed; 10 requests, p50 6.00 ms, p99 10.00 ms, "
        "up to 0 infer/s",
        # the skipped level's request and latency do not count
        "PASS add_sub on mixed (qa/add_sub.yaml): 1/2 passed, 1 skipped; 4 requests, p50 3.00 ms, p99 4.00 ms, "
        "up to 8 infer/s",
        "5 checks: 4 passed, 0 failed, 0 errors, 1 skipped in 3.2 s",
    ]
