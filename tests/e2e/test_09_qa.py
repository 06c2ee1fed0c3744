"""QA on sandbox hosts, asserted from outside: `deploys/qa.py` over 3 hosts with the reports on the
controller, a host serving a deliberately wrong model failing with the model, output and element named,
and scheduled QA writing its report to the S3 bucket and the textfile metric."""

from __future__ import annotations

import json
import re
import uuid
import xml.etree.ElementTree as ET

import boto3
import pytest

from tests.e2e.helpers import pyinfra, ssh, write_inventory
from tritonfleet.sandbox import fleet

HOSTS = ["inf2", "trn1", "gpu"]
ADD_SUB = (fleet.SAMPLES / "add_sub/1/model.py").read_text()
WRONG = ADD_SUB.replace("(in0 + in1)", "(in0 + in1 + 100)")


def _s3():
    return boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                        aws_access_key_id="sandbox", aws_secret_access_key="sandbox")


def _seed(s3, prefix: str, model_py: str) -> str:
    s3.put_object(Bucket=fleet.S3_BUCKET, Key=f"{prefix}add_sub/config.pbtxt",
                  Body=(fleet.SAMPLES / "add_sub/config.pbtxt").read_bytes())
    s3.put_object(Bucket=fleet.S3_BUCKET, Key=f"{prefix}add_sub/1/model.py", Body=model_py.encode())
    return f"s3://{fleet.S3_BUCKET}/{prefix.rstrip('/')}"


@pytest.fixture(scope="module")
def fleet3(sandbox, tmp_path_factory):
    base = tmp_path_factory.mktemp("qa")
    reports = base / "reports"
    inv = write_inventory(base, HOSTS, extra={"qa_reports_dir": str(reports)})
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode == 0, run.output[-5000:]
    return base, reports, inv


def test_qa_on_three_hosts_passes_and_the_reports_land_on_the_controller(fleet3):
    base, reports, inv = fleet3
    run = pyinfra(inv, "deploys/qa.py")
    assert run.returncode == 0, run.output[-5000:]
    for host in HOSTS:
        (report,) = sorted((reports / host).glob("*.json"))
        data = json.loads(report.read_text())
        assert data["summary"]["failed"] == 0 and data["summary"]["errors"] == 0, data["summary"]
        assert data["summary"]["passed"] > 0 and all(c["requests"] > 0 for c in data["cases"]
                                                     if c["status"] == "passed")
        ET.parse(report.with_suffix(".xml"))  # JUnit XML beside it
    assert "add_sub" in run.output and "QA" in run.output  # the fleet table


def test_a_wrong_model_and_a_stopped_server_fail_the_gate_as_the_table_and_one_line(fleet3):
    """In one QA run: gpu serves a deliberately wrong model (failing with the model, output and element
    named), and trn1's Triton is stopped (issue 20 part 6, as found: that ended in a Python traceback under
    the fleet table). The run fails with the table and one line naming both hosts; inf2 still passes."""
    base, reports, _ = fleet3
    s3 = _s3()
    prefix = f"e2e-qa-wrong-{uuid.uuid4().hex[:8]}/"
    uri = _seed(s3, prefix, WRONG)
    # a stopped server fails its suites after qa_server_wait (60 s by default)
    inv = write_inventory(base, HOSTS, extra={"qa_reports_dir": str(reports), "qa_server_wait": 5},
                          per_host={"gpu": {"models_s3_uri": uri}})
    stopped: list[str] = []
    try:
        run = pyinfra(inv, "deploys/models.py")
        assert run.returncode == 0, run.output[-4000:]  # the wrong model loads fine: only QA can tell
        stopped = ssh("trn1", "docker ps -q --filter label=com.tritonfleet.role=triton").stdout.split()
        assert stopped
        ssh("trn1", "docker stop -t 5 " + " ".join(stopped))
        run = pyinfra(inv, "deploys/qa.py")
        assert run.returncode != 0
        assert "Traceback" not in run.output and "raise " not in run.output, run.output[-4000:]
        assert re.search(r"QA failed on gpu, trn1 \(reports under .*\)", run.output), run.output[-4000:]
        assert "inf2" in run.output  # the table has every host
        newest = sorted((reports / "gpu").glob("*.json"))[-1]
        failed = [c for c in json.loads(newest.read_text())["cases"] if c["status"] == "failed"]
        assert failed and failed[0]["model"] == "add_sub" and failed[0]["worst"]["output"] == "OUTPUT0"
        assert failed[0]["worst"]["index"] and failed[0]["worst"]["abs"] == pytest.approx(100)
        xml = newest.with_suffix(".xml").read_text()
        assert "add_sub" in xml and "OUTPUT0" in xml
        # the other host still passes in the same run
        assert json.loads(sorted((reports / "inf2").glob("*.json"))[-1].read_text())["summary"]["failed"] == 0
    finally:
        if stopped:
            ssh("trn1", "docker start " + " ".join(stopped))
        good = write_inventory(base, HOSTS, extra={"qa_reports_dir": str(reports)})
        assert pyinfra(good, "deploys/models.py").returncode == 0


def test_scheduled_qa_uploads_its_report_and_writes_the_textfile_metric(fleet3):
    base, _, _ = fleet3
    host = "inf2"
    inv = write_inventory(base, [host], extra={"qa_schedule": "*-*-* 03:00:00"})
    run = pyinfra(inv, "deploys/qa_schedule.py")
    assert run.returncode == 0, run.output[-4000:]
    assert ssh(host, "systemctl is-enabled tritonfleet-qa.timer").stdout.strip() == "enabled"
    s3 = _s3()
    before = {o["Key"] for o in s3.list_objects_v2(Bucket=fleet.S3_BUCKET, Prefix=f"qa-reports/qa/{host}/")
              .get("Contents", [])}
    ssh(host, "systemctl start tritonfleet-qa.service", timeout=600)
    after = {o["Key"] for o in s3.list_objects_v2(Bucket=fleet.S3_BUCKET, Prefix=f"qa-reports/qa/{host}/")
             .get("Contents", [])}
    new = sorted(after - before)
    assert [k.rsplit(".", 1)[-1] for k in new] == ["json", "xml"], new
    report = json.loads(s3.get_object(Bucket=fleet.S3_BUCKET, Key=new[0])["Body"].read())
    assert report["summary"]["failed"] == 0
    metrics = ssh(host, "cat /var/lib/prometheus/node-exporter/tritonfleet_qa.prom").stdout
    assert re.search(r"^tritonfleet_qa_failures 0$", metrics, re.M)
    assert re.search(r"^tritonfleet_qa_last_run_timestamp_seconds \d", metrics, re.M)

    run = pyinfra(inv, "deploys/qa_unschedule.py")
    assert run.returncode == 0, run.output[-4000:]
    assert ssh(host, "test -e /etc/systemd/system/tritonfleet-qa.timer", check=False).returncode == 1
    assert ssh(host, "test -e /var/lib/prometheus/node-exporter/tritonfleet_qa.prom", check=False).returncode == 1
