"""@fake runs of the models role with S3: the agent installed from the wheelhouse, the header file written
from stdin, the sync command with its servers, Triton pointed at /models/current (or at S3 itself), and
the preflight checks of the host Python and of data that would be ignored."""

from __future__ import annotations

import pytest

from roles.agent import agent
from roles.models import models
from roles.preflight import PreflightError
from tests.fake.fakehost import PLATFORMS, run_deploys
from tests.fake.test_roles import DATA, SECRET, SERVE_DEPLOY
from tritonfleet import wheelhouse

S3 = {**DATA, "instance_type": "inf2.xlarge", "models_s3_uri": "s3://models-bucket/prod",
      "models_s3_region": "eu-west-1"}
AGENT_PYTHON = "sys.version_info"  # what the AgentState fact's command contains


@pytest.fixture(autouse=True)
def small_wheelhouse(monkeypatch, tmp_path):
    """A stand-in for the controller's wheelhouse (the real build is tested in tests/unit/test_wheelhouse)."""
    (tmp_path / "tritonfleet_agent-0.1.0+t-py3-none-any.whl").write_bytes(b"wheel")
    built = wheelhouse.Wheelhouse(tmp_path, "d" * 64, "0.1.0+t")
    asked: list = []  # what each build was asked for: None (pure wheels) or (host Python, machine)
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: asked.append(qa_for) or built)
    return asked


def sync_lines(rec) -> list[str]:
    return [c for c in rec.commands if "tritonfleet-agent sync" in c and "--dry-run" not in c]


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_serve_with_s3_installs_the_agent_syncs_and_points_triton_at_current(monkeypatch, os_key, small_wheelhouse):
    rec = run_deploys(SERVE_DEPLOY, S3, os_key, monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    assert "/opt/tritonfleet/wheelhouse/tritonfleet_agent-0.1.0+t-py3-none-any.whl" in rec.uploads
    # live reloads go over gRPC: the agent's live extra, from a wheelhouse for the host's Python and machine
    assert set(small_wheelhouse) == {("3.11", "x86_64")}
    install = [c for c in rec.commands if "agent-install.sh" in c]
    assert len(install) == 1 and install[0].endswith(f"python3 /opt/tritonfleet/venv /opt/tritonfleet/wheelhouse "
                                                       f"{'d' * 64} 'tritonfleet-agent[live]==0.1.0+t'")
    (sync,) = sync_lines(rec)
    assert sync == ("/opt/tritonfleet/venv/bin/tritonfleet-agent sync --source s3://models-bucket/prod --dest "
                    "/opt/tritonfleet/models --concurrency 16 --keep 3 --timeout 180 --connect-timeout 5 "
                    "--read-timeout 30 --deadline 1800 --lock-wait 60 --region eu-west-1 "
                    "--server triton=grpc://127.0.0.1:8001 --header-file /etc/tritonfleet/repository-header "
                    # the memory check before the switch: inf2.xlarge's one device of 32 GiB, 10% kept free
                    "--host-name @fake/h1 --accelerator neuron --memory-headroom 10 --server-capacity triton=1x32768")
    header = [c for c in rec.commands if "secret-file.sh" in c]
    assert len(header) == 1 and header[0].endswith("/etc/tritonfleet/repository-header")
    assert not any(SECRET in c and "tritonserver" not in c for c in rec.commands)  # stdin only
    (run,) = [c for c in rec.commands if "triton-swap.sh" in c]
    assert "--model-repository=/models/current" in run and "/opt/tritonfleet/models:/models:ro" in run
    assert not any("triton-models.sh" in c for c in rec.commands)  # the agent loads models, not the gate


def test_an_installed_agent_is_not_reinstalled_or_uploaded_again(monkeypatch):
    rec = run_deploys([agent, models], S3, "debian12", monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "d" * 64]})
    assert not rec.uploads and not any("agent-install.sh" in c for c in rec.commands)


def test_a_non_default_imds_reaches_the_agent_and_poll_mode_names_no_server(monkeypatch, small_wheelhouse):
    data = {**S3, "imds_endpoint": "http://10.0.0.1:8081", "triton_model_control_mode": "poll"}
    rec = run_deploys([agent, models], data, "debian12", monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    assert set(small_wheelhouse) == {None}  # no reloads: pure wheels, no extra
    assert any(c.endswith(f"{'d' * 64} tritonfleet-agent==0.1.0+t") for c in rec.commands if "agent-install.sh" in c)
    (sync,) = sync_lines(rec)
    assert sync.startswith("/usr/bin/env AWS_EC2_METADATA_SERVICE_ENDPOINT=http://10.0.0.1:8081 /opt/tritonfleet/venv/")
    assert "--server" not in sync.split() and "--header-file" not in sync  # (--server-capacity: the memory check)
    assert not any("secret-file.sh" in c for c in rec.commands)


@pytest.mark.parametrize("version,shown", [("3.8", "python3 is 3.8"), ("3.13", "python3 is 3.13"),
                                           (None, "there is no python3")])
def test_a_host_python_the_agent_cannot_run_on_is_a_preflight_error(monkeypatch, version, shown):
    answer = [version or "none", "x86_64", "none"]
    with pytest.raises(PreflightError, match=rf"@fake/h1: agent_python 'python3': the host agent needs Python "
                                             rf"3.9 to 3.12 on the host, and {shown}"):
        run_deploys([agent, models], S3, "al2023", monkeypatch, responses={AGENT_PYTHON: answer})


def test_direct_mode_gives_triton_the_s3_url_and_keeps_nothing_on_disk(monkeypatch):
    data = {**S3, "models_s3_direct": True, "models_s3_endpoint": "https://s3.eu-west-1.amazonaws.com"}
    rec = run_deploys(SERVE_DEPLOY, data, "ubuntu2404", monkeypatch)
    (run,) = [c for c in rec.commands if "triton-swap.sh" in c]
    assert "--model-repository=s3://https://s3.eu-west-1.amazonaws.com/models-bucket/prod" in run
    assert "AWS_DEFAULT_REGION=eu-west-1" in run and ":/models:ro" not in run
    assert not sync_lines(rec) and not any("agent-install.sh" in c for c in rec.commands)


@pytest.mark.parametrize("extra,message", [
    ({"models_source": "/"}, "models_source '/': set models_source or models_s3_uri, not both"),
    ({"models_s3_uri": None}, "models_s3_region 'eu-west-1': has no effect without models_s3_uri"),
    ({"models_s3_uri": None, "models_s3_region": None, "models_s3_direct": True},
     "models_s3_direct True: has no effect without models_s3_uri"),
    ({"models_s3_keep": 1}, "models_s3_keep 1: "),
    ({"models_s3_uri": "s3://Bad_Bucket/x"}, "models_s3_uri 's3://Bad_Bucket/x': expected s3://bucket/prefix"),
])
def test_data_that_would_be_ignored_or_is_wrong_is_refused(monkeypatch, extra, message):
    with pytest.raises(PreflightError, match=message.replace("(", r"\(")):
        run_deploys(models, {**S3, **extra}, "debian12", monkeypatch)


def _plan(**fields) -> str:
    """What the agent's dry run prints: the current version with nothing new in S3, plus ``fields``."""
    import json

    return json.dumps({"status": "dry-run", "version": "000002-20261126T000000Z", "unchanged": 5,
                       "files": {"added": [], "changed": [], "removed": []}, "reload": {"pending": False},
                       **fields})


def test_a_plan_that_finds_damaged_files_runs_the_sync_and_says_what_it_repairs(monkeypatch, caplog):
    installed = {AGENT_PYTHON: ["3.11", "x86_64", "d" * 64]}
    quiet = run_deploys([agent, models], S3, "debian12", monkeypatch, responses={**installed, "--dry-run": [_plan()]})
    assert sync_lines(quiet) == []  # nothing new in S3, nothing damaged: no sync
    damaged = {"--dry-run": [_plan(damaged={"m/1/model.bin": "missing"})]}
    with caplog.at_level("WARNING"):
        rec = run_deploys([agent, models], S3, "debian12", monkeypatch, responses={**installed, **damaged})
    assert len(sync_lines(rec)) == 1
    assert "@fake/h1: model repository 000002-20261126T000000Z: 1 damaged file, repaired from S3 by this run: " \
           "m/1/model.bin (missing)" in caplog.text


def test_verify_runs_the_agents_verify_and_a_schedule_installs_its_timer(monkeypatch):
    data = {**S3, "models_s3_verify": True, "models_s3_verify_schedule": "Sun *-*-* 03:00:00"}
    rec = run_deploys([agent, models], data, "debian12", monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    assert [c for c in rec.commands if "tritonfleet-agent verify --source s3://models-bucket/prod" in c
            and "--dry-run" not in c]
    service = rec.uploads["/etc/systemd/system/tritonfleet-models-verify.service"]
    (exec_start,) = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.startswith("ExecStart=/opt/tritonfleet/venv/bin/tritonfleet-agent verify --source "
                                 "s3://models-bucket/prod --dest /opt/tritonfleet/models ")
    assert "OnCalendar=Sun *-*-* 03:00:00" in rec.uploads["/etc/systemd/system/tritonfleet-models-verify.timer"]
    assert any("systemctl start tritonfleet-models-verify.timer" in c for c in rec.commands)


def test_no_schedule_stops_and_removes_a_verify_timer(monkeypatch):
    rec = run_deploys([agent, models], S3, "debian12", monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    assert not any(p.endswith("tritonfleet-models-verify.service") for p in rec.uploads)


@pytest.mark.parametrize("value", ["weekly; rm -rf /", "$(reboot)", "x" * 101])
def test_a_verify_schedule_that_is_no_calendar_is_refused_in_preflight(monkeypatch, value):
    with pytest.raises(PreflightError, match=r"@fake/h1: models_s3_verify_schedule .*expected a systemd calendar"):
        run_deploys([agent, models], {**S3, "models_s3_verify_schedule": value}, "debian12", monkeypatch,
                    responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
