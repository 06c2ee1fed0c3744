"""``tritonfleet-agent qa publish``: what a scheduled QA run leaves for others: its reports in S3 and a
Prometheus textfile (for node_exporter's textfile collector).

    tritonfleet-agent qa publish --report /var/lib/tritonfleet/qa/reports/<stamp>.json \\
        [--s3 s3://bucket/prefix/qa/<host>] [--endpoint-url URL] [--region R] [--textfile FILE]

The report's ``.xml`` twin is uploaded beside it when it exists. The textfile is written under a
temporary name and renamed (node_exporter never reads half a file)::

    tritonfleet_qa_last_run_timestamp_seconds 1.7646e+09
    tritonfleet_qa_cases 24
    tritonfleet_qa_failures 0
    tritonfleet_qa_errors 0

Credentials: boto3's default chain (the instance profile); none are taken as options or printed.
"""

from __future__ import annotations

import json
import os

from .sync import describe, parse_source

METRICS = (
    ("tritonfleet_qa_last_run_timestamp_seconds", "Unix time the last QA run finished.", "finished"),
    ("tritonfleet_qa_cases", "QA cases in the last run.", "cases"),
    ("tritonfleet_qa_failures", "QA cases that failed in the last run (0: all passed).", "failed"),
    ("tritonfleet_qa_errors", "QA cases that could not run in the last run (bad data, server errors).", "errors"),
)


def _number(value: float) -> str:
    """Exposition text of a sample: whole numbers as integers, others with every digit (``%g`` would turn a
    Unix timestamp into 1.7646e+09, thousands of seconds off)."""
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def textfile(report: dict, finished: float) -> str:
    """The Prometheus exposition text for one report."""
    summary = dict(report.get("summary") or {})
    values = {"finished": finished, **{k: summary.get(k, 0) for k in ("cases", "failed", "errors")}}
    lines = []
    for name, help_text, key in METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {_number(values[key])}"]
    return "\n".join(lines) + "\n"


def write_textfile(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def upload(paths: list[str], s3_uri: str, endpoint_url: str | None, region: str | None) -> list[str]:
    """Upload each file to ``s3_uri/<name>``; the keys written. The client (:func:`.aws.client`): botocore's
    standard retries with its own count of attempts, 10 s to connect, 60 s to answer."""
    from .aws import client as aws_client

    bucket, prefix = parse_source(s3_uri)
    client = aws_client("s3", region=region, endpoint_url=endpoint_url, connect_timeout=10, read_timeout=60,
                        attempts=None)
    keys = []
    for path in paths:
        key = prefix + os.path.basename(path)
        client.upload_file(path, bucket, key)
        keys.append(f"s3://{bucket}/{key}")
    return keys


def publish(report_path: str, s3_uri: str | None, endpoint_url: str | None, region: str | None,
            textfile_path: str | None) -> tuple[int, str]:
    """(exit code, one line): 0 published, 1 something failed (the textfile is written first)."""
    try:
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
        finished = os.stat(report_path).st_mtime
    except (OSError, ValueError) as exc:
        return 1, f"cannot read the report {report_path}: {exc}"
    done = []
    if textfile_path:
        try:
            write_textfile(textfile_path, textfile(report, finished))
        except OSError as exc:
            return 1, f"cannot write {textfile_path}: {exc}"
        done.append(f"metrics in {textfile_path}")
    if s3_uri:
        xml = os.path.splitext(report_path)[0] + ".xml"
        try:
            keys = upload([report_path] + ([xml] if os.path.exists(xml) else []), s3_uri, endpoint_url, region)
        except Exception as exc:  # one line, whatever boto3 raised
            return 1, f"upload to {s3_uri} failed: {describe(exc)}"
        done.append(f"uploaded {', '.join(keys)}")
    return 0, "; ".join(done) or "nothing to publish (no --s3, no --textfile)"
