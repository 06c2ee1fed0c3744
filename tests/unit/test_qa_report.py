"""QA reports: the JSON schema the fleet table and the textfile read, JUnit XML, summary lines, exit code."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from tritonfleet.agent import publish
from tritonfleet.agent.qa.compare import Worst
from tritonfleet.agent.qa.report import Report, summary_lines, write
from tritonfleet.agent.qa.runner import Level

ROW_KEYS = {"suite", "model", "case", "server", "concurrency", "status", "expected", "message", "worst", "requests",
            "p50_ms", "p99_ms", "throughput"}


def level(case: str, status: str, concurrency: int = 1, **kw) -> Level:
    lv = Level("qa/add_sub.yaml", "add_sub", case, "local", "grpc", concurrency, kw.pop("expected", "pass"))
    lv.status = status
    lv.outcome = kw.pop("outcome", {"passed": "pass", "failed": "mismatch", "error": "request-error",
                                    "skipped": "skipped"}[status])
    for key, value in kw.items():
        setattr(lv, key, value)
    return lv


def report() -> Report:
    bad = Worst("OUTPUT__1", [2, 3], 7.0, 1.0, got=0, expected=-7, failed=True, score=7.0)
    levels = [
        level("correct", "passed", 1, requests=40, latencies=[0.001] * 40, seconds=0.05, batch=6,
              worst=Worst("OUTPUT__0", [0, 0], 0.0, 0.0)),
        level("correct", "failed", 9, requests=36, mismatched=2, latencies=[0.002] * 36, seconds=0.02, worst=bad,
              message="add_sub: 2 of 36 responses differ; worst: OUTPUT__1[2, 3]: got 0, expected -7 (abs 7, rel 1)"),
        level("misaligned", "passed", 1, expected="error", outcome="data-error",
              message="add_sub: data error: The 'validation_data' field doesn't align with 'data' field"),
        level("correct", "error", 5, message="add_sub: request 3 failed: UNAVAILABLE: connection refused"),
    ]
    big = Level("qa/big.yaml", "big", "correct", "local", "grpc", 1, "pass", status="skipped", outcome="skipped",
                message="needs 8 NeuronCores, the host has 2")
    return Report("host-1", "20261126T080000Z", "2026-11-26T08:00:00Z", 1.5, {"local": "grpc://127.0.0.1:8001"},
                  levels + [big])


def test_json_has_the_schema_the_fleet_reads(tmp_path):
    json_path, xml_path = write(report(), tmp_path / "reports")
    assert (json_path.name, xml_path.name) == ("20261126T080000Z.json", "20261126T080000Z.xml")
    doc = json.loads(json_path.read_text())
    assert doc["schema"] == 1 and doc["host"] == "host-1" and doc["stamp"] == "20261126T080000Z"
    assert doc["summary"] == {"cases": 5, "passed": 2, "failed": 1, "errors": 1, "skipped": 1}
    for row in doc["cases"]:
        assert ROW_KEYS <= set(row)
    failed = doc["cases"][1]
    assert failed["worst"] == {"output": "OUTPUT__1", "index": [2, 3], "abs": 7.0, "rel": 1.0}
    assert (failed["requests"], failed["p50_ms"], failed["throughput"]) == (36, 2.0, 1800.0)
    passed = doc["cases"][0]
    assert passed["throughput"] == 40 * 6 / 0.05 and passed["batch_size"] == 6
    assert doc["cases"][2]["requests"] == 0 and doc["cases"][2]["p99_ms"] is None
    assert not list((tmp_path / "reports").glob(".*"))  # no temporary files left
    # the agent's own publisher reads it
    assert "tritonfleet_qa_failures 1" in publish.textfile(doc, 0.0)


def test_junit_names_model_output_and_element_of_a_failure(tmp_path):
    _, xml_path = write(report(), tmp_path)
    root = ET.parse(xml_path).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "5" and root.get("failures") == "1"
    suites = root.findall("testsuite")
    assert [(s.get("name"), s.get("file"), s.get("tests")) for s in suites] == [
        ("add_sub", "qa/add_sub.yaml", "4"), ("big", "qa/big.yaml", "1")]
    cases = suites[0].findall("testcase")
    assert [c.get("name") for c in cases] == [
        "correct [concurrency=1, server=local]", "correct [concurrency=9, server=local]",
        "misaligned [concurrency=1, server=local]", "correct [concurrency=5, server=local]"]
    failure = cases[1].find("failure")
    assert failure.get("type") == "mismatch"
    for text in ("add_sub", "OUTPUT__1", "[2, 3]", "got 0", "expected -7"):
        assert text in failure.get("message")
    assert "model=add_sub output=OUTPUT__1 element=[2, 3] got=0 expected=-7" in failure.text
    assert cases[3].find("error").get("type") == "request-error"
    assert cases[0].find("failure") is None and "requests=40" in cases[0].find("system-out").text
    assert suites[1].find("testcase/skipped").get("message") == "needs 8 NeuronCores, the host has 2"


def test_summary_is_one_line_per_suite_plus_the_cases_that_did_not_pass():
    lines = summary_lines(report())
    assert lines[0].startswith("FAIL add_sub on local (qa/add_sub.yaml): 2/4 passed, 1 failed, 1 errors; 76 requests")
    assert lines[1].startswith("  FAILED correct at concurrency 9: add_sub: 2 of 36 responses differ")
    assert lines[2].startswith("  ERROR correct at concurrency 5:")
    assert lines[3] == "SKIP big on local (qa/big.yaml): 0/1 passed, 1 skipped (needs 8 NeuronCores, the host has 2)"
    assert lines[-1] == "5 checks: 2 passed, 1 failed, 1 errors, 1 skipped in 1.5 s"


def test_exit_code_is_zero_only_without_failures_and_errors():
    r = report()
    assert r.exit_code() == 1
    r.levels = [lv for lv in r.levels if lv.status in ("passed", "skipped")]
    assert r.exit_code() == 0
    r.levels.append(level("x", "error"))
    assert r.exit_code() == 1
