"""@fake runs of the lb role (deploys/lb.py) on an inventory of two Triton hosts with two servers each and one
general-purpose load balancer in the lb group: the haproxy.cfg it renders, the commands that install, check and
reload HAProxy, a second run that changes nothing, and bad input refused in one line before anything runs."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.connectors.fake import FakeConnector

from roles import lb as lb_role
from roles.lb import lb
from roles.preflight import preflight
from tests.fake.fakehost import PLATFORMS, healthy
from tests.hostconfigs import host_config

FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
DATA = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}
TRITON = {  # two hosts, two servers each (inf2.24xlarge: 6 devices, 3 per server; g5.12xlarge: 4 GPUs, 2 each)
    "@fake/tr1": {"instance_type": "inf2.24xlarge", "triton_servers": [{}, {}], "ec2_private_ip": "10.0.0.11"},
    "@fake/tr2": {"instance_type": "g5.12xlarge", "ssh_hostname": "10.0.0.12",
                  "triton_servers": [{"name": "left"}, {"name": "right", "http_port": 9000, "grpc_port": 9001,
                                                     "metrics_port": 9002}]},
}
LB = {"@fake/lb1": {"instance_type": "c6i.large"}}
CFG = "/etc/haproxy/haproxy.cfg"
DROPIN = "/etc/systemd/system/haproxy.service.d/tritonfleet.conf"
NEW = CFG + ".tritonfleet-new"


class Run:
    def __init__(self) -> None:
        self.commands: dict[str, list[str]] = {}
        self.uploads: dict[str, dict[str, str]] = {}
        self.state: State | None = None


def run_lb(monkeypatch, os_key: str = "debian12", *, triton=None, lbs=None, extra: dict | None = None,
           per_host: dict | None = None, lb_group: bool = True, responses: dict | None = None,
           installed: dict | None = None, errors: int = 0) -> Run:
    """preflight(needs_accelerator=False) + lb on @fake hosts; ``responses`` go to the lb hosts."""
    run = Run()
    orig_run, orig_put = FakeConnector.run_shell_command, FakeConnector.put_file

    def run_shell_command(self, command, *args, **kwargs):
        text = str(command.get_raw_value() if hasattr(command, "get_raw_value") else command)
        run.commands.setdefault(self.host.name, []).append(text)
        return orig_run(self, command, *args, **kwargs)

    def put_file(self, filename_or_io, remote_filename, *args, **kwargs):
        pos = filename_or_io.tell()
        body = filename_or_io.read()
        filename_or_io.seek(pos)
        run.uploads.setdefault(self.host.name, {})[remote_filename] = body.decode() if isinstance(body, bytes) else body
        return orig_put(self, filename_or_io, remote_filename, *args, **kwargs)

    monkeypatch.setattr(FakeConnector, "run_shell_command", run_shell_command)
    monkeypatch.setattr(FakeConnector, "put_file", put_file)
    triton = TRITON if triton is None else triton
    lbs = LB if lbs is None else lbs
    hosts = []
    for name, data in {**triton, **lbs}.items():
        data = {**DATA, **data, **(extra or {}), **((per_host or {}).get(name, {}))}
        fake = healthy(data["instance_type"], os_key, installed=installed if name in lbs else None)
        if name in lbs:
            fake = {**(responses or {}), **fake}
        hosts.append((name, {**data, "fake_responses": fake, "fake_delay": 0, "fake_delay_jitter": 0}))
    groups = {"lb": (list(lbs), {})} if lb_group else {}
    inventory = Inventory((hosts, {}), triton=(list(triton), {}), **groups)
    state = State(inventory=inventory, config=Config())
    run.state = state
    connect_all(state)
    add_deploy(state, preflight, needs_accelerator=False)
    add_deploy(state, lb)
    run_ops(state)
    disconnect_all(state)
    assert sum(state.results[h].error_ops for h in inventory) == errors, "operations failed (or did not)"
    return run


def rendered(run: Run, host: str = "@fake/lb1") -> str:
    return run.uploads[host][NEW]


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_haproxy_cfg_has_one_server_per_triton_server_with_its_own_ports(monkeypatch, os_key):
    run = run_lb(monkeypatch, os_key)
    cfg = rendered(run)
    http = cfg.split("\nbackend triton_http", 1)[1].split("\nbackend triton_grpc", 1)[0]
    grpc = cfg.split("\nbackend triton_grpc", 1)[1]
    assert re.findall(r"^\s+server .*$", http, re.M) == [
        "    server tr1-triton-0 10.0.0.11:8000 check",
        "    server tr1-triton-1 10.0.0.11:8010 check",
        "    server tr2-left 10.0.0.12:8000 check",
        "    server tr2-right 10.0.0.12:9000 check",
    ]
    assert re.findall(r"^\s+server .*$", grpc, re.M) == [
        "    server tr1-triton-0 10.0.0.11:8001 proto h2 check port 8000 check-proto h1",
        "    server tr1-triton-1 10.0.0.11:8011 proto h2 check port 8010 check-proto h1",
        "    server tr2-left 10.0.0.12:8001 proto h2 check port 8000 check-proto h1",
        "    server tr2-right 10.0.0.12:9001 proto h2 check port 9000 check-proto h1",
    ]
    for backend in (http, grpc):
        assert "option httpchk GET /v2/health/ready" in backend and "http-check expect status 200" in backend
        # roundrobin: the rollout's canary weights give each server its share of the requests
        assert "balance roundrobin" in backend
    assert "bind 0.0.0.0:8000\n" in cfg and "bind 0.0.0.0:8001 proto h2\n" in cfg
    assert "bind 0.0.0.0:8405\n    http-request use-service prometheus-exporter if { path /metrics }" in cfg
    assert "stats socket /run/haproxy/admin.sock mode 600 level admin" in cfg
    assert "default-server inter 2000ms fall 3 rise 2" in cfg and "hard-stop-after 600s" in cfg
    config_id = re.search(r"^    description tritonfleet ([0-9a-f]{16})$", cfg, re.M).group(1)
    lb_cmds = "\n".join(run.commands["@fake/lb1"])
    assert re.search(r"haproxy\b.*socat|socat\b.*haproxy", lb_cmds), "HAProxy and socat (its Runtime API's client)"
    checked, moved = lb_cmds.index(f"haproxy -c -f {NEW}"), lb_cmds.index(f"mv -f {NEW} {CFG}")
    reloaded = lb_cmds.index("systemctl reload-or-restart haproxy.service")
    verified = lb_cmds.index(f"grep -qx 'description: tritonfleet {config_id}'", reloaded)
    assert checked < moved < reloaded < verified
    # the socket's directory is systemd's to make, on every platform (not only where a package's tmpfiles.d does)
    assert "RuntimeDirectory=haproxy\n" in run.uploads["@fake/lb1"][DROPIN]
    assert lb_cmds.index("systemctl daemon-reload") < reloaded
    # the Triton hosts get nothing: their data is read, nothing is done on them
    for name in TRITON:
        assert name not in run.uploads
        assert not any("haproxy" in c for c in run.commands.get(name, []))


def test_settings_reach_the_config_and_an_ipv6_backend_is_bracketed(monkeypatch):
    run = run_lb(monkeypatch, extra={"lb_check_interval_ms": 500, "lb_fall": 5, "lb_rise": 1},
                 per_host={"@fake/lb1": {"lb_frontend_http_port": 80, "lb_frontend_grpc_port": 81,
                                         "lb_prometheus_port": 9101, "lb_bind_address": "10.0.0.5",
                                         "lb_server_timeout_s": 900, "lb_haproxy_version": "2.6.*"},
                           "@fake/tr1": {"lb_backend_address": "fd00::11"}})
    cfg = rendered(run)
    assert "bind 10.0.0.5:80\n" in cfg and "bind 10.0.0.5:81 proto h2" in cfg and "bind 10.0.0.5:9101" in cfg
    assert "default-server inter 500ms fall 5 rise 1" in cfg and "timeout server 900s" in cfg
    assert "server tr1-triton-0 [fd00::11]:8000 check" in cfg
    assert any("haproxy=2.6.*" in c for c in run.commands["@fake/lb1"])


def test_a_second_run_changes_nothing(monkeypatch):
    first = run_lb(monkeypatch)
    digest = hashlib.sha256(rendered(first).encode()).hexdigest()
    dropin = hashlib.sha256(first.uploads["@fake/lb1"][DROPIN].encode()).hexdigest()
    responses = {
        re.compile(r"for f in /etc/haproxy/haproxy\.cfg;"): [f"{digest} 644 {CFG}"],
        re.compile(r"for f in /etc/systemd/system/haproxy\.service\.d/"): [f"{dropin} 644 {DROPIN}"],
        "systemctl show": ["Id=haproxy.service", "ActiveState=active", "UnitFileState=enabled", "LoadState=loaded"],
        "( echo 'show info' | socat": ["yes"],  # HAProxy runs this configuration
        "( [ \"$(stat -c %a:%U:%G /run/haproxy/admin.sock)": ["yes"],  # its socket is root only
    }
    second = run_lb(monkeypatch, responses=responses, installed={"haproxy": "2.6.12-1+deb12u4", "socat": "1.7.4.4-2"})
    assert not second.uploads
    facts = ("cd /etc/ && for file in", "if command -v dpkg-query", "for f in /etc/systemd/system/haproxy.service.d/",
             "for f in /etc/haproxy/haproxy.cfg;",
             "( echo 'show info' | socat", '( [ "$(stat -c %a:%U:%G', "systemctl show ")
    # every command of the second run reads a fact (OS, packages, the file, what HAProxy runs, its socket, the unit)
    assert [c for c in second.commands["@fake/lb1"] if not c.startswith(facts)] == []
    assert len(second.commands["@fake/lb1"]) == len(facts)


def test_a_reload_haproxy_could_not_carry_out_fails_the_run(monkeypatch):
    failed = {re.compile(r"^for i in \$\(seq"): {"success": False, "stderr": "ERROR: HAProxy did not load"}}
    run = run_lb(monkeypatch, responses=failed, errors=1)
    assert any(c.startswith("for i in $(seq 150); do echo 'show info'") for c in run.commands["@fake/lb1"])


@pytest.mark.allow_skip("tests/e2e/test_lb.py runs the same check (haproxy -c) on the sandbox's lb host")
@pytest.mark.skipif(not shutil.which("haproxy"), reason="no haproxy binary on this machine")
def test_the_rendered_config_is_one_haproxy_accepts(monkeypatch, tmp_path):
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(rendered(run_lb(monkeypatch)).replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock"))
                   .replace("user haproxy\n", "").replace("group haproxy\n", ""))
    proc = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _refused(monkeypatch, **kwargs) -> str:
    with pytest.raises(PyinfraError) as exc:
        run_lb(monkeypatch, **kwargs)
    return str(exc.value)


def test_an_lb_group_without_hosts_is_refused_in_one_line(monkeypatch):
    text = _refused(monkeypatch, lbs={}, lb_group=True)
    assert text == ("preflight failed, nothing was changed:\n"
                    "  inventory: group lb: has no hosts (put the load balancers in a group named lb)")
    assert _refused(monkeypatch, lbs={}, lb_group=False) == text


def test_a_general_purpose_host_outside_the_lb_group_is_refused(monkeypatch):
    text = _refused(monkeypatch, lb_group=False)
    assert text.splitlines()[1] == ("  @fake/lb1: instance_type 'c6i.large': has no accelerator (no Neuron device, "
                                    "no GPU), so no Triton server can run on it; general-purpose instance types "
                                    "are for the hosts of the lb group")


def test_a_frontend_port_on_a_triton_port_of_the_same_host_is_refused(monkeypatch):
    # a load balancer that also serves Triton (inf2.xlarge: one server on 8000-8002), frontend on 8000
    text = _refused(monkeypatch, lbs={"@fake/lb1": {"instance_type": "inf2.xlarge"}})
    assert text.splitlines()[1:] == ["  @fake/lb1: lb_frontend_http_port 8000: clashes with Triton server triton's "
                                     "http_port on this host (choose another port for one of them)"]
    text = _refused(monkeypatch, lbs={"@fake/lb1": {"instance_type": "inf2.xlarge", "lb_frontend_http_port": 80,
                                                   "lb_frontend_grpc_port": 81, "lb_prometheus_port": 8002}})
    assert "@fake/lb1: lb_prometheus_port 8002: clashes with Triton server triton's metrics_port" in text
    # the same host with its own ports elsewhere is fine, and it is one of the backends
    run = run_lb(monkeypatch, lbs={"@fake/lb1": {"instance_type": "inf2.xlarge", "lb_frontend_http_port": 80,
                                                 "lb_frontend_grpc_port": 81, "ssh_hostname": "10.0.0.5"}})
    assert "server lb1-triton 10.0.0.5:8000 check" in rendered(run)


def test_bad_lb_data_is_refused_in_one_line_before_anything_runs(monkeypatch):
    text = _refused(monkeypatch, per_host={"@fake/lb1": {"lb_prometheus_port": 8001}})
    assert text.splitlines()[1:] == ["  @fake/lb1: lb_prometheus_port 8001: same port as lb_frontend_grpc_port"]
    text = _refused(monkeypatch, per_host={"@fake/tr2": {"lb_backend_address": "10.0.0.12\n    server x"}})
    assert text.splitlines()[1:] == ["  @fake/tr2: lb_backend_address '10.0.0.12\\n server x': expected a host "
                                     "name or an IP address"]
    text = _refused(monkeypatch, per_host={"@fake/lb1": {"lb_fall": 0}})
    assert "@fake/lb1: lb_fall 0: Input should be greater than or equal to 1" in text


def test_rollout_lb_is_validated_with_the_rest(monkeypatch):
    assert host_config({**DATA, "instance_type": "c6i.large", "rollout_lb": "haproxy"}).rollout.lb == "haproxy"
    text = _refused(monkeypatch, extra={"rollout_lb": "nginx"})
    assert "rollout_lb 'nginx': Input should be 'elbv2' or 'haproxy'" in text
    text = _refused(monkeypatch, extra={"rollout_lb": "haproxy"}, lbs={}, lb_group=False)
    assert "@fake/tr1: rollout_lb 'haproxy': the inventory's lb group has no hosts" in text
    text = _refused(monkeypatch, extra={"rollout_target_group": "arn:aws:elasticloadbalancing:us-east-1:1:tg"})
    assert "rollout_target_group" in text and "expected a target group ARN" in text


def test_server_names_are_host_dash_server():
    assert lb_role.server_name("sbx-01", "triton") == "sbx-01-triton"
    assert lb_role.server_name("@ssh/10.0.0.7", "triton-1") == "10.0.0.7-triton-1"


def test_two_servers_with_one_haproxy_name_are_refused(monkeypatch):
    clash = {"@fake/x": {"instance_type": "inf2.xlarge", "triton_servers": [{"name": "y-zz"}]},
             "@fake/x-y": {"instance_type": "inf2.xlarge", "triton_servers": [{"name": "zz"}]}}
    text = _refused(monkeypatch, triton=clash)
    assert text.splitlines()[1:] == ["  @fake/x-y: HAProxy server name 'x-y-zz': also the name of a server of @fake/x"]
