"""``tritonfleet-agent qa``: arguments, one-line errors, exit 2 before anything is sent, ``qa check``."""

from __future__ import annotations

import pytest

from tests.unit.test_qa_suites import GOOD_CASE, write
from tritonfleet.agent.cli import _qa_server, main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("text,expected", [
    ("local=grpc://127.0.0.1:8001", ("local", {"grpc": "grpc://127.0.0.1:8001"})),
    ("a=grpc://h:8001,http://h:8000", ("a", {"grpc": "grpc://h:8001", "http": "http://h:8000"})),
    ("v6=grpc://[::1]:8001", ("v6", {"grpc": "grpc://[::1]:8001"})),
    ("tls=grpcs://h:443,https://h:8443", ("tls", {"grpc": "grpcs://h:443", "http": "https://h:8443"})),
])
def test_server_arguments(text, expected):
    assert _qa_server(text) == expected


@pytest.mark.parametrize("text", ["local", "local=127.0.0.1:8001", "local=grpc://h", "local=ftp://h:21",
                                  "l=grpc://h:1,grpc://h:2", "l=http://u:p@h:8000", "l=http://h:8000/v2",
                                  "bad name=grpc://h:1", "l=grpc://h:99999"])
def test_bad_server_arguments(text):
    with pytest.raises(Exception, match="expected NAME=grpc://HOST:PORT"):
        _qa_server(text)


@pytest.mark.parametrize("argv,message", [
    (["qa", "run", "--server", "l=grpc://h:1", "--out", "o"], "give --suites DIR and/or --selftest"),
    (["qa", "run", "--selftest", "--out", "o"], "the following arguments are required: --server"),
    (["qa", "run", "--selftest", "--server", "l=grpc://h:1"], "the following arguments are required: --out"),
    (["qa", "run", "--selftest", "--server", "l=grpc://h:1", "--protocol", "http", "--out", "o"],
     "--protocol http: server l has no http URL"),
    (["qa", "run", "--selftest", "--server", "l=grpc://h:1", "--server", "l=grpc://h:2", "--out", "o"],
     "--server l given twice"),
    (["qa", "run", "--selftest", "--server", "l=grpc://h:1", "--out", "o", "--stamp", "../x"],
     "not a file-name-safe stamp"),
    (["qa", "run", "--selftest", "--server", "l=grpc://h:1", "--out", "o", "--timeout", "0"], "not within 0 to 3600"),
    (["qa", "check", "--suites", "q", "--neuron-cores", "-1"], "-1 is not within 0 to 1024"),
    (["qa"], "the following arguments are required: COMMAND"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_out_must_be_a_directory(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run(capsys, "qa", "run", "--selftest", "--server", "l=grpc://h:1", "--out", str(tmp_path / "file"))
    assert code == 2 and "not a directory" in err


def test_header_file_must_be_private(capsys, tmp_path):
    header = tmp_path / "h"
    header.write_text("x-api-key: secret\n")
    header.chmod(0o644)
    code, _, err = run(capsys, "qa", "check", "--selftest", "--header-file", str(header))
    assert code == 2 and "readable by others" in err and "secret" not in err


def test_check_accepts_good_suites_and_the_built_in_self_test(capsys, tmp_path):
    write(tmp_path, "cases:" + GOOD_CASE)
    code, out, err = run(capsys, "qa", "check", "--suites", str(tmp_path / "qa"), "--selftest")
    assert (code, err) == (0, "") and out == "ok: 9 suites, 25 cases\n"


def test_check_reports_every_bad_suite_one_line_each(capsys, tmp_path):
    write(tmp_path, "cases:" + GOOD_CASE, name="good.yaml")
    write(tmp_path, "cases:" + GOOD_CASE + "    compare: fuzzy\n", name="bad.yaml")
    write(tmp_path, "cases:" + GOOD_CASE + "    concurrency: [0]\n", name="worse.yaml")
    code, out, err = run(capsys, "qa", "check", "--suites", str(tmp_path / "qa"))
    qa = tmp_path / "qa"
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"tritonfleet-agent: error: {qa}/bad.yaml: cases[0].compare: unknown comparison 'fuzzy' "
        "(use exact, {atol: X, rtol: Y} or {topk: K})",
        f"tritonfleet-agent: error: {qa}/worse.yaml: cases[0].concurrency[0]: Input should be greater than or equal "
        "to 1"]


def test_run_with_a_bad_suite_sends_nothing_and_writes_no_report(capsys, tmp_path):
    write(tmp_path, "cases: 3\n")
    out_dir = tmp_path / "reports"
    code, out, err = run(capsys, "qa", "run", "--suites", str(tmp_path / "qa"), "--server", "l=grpc://127.0.0.1:9",
                         "--out", str(out_dir))
    assert code == 2 and out == "" and "add_sub.yaml: cases: Input should be a valid list" in err
    assert not out_dir.exists()


def test_an_unreachable_server_is_an_error_in_the_report(capsys, tmp_path):
    write(tmp_path, "cases:" + GOOD_CASE)
    code, out, err = run(capsys, "qa", "run", "--suites", str(tmp_path / "qa"), "--server", "l=grpc://127.0.0.1:9",
                         "--out", str(tmp_path / "r"), "--stamp", "s1", "--wait", "0.3", "--timeout", "1")
    assert code == 1
    assert out.splitlines()[0].startswith("FAIL add_sub on l (")
    assert "server l (grpc://127.0.0.1:9) is not ready after 0.3 s" in out
    assert (tmp_path / "r" / "s1.json").is_file() and (tmp_path / "r" / "s1.xml").is_file()


def test_neuron_cores_skip_big_self_test_configurations(capsys, tmp_path):
    code, out, err = run(capsys, "qa", "run", "--selftest", "--neuron-cores", "2", "--server", "l=grpc://127.0.0.1:9",
                         "--out", str(tmp_path), "--wait", "0.2", "--timeout", "1")
    skipped = [line for line in out.splitlines() if line.startswith("SKIP")]
    assert len(skipped) == 4 and all("needs 8 NeuronCores, the host has 2" in line for line in skipped)
    assert code == 1  # the other four could not reach the server


def test_a_protocol_this_host_cannot_speak_is_a_bad_argument(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tritonclient.http", None)  # as on a gRPC-only host
    write(tmp_path, "cases:" + GOOD_CASE)
    code, out, err = run(capsys, "qa", "run", "--suites", str(tmp_path / "qa"), "--server",
                         "l=grpc://127.0.0.1:9,http://127.0.0.1:9", "--protocol", "http", "--out", str(tmp_path / "r"))
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith("tritonfleet-agent: error: --server l: http: this host's tritonclient has no http support")
    assert not (tmp_path / "r").exists()


def test_publish_writes_the_textfile_of_a_report(capsys, tmp_path):
    report = tmp_path / "s.json"
    report.write_text('{"schema": 1, "summary": {"cases": 3, "passed": 2, "failed": 1, "errors": 0}}')
    code, out, err = run(capsys, "qa", "publish", "--report", str(report), "--textfile", str(tmp_path / "m" / "q.prom"))
    assert (code, err) == (0, "") and out == f"metrics in {tmp_path}/m/q.prom\n"
    assert "tritonfleet_qa_failures 1\n" in (tmp_path / "m" / "q.prom").read_text()
    code, out, err = run(capsys, "qa", "publish", "--report", str(tmp_path / "none.json"))
    assert code == 1 and err.startswith("tritonfleet-agent: error: cannot read the report")
