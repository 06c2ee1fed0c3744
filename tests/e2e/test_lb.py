"""The front door on the sandbox: deploys/lb.py puts HAProxy on the general-purpose lb host in front of two Triton
hosts (a Neuron and a GPU host). Asserted from outside: HTTP and gRPC inferences through the balancer reach both
servers, HAProxy's Prometheus endpoint answers, the Runtime API socket is root-only, a configuration change reloads
HAProxy without failing one request of a loop running through it, and a second run changes nothing.

Every request loop is bounded in count and time and goes only to sandbox addresses."""

from __future__ import annotations

import pprint
import re
import threading
import time
import urllib.request

import numpy as np
import pytest

from tests.e2e.helpers import assert_noop, host_ip, pyinfra, ssh
from tritonfleet.sandbox.inventory import sandbox_hosts

TRITON = ["inf2", "gpu"]
LB = "lb"
SERVERS = {f"{h}-triton" for h in TRITON}  # <host>-<server>: the rollout's names for them
CHANGED = {"lb_check_interval_ms": 1000}  # the configuration change of the reload test


def _inventory(tmp, extra: dict | None = None):
    triton = sandbox_hosts(TRITON)
    lb = [(n, {**d, **(extra or {})}) for n, d in sandbox_hosts([LB])]
    inv = tmp / "inv_lb.py"
    inv.write_text(f"triton = {pprint.pformat(triton)}\nlb = {pprint.pformat(lb)}\n")
    return inv


@pytest.fixture(scope="module")
def front_door(sandbox, tmp_path_factory):
    """The Triton hosts serving (a no-op when earlier tests left them serving) and HAProxy deployed."""
    tmp = tmp_path_factory.mktemp("lb")
    inv = _inventory(tmp)
    served = pyinfra(inv, "deploys/serve.py")  # the same inventory: the lb host is left out, the others serve
    assert served.returncode == 0, served.output[-5000:]
    assert f"{LB}: c6i.large has no accelerator: a load balancer, left out of this deploy" in served.output
    run = pyinfra(inv, "deploys/lb.py")
    assert run.returncode == 0, run.output[-5000:]
    return tmp, f"{host_ip(LB)}"


def _metrics(ip: str) -> str:
    with urllib.request.urlopen(f"http://{ip}:8405/metrics", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def _responses(text: str, proxy: str) -> dict[str, float]:
    """``{server: 2xx responses}`` of one backend, from HAProxy's Prometheus metrics."""
    out = {}
    for m in re.finditer(r'^haproxy_server_http_responses_total\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("proxy") == proxy and labels.get("code") == "2xx":
            out[labels["server"]] = float(m.group(2))
    return out


def _ready_everywhere(ip: str, deadline: float = 30) -> None:
    """Every server UP in both backends (health checks every 2 s, rise 2), bounded in time."""
    end = time.monotonic() + deadline
    while True:
        up = set(re.findall(r'^haproxy_server_status\{proxy="triton_(?:http|grpc)",server="([^"]+)",state="UP"\} 1$',
                            _metrics(ip), re.M))
        if SERVERS <= up:
            return
        if time.monotonic() > end:
            pytest.fail(f"servers UP in HAProxy after {deadline}s: {sorted(up)}")
        time.sleep(0.5)


def _infer(mod, client) -> None:
    a = np.full((1, 4), 3, np.float32)
    i0, i1 = mod.InferInput("INPUT0", a.shape, "FP32"), mod.InferInput("INPUT1", a.shape, "FP32")
    i0.set_data_from_numpy(a)
    i1.set_data_from_numpy(a)
    res = client.infer("add_sub", [i0, i1])
    np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + a)


def test_http_and_grpc_through_the_front_door_reach_every_server(front_door):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    _tmp, ip = front_door
    _ready_everywhere(ip)
    before = {p: _responses(_metrics(ip), p) for p in ("triton_http", "triton_grpc")}
    http = httpclient.InferenceServerClient(f"{ip}:8000", network_timeout=10)
    grpc = grpcclient.InferenceServerClient(f"{ip}:8001")
    assert http.is_server_ready() and grpc.is_server_ready()
    for _ in range(8):  # roundrobin over 2 servers: sequential requests alternate
        _infer(httpclient, http)
        _infer(grpcclient, grpc)
    after = {p: _responses(_metrics(ip), p) for p in ("triton_http", "triton_grpc")}
    for proxy in after:
        served = {s for s, n in after[proxy].items() if n > before[proxy].get(s, 0)}
        assert served == SERVERS, f"{proxy}: requests reached {sorted(served)}"


def test_prometheus_endpoint_and_a_root_only_runtime_socket(front_door):
    _tmp, ip = front_door
    text = _metrics(ip)
    assert 'haproxy_backend_active_servers{proxy="triton_http"} 2' in text
    assert 'haproxy_backend_active_servers{proxy="triton_grpc"} 2' in text
    assert ssh(LB, "stat -c '%a %U %F' /run/haproxy/admin.sock").stdout.strip() == "600 root socket"
    # the rollout's view of it: its servers by name, over the socket (root on the host)
    stat = ssh(LB, "echo 'show servers state triton_http' | socat stdio unix-connect:/run/haproxy/admin.sock").stdout
    assert {n for n in SERVERS if f" {n} " in stat} == SERVERS


def test_a_configuration_change_reloads_without_failing_a_request(front_door):
    tmp, ip = front_door
    master = ssh(LB, "systemctl show -p MainPID --value haproxy.service").stdout.strip()
    results = {"ok": 0, "failed": []}
    done = threading.Event()

    def load() -> None:  # a new connection per request; bounded in count and time
        end = time.monotonic() + 60
        while not done.is_set() and results["ok"] + len(results["failed"]) < 50000 and time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://{ip}:8000/v2/health/ready", timeout=5) as resp:
                    assert resp.status == 200
                results["ok"] += 1
            except Exception as exc:  # noqa: BLE001 - counted, reported below
                results["failed"].append(repr(exc))

    worker = threading.Thread(target=load)
    worker.start()
    try:
        run = pyinfra(_inventory(tmp, CHANGED), "deploys/lb.py")
    finally:
        done.set()
        worker.join(timeout=70)
    assert run.returncode == 0 and run.totals.get("changed", 0) > 0, run.output[-4000:]
    assert "inter 1000ms" in ssh(LB, "cat /etc/haproxy/haproxy.cfg").stdout
    assert ssh(LB, "systemctl show -p MainPID --value haproxy.service").stdout.strip() == master, "restarted"
    print(f"{results['ok']} requests through the reload, none failed")
    assert results["ok"] > 0 and not results["failed"], f"{results['ok']} ok, failed: {results['failed'][:3]}"


def test_a_second_run_changes_nothing(front_door):
    tmp, _ip = front_door
    assert_noop(pyinfra(_inventory(tmp, CHANGED), "deploys/lb.py"))


def test_the_config_on_the_host_is_the_rendered_one(front_door):
    cfg = ssh(LB, "cat /etc/haproxy/haproxy.cfg").stdout
    for h in TRITON:
        assert f"server {h}-triton {host_ip(h)}:8000 check" in cfg
        assert f"server {h}-triton {host_ip(h)}:8001 proto h2 check port 8000 check-proto h1" in cfg
