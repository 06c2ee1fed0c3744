"""@fake runs of the models role with S3: the agent installed from the wheelhouse, the header file written
from stdin, the sync command with its servers, Triton pointed at /models/current (or at S3 itself), and
the preflight checks of the host Python and of data that would be ignored."""

from __future__ import annotations

import hashlib
import json
import re
import shlex

import pytest

from roles.agent import agent
from roles.models import compat_text, models
from roles.preflight import PreflightError
from tests.fake.fakehost import PLATFORMS, run_deploys
from tests.fake.test_roles import DATA, SECRET, SERVE_DEPLOY
from tests.hostconfigs import host_config
from tritonfleet import wheelhouse
from tritonfleet.compat import model_limits

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


LIMITS = "/etc/tritonfleet/model-compat.json"


def limits_written(cfg) -> dict:
    """The FileDigests answer of a host whose limits file already holds what the role would write."""
    digest = hashlib.sha256(compat_text(cfg).encode()).hexdigest()
    return {re.compile(rf"^for f in {re.escape(LIMITS)};"): [f"{digest} 644 {LIMITS}"]}


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
                    "--host-name @fake/h1 --accelerator neuron --memory-headroom 10 --server-capacity triton=1x32768 "
                    # the model check before the switch: what the image's Neuron runtime loads
                    "--compat /etc/tritonfleet/model-compat.json")
    assert json.loads(rec.uploads["/etc/tritonfleet/model-compat.json"]) == model_limits("2.34.10.0", "inf2")
    header = [c for c in rec.commands if "secret-file.sh" in c]
    assert len(header) == 1 and header[0].endswith("/etc/tritonfleet/repository-header")
    assert not any(SECRET in c and "tritonserver" not in c for c in rec.commands)  # stdin only
    (run,) = [c for c in rec.commands if "triton-swap.sh" in c]
    assert "--model-repository=/models/current" in run and "/opt/tritonfleet/models:/models:ro" in run
    assert not any("triton-models.sh" in c for c in rec.commands)  # the agent loads models, not the gate


def test_an_installed_agent_is_not_reinstalled_or_uploaded_again(monkeypatch):
    rec = run_deploys([agent, models], S3, "debian12", monkeypatch, responses={
        AGENT_PYTHON: ["3.11", "x86_64", "d" * 64], **limits_written(host_config(S3))})
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


# --- pull mode (models_pull): the resident agent, after a run synced to the pointed release ---------------------

PULL = {**S3, "models_pull": True, "models_pull_group": "canary", "models_pull_interval": 1.5}


def test_pull_mode_syncs_to_the_pointed_release_once_then_runs_the_service(monkeypatch):
    rec = run_deploys([agent, models], PULL, "debian12", monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    (once,) = [c for c in rec.commands if "tritonfleet-agent pull " in c and "--dry-run" not in c]
    assert shlex.split(once)[-1] == "--once" and "--source s3://models-bucket/prod " in once
    assert "--group canary" in once and "--interval 1.5 --max-backoff 300" in once
    assert "--state /var/lib/tritonfleet/models-pull.json" in once
    unit = rec.uploads["/etc/systemd/system/tritonfleet-models-pull.service"]
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert argv[:2] == ["/opt/tritonfleet/venv/bin/tritonfleet-agent", "pull"] and "--once" not in argv
    assert argv[argv.index("--group") + 1] == "canary" and "--server" in argv
    assert "ReadWritePaths=/opt/tritonfleet/models /var/lib/prometheus/node-exporter" in unit
    assert "Restart=always" in unit and "--privileged" not in unit
    started = [c for c in rec.commands if "tritonfleet-models-pull.service" in c and "systemctl" in c]
    assert any("systemctl start tritonfleet-models-pull.service" in c for c in started)
    assert sync_lines(rec) == []  # no push sync of the release root


def test_pull_off_stops_and_removes_a_pull_service_and_its_state(monkeypatch):
    unit = "/etc/systemd/system/tritonfleet-models-pull.service"
    present = {re.compile(r"^for f in .*tritonfleet-models-pull\.service"): [f"{'a' * 64} 644 {unit}",
                                                                             f"{'b' * 64} 644 /var/lib/tritonfleet/models-pull.json"],
               re.compile(r"^systemctl show .*tritonfleet-models-pull\.service"): [
                   "Id=tritonfleet-models-pull.service", "ActiveState=active", "UnitFileState=enabled",
                   "LoadState=loaded"]}
    rec = run_deploys([agent, models], S3, "debian12", monkeypatch,
                      responses={AGENT_PYTHON: ["3.11", "x86_64", "none"], **present})
    assert any("systemctl stop tritonfleet-models-pull.service" in c for c in rec.commands)
    (rm,) = [c for c in rec.commands if c.startswith("rm -f ")]
    assert unit in rm and "/var/lib/tritonfleet/models-pull.json" in rm


@pytest.mark.parametrize("data,field,words", [
    ({**S3, "models_pull": True, "models_s3_direct": True}, "models_pull", "not both"),
    ({**S3, "models_pull_group": "canary"}, "models_pull_group", "without models_pull"),
    ({**S3, "models_pull": True, "models_pull_group": "Canary Hosts"}, "models_pull_group", "expected a group name"),
    ({**S3, "models_pull": True, "models_s3_verify_schedule": "weekly"}, "models_s3_verify_schedule", "not in pull mode"),
    ({**S3, "models_pull": True, "models_pull_interval": 0}, "models_pull_interval", "greater than or equal"),
    ({**DATA, "instance_type": "inf2.xlarge", "models_pull": True}, "models_pull", "without models_s3_uri"),
])
def test_pull_mode_data_that_cannot_work_is_refused_in_preflight(monkeypatch, data, field, words):
    with pytest.raises(PreflightError, match=rf"@fake/h1: {field}\b.*{words}"):
        run_deploys([agent, models], data, "debian12", monkeypatch, responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})


# --- the model check: what the image's Neuron runtime loads, checked by the agent before it switches -----------


@pytest.mark.parametrize("data,runtime,arch", [
    ({}, "2.34.10.0", "inf2"),  # the default Neuron SDK release's runtime
    ({"instance_type": "trn1.2xlarge", "neuron_sdk_release": "2.31.0"}, "2.33", "trn1"),
    ({"triton_neuron_runtime_version": "2.33.10.0"}, "2.33.10.0", "inf2"),  # the image's runtime, declared
    ({"instance_type": "inf1.xlarge"}, None, "inf1"),  # the runtime is inside the framework: unknown
])
def test_a_neuron_host_gets_the_limits_of_its_image_and_the_agent_checks_against_them(monkeypatch, data, runtime,
                                                                                        arch):
    data = {**S3, **data, "models_s3_verify_schedule": "weekly"}
    rec = run_deploys([agent, models], data, "debian12", monkeypatch,
                      responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    written = json.loads(rec.uploads[LIMITS])
    assert written == model_limits(runtime, arch) and written["runtime"] == runtime
    assert written["runtime_known"] is (runtime is not None)  # unknown: every neuronx-cc model is a warning
    assert any(c == f"chmod 644 {LIMITS}" for c in rec.commands)
    # written before the sync that reads it; the sync, its dry run and the scheduled verify all pass it
    (sync,) = sync_lines(rec)
    assert shlex.split(sync)[-2:] == ["--compat", LIMITS]
    assert rec.commands.index(f"chmod 644 {LIMITS}") < rec.commands.index(sync)
    dry = [c for c in rec.commands if "tritonfleet-agent sync" in c and "--dry-run" in c]
    assert dry and all(f"--compat {LIMITS} --dry-run" in c for c in dry)
    service = rec.uploads["/etc/systemd/system/tritonfleet-models-verify.service"]
    assert f"--compat {LIMITS}" in service


def test_an_up_to_date_limits_file_is_not_written_again(monkeypatch):
    rec = run_deploys([agent, models], S3, "debian12", monkeypatch, responses={
        AGENT_PYTHON: ["3.11", "x86_64", "none"], **limits_written(host_config(S3))})
    assert LIMITS not in rec.uploads and f"--compat {LIMITS}" in sync_lines(rec)[0]


def test_a_gpu_host_has_no_neuron_model_check(monkeypatch):
    data = {**S3, "instance_type": "g5.xlarge", "nvidia_key_fingerprint": "A" * 40}
    rec = run_deploys([agent, models], data, "debian12", monkeypatch,
                      responses={AGENT_PYTHON: ["3.11", "x86_64", "none"]})
    (sync,) = sync_lines(rec)
    assert "--compat" not in sync and LIMITS not in rec.uploads and not any(LIMITS in c for c in rec.commands)


def test_the_model_checks_warnings_are_shown_when_the_sync_succeeds(caplog):
    """Without this the agent's warnings of a sync that succeeded would never reach the deploy's output."""
    from types import SimpleNamespace

    from pyinfra.connectors.util import CommandOutput, OutputLine

    from roles.operations.docker import explained
    from roles.operations.models import model_check_warnings

    warning = ("tritonfleet-agent: warning: model odd: no compiler version found (nothing read from truncated NEFF "
               "header (10 of 1024 bytes), unknown): recompile with the image's compiler, or keep the compiler "
               "version with the model")
    output = CommandOutput([OutputLine("stderr", warning), OutputLine("stderr", "tritonfleet-agent: warning: other"),
                            OutputLine("stdout", "synced 000002-20261126T000000Z: 1 added, ...")])
    status = [True]

    class Ran:
        connector_arguments: dict = {}

        def execute(self, state, host, arguments):
            return status[0], output

    host = SimpleNamespace(print_prefix="[inf2-a] ", run_shell_command=lambda *a, **k: None)
    command = explained(Ran(), lambda text: [], model_check_warnings)
    with caplog.at_level("WARNING", logger="pyinfra"):
        assert command.execute(SimpleNamespace(print_output=True), host, {}) is True
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [f"[inf2-a] {warning}"]
    caplog.clear()
    status[0] = False  # failed: the output is printed with the errors, the warnings are not repeated
    with caplog.at_level("WARNING", logger="pyinfra"):
        assert command.execute(SimpleNamespace(print_output=True), host, {}) is False
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_controller_copy_onto_a_repository_synced_from_s3_is_refused_in_preflight(monkeypatch, tmp_path):
    """Found by the suite-time work (issue 19): a serving host switched from models_s3_uri to models_source kept
    the agent's `current` and `versions/`, and the new server failed its health gate on them. Preflight now
    refuses it in one line, before anything changes; a host without the S3 layout takes the copy."""
    source = tmp_path / "models"
    (source / "add_sub" / "1").mkdir(parents=True)
    (source / "add_sub" / "config.pbtxt").write_text('name: "add_sub"\nbackend: "python"\n')
    (source / "add_sub" / "1" / "model.py").write_text("x = 1\n")
    data = {**{k: v for k, v in S3.items() if not k.startswith("models_s3")}, "models_source": str(source)}
    synced = {"test -L /opt/tritonfleet/models/current": ["yes"]}
    with pytest.raises(PreflightError) as caught:
        run_deploys(SERVE_DEPLOY, data, "debian12", monkeypatch, responses=synced)
    (line,) = str(caught.value).splitlines()[1:]  # the value itself may be shortened in the line
    assert line.startswith("  @fake/h1: models_source '") and line.endswith(
        ": /opt/tritonfleet/models on the host is an S3 sync (its servers read /opt/tritonfleet/models/current): a "
        "controller copy would take their models away while the new server starts; keep models_s3_uri, or empty "
        "/opt/tritonfleet/models on the host first (it serves no model until the copy is in)")
    rec = run_deploys(SERVE_DEPLOY, data, "debian12", monkeypatch)
    assert any("triton-swap.sh" in c for c in rec.commands)
