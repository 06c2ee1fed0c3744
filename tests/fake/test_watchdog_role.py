"""@fake runs of the watchdog role (roles/watchdog.py): the unit and the policy file it writes from the settings,
the service restarted and enabled, a second run that changes nothing, off by default (and then removed where it
was), bad policies refused by preflight in one line, and deploys/serve.py unchanged while it is off."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from pyinfra.api.exceptions import PyinfraError

from roles.watchdog import watchdog
from tests.fake.fakehost import PLATFORMS
from tests.fake.fakehost import run_deploys as _run_deploys
from tritonfleet import wheelhouse
from tritonfleet.agent.watchrun import read_config

FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
SECRET = "s" * 24
DATA = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "triton_repository_secret": SECRET}
ON = {**DATA, "watchdog_enabled": True}
UNIT = "/etc/systemd/system/tritonfleet-watchdog.service"
POLICY = "/etc/tritonfleet/watchdog.json"
HEADER = "/etc/tritonfleet/repository-header"
STATE = "/var/lib/tritonfleet/watchdog/last.json"
TEXTFILE = "/var/lib/prometheus/node-exporter/tritonfleet_watchdog.prom"
DIGEST = "d" * 64  # the stand-in wheelhouse's


def run_deploys(deploys, data, os_key, monkeypatch, installed: str = "none", **kw):
    """The watchdog runs on the host agent: preflight asks for its Python and the wheelhouse is a stand-in (the
    real build is tested in tests/unit/test_wheelhouse)."""
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), DIGEST, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)
    responses = {"sys.version_info": ["3.11", "x86_64", installed], **kw.pop("responses", {})}
    return _run_deploys(deploys, data, os_key, monkeypatch, responses=responses, **kw)


def changing(rec) -> list[str]:
    """The commands that change the host: everything but the facts' reads."""
    reads = ("cd /etc/ && for file in", "for f in ", "systemctl show ", "command -v ", "! (test -e ", "uname",
             "cat ", "! test -d ", "if command -v dpkg-query", "ls /dev/neuron", "lsmod", "test -d ",
             'if [ -n "$TMPDIR" ]', "echo '@devices'")
    return [c for c in rec.commands if not c.lstrip().startswith(reads) and "sys.version_info" not in c]


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_the_service_is_installed_with_its_policy_and_started(monkeypatch, os_key):
    policy = {"leak": ["restart", "replace"], "max_restarts_per_hour": 2, "foreign_cores": ["free-cores", "report"],
              "allow_free_cores": True}
    rec = run_deploys(watchdog, {**ON, "instance_type": "inf2.xlarge", "watchdog_policy": policy,
                                 "watchdog_interval_seconds": 20, "watchdog_memory_max_mib": 128,
                                 "watchdog_drain_command": ["/usr/local/bin/lb-drain", "{server}"]},
                      os_key, monkeypatch)
    unit = rec.uploads[UNIT]
    assert ("ExecStart=/opt/tritonfleet/venv/bin/tritonfleet-agent watchdog --policy /etc/tritonfleet/watchdog.json "
            "--interval 20 --textfile-dir /var/lib/prometheus/node-exporter --state "
            "/var/lib/tritonfleet/watchdog/last.json --header-file /etc/tritonfleet/repository-header "
            "--neuron-exporter http://127.0.0.1:9010/metrics\n") in unit
    for line in ("Restart=on-failure", "MemoryMax=128M", "Nice=10", "CPUWeight=20", "IOSchedulingClass=best-effort",
                 "NoNewPrivileges=yes", "ProtectSystem=strict", "StateDirectory=tritonfleet/watchdog",
                 "ReadWritePaths=/var/lib/prometheus/node-exporter", "WantedBy=multi-user.target"):
        assert f"\n{line}\n" in unit, line
    assert "AWS_EC2_METADATA_SERVICE_ENDPOINT" not in unit
    written = json.loads(rec.uploads[POLICY])
    assert written == {**policy, "drain_command": ["/usr/local/bin/lb-drain", "{server}"],
                       "drain_timeout_seconds": 60}
    config = read_config(written)  # what the service reads: the same policy
    assert config.policy.allow_free_cores and config.policy.chains["leak"] == ("restart", "replace")
    assert any(f"chmod 644 {POLICY}" in c for c in rec.commands) and any(f"chmod 644 {UNIT}" in c for c in rec.commands)
    assert any("secret-file.sh" in c and HEADER in c for c in rec.commands)  # the header, from stdin (0600)
    assert SECRET not in unit and SECRET not in rec.uploads[POLICY]
    assert any("tritonfleet-agent==0.1.0+t" in c for c in rec.commands), "the host agent is installed"
    order = [rec.commands.index(c) for c in ("systemctl daemon-reload", "systemctl start tritonfleet-watchdog.service")]
    assert order == sorted(order)


def test_a_gpu_host_reads_no_neuron_exporter_and_other_settings_reach_the_unit(monkeypatch):
    rec = run_deploys(watchdog, {**ON, "instance_type": "g5.xlarge", "imds_endpoint": "http://192.168.250.1:8081",
                                 "watchdog_asg_endpoint": "http://192.168.250.1:5000", "watchdog_asg_region": "us-east-1",
                                 "watchdog_textfile_dir": "/srv/prom", "triton_restricted_apis": ["logging"]},
                      "ubuntu2204", monkeypatch)
    unit = rec.uploads[UNIT]
    assert "--neuron-exporter" not in unit and "--header-file" not in unit  # no restricted repository API
    assert "--endpoint-url http://192.168.250.1:5000 --region us-east-1\n" in unit
    assert "--textfile-dir /srv/prom " in unit and "ReadWritePaths=/srv/prom\n" in unit
    assert "\nEnvironment=AWS_EC2_METADATA_SERVICE_ENDPOINT=http://192.168.250.1:8081\n" in unit
    assert json.loads(rec.uploads[POLICY]) == {}  # the defaults
    assert not any(HEADER in c for c in rec.commands)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_second_run_changes_nothing(monkeypatch):
    data = {**ON, "instance_type": "inf2.xlarge", "watchdog_policy": {"not_ready_seconds": 120}}
    first = run_deploys(watchdog, data, "debian12", monkeypatch)
    header = f"x-tritonfleet-repository-key: {SECRET}\n"
    responses = {
        f"for f in {UNIT} {POLICY}; do": [f"{_sha(first.uploads[UNIT])} 644 {UNIT}",
                                          f"{_sha(first.uploads[POLICY])} 644 {POLICY}"],
        f"for f in {HEADER}; do": [f"{_sha(header)} 600 {HEADER}"],
        "tritonfleet-watchdog.service 2>/dev/null": ["Id=tritonfleet-watchdog.service", "ActiveState=active",
                                                     "UnitFileState=enabled", "LoadState=loaded"],
        "! (test -e /var/lib/prometheus/node-exporter ": [
            "user=root group=root mode=drwxr-xr-x atime=0 mtime=0 ctime=0 size=4096 '/var/lib/prometheus/node-exporter'"],
    }
    monkeypatch.undo()
    second = run_deploys(watchdog, data, "debian12", monkeypatch, installed=DIGEST, responses=responses)
    assert second.uploads == {}
    assert changing(second) == []


def test_off_by_default_it_changes_nothing(monkeypatch):
    rec = run_deploys(watchdog, {**DATA, "instance_type": "inf2.xlarge"}, "debian12", monkeypatch)
    assert rec.uploads == {} and changing(rec) == []
    assert not any("tritonfleet-agent" in c for c in rec.commands)  # no agent install for it


def test_switched_off_it_is_stopped_and_removed(monkeypatch):
    responses = {
        "tritonfleet-watchdog.service 2>/dev/null": ["Id=tritonfleet-watchdog.service", "ActiveState=active",
                                                     "UnitFileState=enabled", "LoadState=loaded"],
        re.compile(r"^for f in .*watchdog"): [f"{'a' * 64} 644 {UNIT}", f"{'b' * 64} 644 {POLICY}",
                                             f"{'c' * 64} 644 {STATE}", f"{'e' * 64} 644 {TEXTFILE}"],
    }
    rec = run_deploys(watchdog, {**DATA, "instance_type": "inf2.xlarge"}, "debian12", monkeypatch, responses=responses)
    assert "systemctl stop tritonfleet-watchdog.service" in rec.commands
    assert "systemctl disable tritonfleet-watchdog.service" in rec.commands
    removed = next(c for c in rec.commands if c.startswith("rm -f "))
    assert all(p in removed for p in (UNIT, POLICY, STATE, TEXTFILE))
    assert rec.uploads == {}


@pytest.mark.parametrize(("setting", "value", "words"), [
    ("watchdog_policy", {"leak": ["reboot"]}, "watchdog policy: leak: unknown action 'reboot'"),
    ("watchdog_policy", {"foreign_cores": ["free-cores"]},
     "watchdog policy: foreign_cores: 'free-cores' needs allow_free_cores: true"),
    ("watchdog_policy", {"leak_window_seconds": -1}, "watchdog policy: leak_window_seconds: must be more than 0"),
    ("watchdog_policy", {"leek": []}, "watchdog policy: leek: unknown field"),
    ("watchdog_policy", {"drain_command": ["/bin/x"]}, "drain_command: a setting of its own (watchdog_drain_command)"),
    ("watchdog_drain_command", ["lb-drain"], "the command must be an absolute path"),
    ("watchdog_drain_command", ["/bin/x", "{host}"], "'{host}': only {server}, {container} and {port} are replaced"),
    ("watchdog_interval_seconds", 2, "greater than or equal to 5"),
    ("watchdog_asg_region", "US East", "expected a region name"),
    ("watchdog_queue_time_fleet", "prod fleet", "expected a fleet name"),
])
def test_a_bad_setting_is_refused_by_preflight_in_one_line(monkeypatch, setting, value, words):
    with pytest.raises(PyinfraError) as exc:
        run_deploys(watchdog, {**ON, "instance_type": "inf2.xlarge", setting: value}, "debian12", monkeypatch)
    text = str(exc.value)
    line = next(x for x in text.splitlines() if setting in x)
    assert words in line and "Traceback" not in text


def test_serve_is_unchanged_while_the_watchdog_is_off_and_includes_it_when_on(monkeypatch):
    from tests.fake.test_roles import SERVE_DEPLOY

    assert SERVE_DEPLOY[-1] is watchdog
    data = {**DATA, "instance_type": "inf2.xlarge"}
    without = run_deploys(SERVE_DEPLOY[:-1], data, "ubuntu2204", monkeypatch)
    monkeypatch.undo()
    off = run_deploys(SERVE_DEPLOY, data, "ubuntu2204", monkeypatch)
    assert off.uploads == without.uploads
    assert changing(off) == changing(without)
    extra = [c for c in off.commands if c not in without.commands]
    assert extra and all(c.startswith(("systemctl show ", "for f in ")) and "watchdog" in c for c in extra)
    monkeypatch.undo()
    on = run_deploys(SERVE_DEPLOY, {**data, "watchdog_enabled": True}, "ubuntu2204", monkeypatch)
    assert UNIT in on.uploads and POLICY in on.uploads


def test_the_queue_time_goes_to_cloudwatch_from_each_servers_metrics_port(monkeypatch):
    """watchdog_queue_time_fleet: the service publishes fleet autoscale's metric, from every server the host
    runs (an inf2.24xlarge split in three: each its own metrics port), with the host's family."""
    rec = run_deploys(watchdog, {**ON, "instance_type": "inf2.24xlarge", "watchdog_queue_time_fleet": "prod",
                                 "triton_servers": [{"devices": [0, 1]}, {"devices": [2, 3]}, {"devices": [4, 5]}]},
                      "ubuntu2204", monkeypatch)
    unit = rec.uploads[UNIT]
    assert "--queue-time-fleet prod --queue-time-family inf2 " in unit
    urls = re.findall(r"--queue-time-url (\S+)", unit)
    assert len(urls) == 3 and len(set(urls)) == 3 and all(u.startswith("http://127.0.0.1:") for u in urls), urls
    off = run_deploys(watchdog, {**ON, "instance_type": "inf2.24xlarge"}, "ubuntu2204", monkeypatch)
    assert "--queue-time" not in off.uploads[UNIT]
