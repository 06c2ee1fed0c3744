"""`tritonfleet-agent qa publish`: the textfile for node_exporter and the upload of a report pair to S3
(moto on loopback, fake keys only)."""

from __future__ import annotations

import json
import re

import boto3
import pytest

from tests.unit.test_agent_sync import endpoint  # noqa: F401 (fixture: moto server + fake keys)
from tritonfleet.agent import publish

REPORT = {"schema": 1, "host": "h1", "summary": {"cases": 7, "passed": 5, "failed": 2, "errors": 0, "skipped": 0},
          "cases": []}


def test_textfile_is_valid_exposition_with_the_counts():
    text = publish.textfile(REPORT, 1764000000.5)
    samples = dict(line.split(" ") for line in text.splitlines() if not line.startswith("#"))
    assert samples == {"tritonfleet_qa_last_run_timestamp_seconds": "1764000000.5", "tritonfleet_qa_cases": "7",
                       "tritonfleet_qa_failures": "2", "tritonfleet_qa_errors": "0"}
    for name in samples:
        assert f"# TYPE {name} gauge" in text and re.search(rf"# HELP {name} \S", text)


def test_publish_writes_the_textfile_and_uploads_both_reports(endpoint, tmp_path):  # noqa: F811
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="qa-reports")
    report = tmp_path / "20261126T080000Z.json"
    report.write_text(json.dumps(REPORT))
    (tmp_path / "20261126T080000Z.xml").write_text("<testsuites/>")
    prom = tmp_path / "textfile" / "tritonfleet_qa.prom"
    code, line = publish.publish(str(report), "s3://qa-reports/fleet/qa/h1", endpoint, "us-east-1", str(prom))
    assert code == 0, line
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="qa-reports")["Contents"])
    assert keys == ["fleet/qa/h1/20261126T080000Z.json", "fleet/qa/h1/20261126T080000Z.xml"]
    assert "tritonfleet_qa_failures 2" in prom.read_text() and oct(prom.stat().st_mode & 0o777) == "0o644"
    assert not list(prom.parent.glob("*.tmp"))


@pytest.mark.parametrize("uri,problem", [("s3://no-such-bucket/x", "NoSuchBucket"), (None, None)])
def test_a_failed_upload_is_one_line_and_the_textfile_is_still_written(endpoint, tmp_path, uri, problem):  # noqa: F811
    report = tmp_path / "r.json"
    report.write_text(json.dumps(REPORT))
    prom = tmp_path / "m.prom"
    code, line = publish.publish(str(report), uri, endpoint, "us-east-1", str(prom))
    assert prom.exists()
    if problem:
        assert code == 1 and problem in line and "\n" not in line
    else:
        assert code == 0 and "metrics in" in line


def test_an_unreadable_report_publishes_nothing(tmp_path):
    code, line = publish.publish(str(tmp_path / "missing.json"), None, None, None, str(tmp_path / "m.prom"))
    assert code == 1 and "cannot read the report" in line and not (tmp_path / "m.prom").exists()
