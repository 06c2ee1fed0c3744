"""No command ends with a Python traceback on an expected failure (issue 20, part 6, as a class): every
command of `tritonfleet` and of `tritonfleet-agent`, and every deploy, run as a user runs them, on their
documented failure paths (bad input, missing files, nothing listening). Each must exit non-zero with a
short error, never a traceback. (QA against a stopped server, the case as found, is in
tests/e2e/test_09_qa.py; the deploys' bad-data path runs here on an @fake host.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TF = [str(BIN / "tritonfleet")]
AGENT = [sys.executable, "-m", "tritonfleet.agent"]
DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port
OFFLINE = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
           "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": DEAD, "AWS_MAX_ATTEMPTS": "1"}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("fail")
    (d / "a-file").write_text("x")
    (d / "empty").mkdir()
    (d / "inventory.py").write_text("hosts = [('@local', {'instance_type': 'nope.large'})]\n")
    (d / "broken_inventory.py").write_text("hosts = [\n")
    (d / "inf2_inventory.py").write_text("hosts = [('inf2-1', {'instance_type': 'inf2.xlarge', "
                                         "'neuron_key_fingerprint': 'A' * 40, 'triton_repository_secret': 's' * 24})]\n")
    (d / "big" / "huge" / "1").mkdir(parents=True)  # a model that needs more than inf2.xlarge's device holds
    (d / "big" / "huge" / "config.pbtxt").write_text(
        'parameters { key: "tritonfleet_memory_mib" value: { string_value: "40000" } }\n')
    (d / "not_yaml.yaml").write_text("models: [\n")
    return d


def cases(d: Path) -> list[tuple[str, list[str]]]:
    inv = str(d / "inventory.py")
    return [
        ("status: no such inventory", [*TF, "status", "-i", str(d / "missing.py")]),
        ("status: an inventory that does not parse", [*TF, "status", "-i", str(d / "broken_inventory.py")]),
        ("status: bad host data", [*TF, "status", "-i", inv]),
        ("rollout: no such deploy", [*TF, "rollout", "-i", inv, "--deploy", str(d / "missing.py"), "--reports",
                                     str(d / "reports")]),
        ("rollout: bad host data", [*TF, "rollout", "-i", inv, "--reports", str(d / "reports")]),
        ("qa table: no reports", [*TF, "qa", "table", "--reports", str(d / "empty")]),
        ("monitoring targets: bad host data", [*TF, "monitoring", "targets", "-i", inv, "--out", str(d / "t")]),
        ("fleet list: AWS not reachable", [*TF, "fleet", "list", "--region", "us-east-1"]),
        ("fleet down: AWS not reachable", [*TF, "fleet", "down", "--fleet", "f1", "--region", "us-east-1", "--yes"]),
        ("gen-model: no such compiled model", [*TF, "gen-model", "--model_type", "pytorch", "--compiled_model",
                                              str(d / "missing.pt"), "--triton_input", "x,FP32,1",
                                              "--triton_output", "y,FP32,1", "--triton_model_dir", str(d / "gm")]),
        ("plan: no such inventory", [*TF, "plan", "-i", str(d / "missing.py")]),
        ("plan: bad host data", [*TF, "plan", "-i", inv]),
        ("plan: no such model repository", [*TF, "plan", "-i", str(d / "inf2_inventory.py"), "--models",
                                            str(d / "missing")]),
        ("plan: models that do not fit", [*TF, "plan", "-i", str(d / "inf2_inventory.py"), "--models", str(d / "big")]),
        ("plan: headroom out of range", [*TF, "plan", "-i", str(d / "inf2_inventory.py"), "--headroom", "100"]),
        ("plan --pack: no such models file", [*TF, "plan", "-i", str(d / "inf2_inventory.py"), "--pack",
                                              str(d / "missing.yaml")]),
        ("plan --pack: models file not YAML", [*TF, "plan", "-i", str(d / "inf2_inventory.py"), "--pack",
                                               str(d / "not_yaml.yaml")]),
        ("compat: no such inventory", [*TF, "compat", "-i", str(d / "missing.py")]),
        ("compat: bad host data", [*TF, "compat", "-i", inv]),
        ("compat: no such model repository", [*TF, "compat", "-i", str(d / "inf2_inventory.py"), "--models",
                                              str(d / "missing")]),
        ("agent sync: bad server capacity", [*AGENT, "sync", "--source", "s3://bucket/p", "--dest", str(d / "r4"),
                                             "--server-capacity", "triton=0x32768"]),
        ("agent sync: dest is a file", [*AGENT, "sync", "--source", "s3://bucket/p", "--dest", str(d / "a-file")]),
        ("agent sync: S3 not reachable", [*AGENT, "sync", "--source", "s3://bucket/p", "--dest", str(d / "r1"),
                                          "--endpoint-url", DEAD]),
        ("agent verify: S3 not reachable", [*AGENT, "verify", "--source", "s3://bucket/p", "--dest", str(d / "r2"),
                                            "--endpoint-url", DEAD]),
        ("agent switch: no such version", [*AGENT, "switch", "--dest", str(d / "r3"), "--to", "000001-20260101T000000Z"]),
        ("agent qa run: no such suites", [*AGENT, "qa", "run", "--suites", str(d / "missing"), "--server",
                                          "s=grpc://127.0.0.1:9", "--out", str(d)]),
        ("agent qa publish: no such report", [*AGENT, "qa", "publish", "--report", str(d / "missing.json")]),
    ]


def _ids(d=Path("/d")):
    return [name for name, _ in cases(d)]


@pytest.mark.parametrize("name", _ids())
def test_a_command_fails_in_a_few_lines_without_a_traceback(work, name):
    (cmd,) = [c for n, c in cases(work) if n == name]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **OFFLINE,
           "PYTHONPATH": str(ROOT), "TERM": "dumb", "COLUMNS": "200"}
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=120)  # writes nothing here
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, -9), f"{name}: exit {proc.returncode}\n{out[-2000:]}"
    assert "Traceback" not in out, f"{name}:\n{out[-3000:]}"
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    # a short error on stderr (status prints its table, the error in the host's row, and nothing there)
    assert len(errors) <= 3 and (errors or proc.stdout.strip()), f"{name}: stderr:\n{proc.stderr[-2000:]}"


DEPLOYS = sorted(p.name for p in (ROOT / "deploys").glob("*.py"))


@pytest.mark.parametrize("deploy", DEPLOYS)
def test_a_deploy_with_bad_host_data_fails_in_one_line_without_a_traceback(work, deploy):
    """pyinfra's own command line on an @fake host whose data is wrong: preflight's one line."""
    inv = work / "fake_inventory.py"
    inv.write_text("hosts = [('@fake/h1', {'instance_type': 'inf2.xlarge', 'docker_ulimit_stack': 0})]\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYINFRA_PROGRESS": "off"}
    proc = subprocess.run([str(BIN / "pyinfra"), "-y", str(inv), str(ROOT / "deploys" / deploy)], cwd=work,
                          capture_output=True, text=True, env=env, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "Traceback" not in out, f"{deploy}:\n{out[-3000:]}"
    assert "@fake/h1: docker_ulimit_stack 0: expected -1 (unlimited) or a positive limit" in out, out[-2000:]
