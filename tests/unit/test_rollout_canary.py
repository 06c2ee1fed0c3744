"""The rollout's load balancer choice and traffic canary (tritonfleet/fleet/canary.py): options refused in one
line before anything changes, the lb group's hosts left out of the rollout and handed to HAProxy, and the canary
batch's weights, bake and gates, with the pyinfra runs replaced by a table of outcomes, the gates by verdicts
and the balancer by a recording stand-in (the HAProxy one in the last tests: the fake HAProxy of
tests/unit/haproxy_fake.py). The gates against a real Prometheus: tests/unit/test_gates.py."""

from __future__ import annotations

import json
import logging

import pytest

from tritonfleet.fleet import gates
from tritonfleet.fleet import rollout as ro

HOSTS = [(f"h{i}", {}) for i in range(1, 5)]
PROM = "http://prom:9090"


def opts(tmp_path, **kw):
    base = dict(inventory="inv.py", reports_dir=str(tmp_path), canary=1, batch=2, lb="haproxy", canary_weight=10,
                bake=30, prometheus=PROM)
    return ro.Options(**{**base, **kw})


# -- refused before anything changes ------------------------------------------------------------------------


@pytest.mark.parametrize("kw, said", [
    (dict(canary_weight=101), "--canary-weight 101: expected a percentage 0-100"),
    (dict(canary_weight=-1), "--canary-weight -1: expected a percentage 0-100"),
    (dict(prometheus=None), "--canary-weight needs --prometheus: a traffic canary is judged by comparing its hosts' "
                            "metrics with the others' (without one, roll out in batches without weights)"),
    (dict(prometheus=None, canary_weight=None), "--bake needs --prometheus: a traffic canary is judged by comparing "
                                                "its hosts' metrics with the others' (without one, roll out in "
                                                "batches without weights)"),
    (dict(canary_weight=None), "--bake needs --canary-weight (the share of the traffic the canary gets while it "
                               "bakes)"),
    (dict(bake=0), "--bake 0: expected seconds above 0"),
    (dict(lb=None), "--canary-weight needs a load balancer (--lb haproxy, or --lb elbv2 with --target-group)"),
    (dict(canary=0), "--canary-weight needs canary hosts (--canary 1 or more)"),
    (dict(lb="nginx"), "--lb nginx: expected one of elbv2, haproxy"),
    (dict(lb="elbv2"), "--lb elbv2 needs --target-group (the target group the hosts serve in)"),
    (dict(target_group="arn:tg"), "--target-group is for --lb elbv2 (--lb is haproxy)"),
    (dict(lb="elbv2", target_group="arn:tg"), "--canary-weight with --lb elbv2 needs --canary-target-group (the "
                                              "canary hosts' target group)"),
    (dict(lb="elbv2", target_group="arn:tg", canary_target_group="arn:c"),
     "--canary-weight with --lb elbv2 needs one of --listener-arn or --rule-arn (whose forward action gets the "
     "weights)"),
    (dict(max_error_ratio=2), "--max-error-ratio 2: expected a ratio 0-1 (0.01: 1% of requests)"),
    (dict(max_latency_ratio=0), "--max-latency-ratio 0: expected a factor above 0"),
])
def test_bad_options_are_refused_in_one_line_before_the_inventory_is_read(tmp_path, monkeypatch, kw, said):
    from tritonfleet.access import inventory

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: pytest.fail("the inventory was read"): (_read(path), {}))
    with pytest.raises(ro.RolloutError) as info:
        ro.main(opts(tmp_path, **kw))
    assert str(info.value) == said


def test_batches_without_weights_need_no_prometheus(tmp_path):
    ro.validate(opts(tmp_path, canary_weight=None, bake=None, prometheus=None))
    ro.validate(opts(tmp_path, lb=None, canary_weight=None, bake=None, prometheus=None))


def inventory_file(tmp_path, lb_hosts="['lb1']"):
    f = tmp_path / "inv.py"
    f.write_text(f"fleet = ['h1', 'h2', 'h3']\nlb = ({lb_hosts}, {{'instance_type': 'm5.large'}})\n")
    return str(f)


def test_haproxy_gets_the_lb_groups_hosts_which_are_not_rolled_out(tmp_path, monkeypatch):
    from tritonfleet.fleet import haproxy

    built = {}

    class Fake:
        def __init__(self, balancers, **kw):
            built.update(balancers=balancers, **kw)

        def check(self, hosts):
            built["checked"] = [n for n, _ in hosts]

        def take_out(self, name, data):
            pass

        def put_back(self, name, data):
            pass

    monkeypatch.setattr(haproxy, "HAProxy", Fake)
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    monkeypatch.setattr(ro.Runner, "run", lambda self, deploy, host, data=None: (True, ""))
    monkeypatch.setattr(ro, "print_summary", lambda report: None)
    o = ro.Options(inventory=inventory_file(tmp_path), reports_dir=str(tmp_path / "r"), lb="haproxy", lb_timeout=90,
                   lb_delay=3)
    assert ro.main(o) == 0
    # looks at the Runtime API as often as HAProxy checks (lb_check_interval_ms, default 2 s), at most lb_delay
    assert built == {"balancers": [("lb1", {"instance_type": "m5.large"})], "timeout": 90, "interval": 2,
                     "checked": ["h1", "h2", "h3"]}
    (path,) = (tmp_path / "r").glob("rollout-*.json")
    assert [h["host"] for h in json.loads(path.read_text())["hosts"]] == ["h1", "h2", "h3"]


def test_the_lb_groups_hosts_are_never_rolled_out_also_without_a_balancer(tmp_path, monkeypatch):
    """They run HAProxy and no Triton server (bench/rollout.py's rollout without --lb rolled its lb host out)."""
    ran = []
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    monkeypatch.setattr(ro.Runner, "run", lambda self, deploy, host, data=None: ran.append(host) or (True, ""))
    monkeypatch.setattr(ro, "print_summary", lambda report: None)
    assert ro.main(ro.Options(inventory=inventory_file(tmp_path), reports_dir=str(tmp_path / "r"))) == 0
    assert sorted(ran) == ["h1", "h2", "h3"]
    (path,) = (tmp_path / "r").glob("rollout-*.json")
    assert [h["host"] for h in json.loads(path.read_text())["hosts"]] == ["h1", "h2", "h3"]


def test_haproxy_without_lb_hosts_is_refused_in_one_line(tmp_path):
    o = ro.Options(inventory=inventory_file(tmp_path, "[]"), reports_dir=str(tmp_path), lb="haproxy")
    with pytest.raises(ro.RolloutError) as info:
        ro.main(o)
    assert str(info.value) == ("rollout_lb haproxy: the inventory's lb group has no hosts (roles/lb.py runs HAProxy "
                               "on them)")


def test_a_traffic_canary_without_other_hosts_is_refused(tmp_path, monkeypatch):
    from tritonfleet.access import inventory

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: HOSTS[:1]: (_read(path), {}))
    monkeypatch.setattr("tritonfleet.fleet.haproxy.group_hosts", lambda members, hosts: [])
    with pytest.raises(ro.RolloutError) as info:
        ro.main(opts(tmp_path))
    assert str(info.value) == ("--canary-weight: 1 host(s), all of them canaries: a traffic canary needs other hosts "
                               "to compare with")


# -- the canary batch: weights, bake, gates -----------------------------------------------------------------


class LB:
    def __init__(self, fail_set=False):
        self.calls, self.fail_set = [], fail_set

    def check(self, hosts):
        self.calls.append(("check", [n for n, _ in hosts]))

    def take_out(self, name, data):
        self.calls.append(("out", name))

    def put_back(self, name, data):
        self.calls.append(("back", name))

    def set_weights(self, canary, percent):
        self.calls.append(("weights", [n for n, _ in canary], percent))
        if self.fail_set:
            raise RuntimeError("ModifyListener: AccessDenied")
        return f"{percent}% to the canary"

    def restore_weights(self, rejoin=True):
        self.calls.append(("restore", rejoin))


def verdict(ok, metric="error ratio", canary=0.2, rest=0.0):
    measures = [gates.Measure("requests", 100, 900, None, False, "requests: canary 100, others 900")]
    measures.append(gates.Measure(metric, canary, rest, 0.01, not ok,
                                  f"{metric}: canary {canary:g} {'<=' if ok else '>'} max 0.01 (others {rest:g})"))
    return gates.Verdict(ok, "30s ending 2026-11-27T04:00:00Z", measures)


def canary_rollout(tmp_path, monkeypatch, judged, lb=None, serve_fails=()):
    calls, asked = [], []

    def run(self, deploy, host, data=None):
        calls.append((host, deploy))
        return not (host in serve_fails and deploy.endswith("serve.py")), "serve failed"

    def evaluate(url, canary, rest, window, **limits):
        asked.append((url, canary, rest, window, limits))
        if isinstance(judged, Exception):
            raise judged
        return judged

    monkeypatch.setattr(ro.Runner, "run", run)
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {"triton": f"spec-{name}"},
                                                                  "models_version": None})
    monkeypatch.setattr(ro, "serving", lambda name, data: (True, ""))
    monkeypatch.setattr(gates, "evaluate", evaluate)
    rollout = ro.Rollout(opts(tmp_path, max_error_ratio=0.02, max_latency_ratio=1.2), HOSTS, lb or LB())
    clock = [0.0]
    rollout.clock = lambda: clock[0]
    slept = []
    rollout.sleep = lambda s: (slept.append(s), clock.__setitem__(0, clock[0] + s))
    return rollout, calls, asked, slept


def test_a_passing_canary_bakes_restores_the_weights_and_the_batches_go_on(tmp_path, monkeypatch):
    rollout, calls, asked, slept = canary_rollout(tmp_path, monkeypatch, verdict(True))
    report = rollout.run()
    assert [h["status"] for h in report["hosts"]] == ["updated"] * 4 and report["stopped"] is None
    lb = rollout.lb.calls
    weights = lb.index(("weights", ["h1"], 10))
    assert lb[:weights] == [("out", "h1"), ("back", "h1")]  # the canary serves again before it gets traffic
    assert lb[weights + 1] == ("restore", True) and ("out", "h2") in lb[weights + 2:]
    assert sum(slept) == 30 and max(slept) <= 5  # baked in steps (Ctrl-C is heard)
    assert asked == [(PROM, ["h1"], ["h2", "h3", "h4"], 30,
                      {"max_error_ratio": 0.02, "max_latency_ratio": 1.2})]
    assert report["traffic_canary"]["verdict"]["ok"] is True and report["traffic_canary"]["set"] == "10% to the canary"


def test_a_breach_rolls_the_canary_back_restores_the_weights_and_fails(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger=ro.logger.name)
    rollout, calls, asked, slept = canary_rollout(tmp_path, monkeypatch, verdict(False))
    report = rollout.run()
    h1 = report["hosts"][0]
    assert (h1["status"], h1["failed_step"]) == ("rolled back", "canary gate")
    assert h1["message"] == "error ratio: canary 0.2 > max 0.01 (others 0) over 30s ending 2026-11-27T04:00:00Z"
    assert [h["status"] for h in report["hosts"][1:]] == ["not started"] * 3
    assert report["stopped"] == ("canary gate: error ratio: canary 0.2 > max 0.01 (others 0) over 30s ending "
                                 "2026-11-27T04:00:00Z: no further batches")
    assert report["failures"] == 1
    lb = rollout.lb.calls
    # weights back with the canary left out, then its rollback, then it rejoins
    assert lb[lb.index(("weights", ["h1"], 10)) + 1:] == [("restore", False), ("back", "h1")]
    assert [c for c in calls if c[0] == "h1"] == [("h1", "deploys/serve.py"), ("h1", "deploys/rollback.py")]
    assert not any(c[0] != "h1" for c in calls)
    assert report["traffic_canary"]["verdict"]["measures"][1]["metric"] == "error ratio"


def test_the_exit_code_and_the_printed_summary_name_the_breach(tmp_path, monkeypatch, capsys):
    from tritonfleet.access import inventory
    from tritonfleet.fleet import haproxy

    canary_rollout(tmp_path, monkeypatch, verdict(False))
    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: HOSTS: (_read(path), {}))
    monkeypatch.setattr(haproxy, "group_hosts", lambda members, hosts: [("lb1", {})])
    monkeypatch.setattr(haproxy, "HAProxy", lambda balancers, **kw: LB())
    monkeypatch.setattr(ro.time, "sleep", lambda s: None)
    assert ro.main(opts(tmp_path, bake=1)) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "traffic canary (10% for 1s): error ratio: canary 0.2 > max 0.01 (others 0) over 30s ending" in out
    assert "stopped: canary gate: error ratio" in out


def test_gates_that_cannot_be_evaluated_are_a_breach(tmp_path, monkeypatch):
    rollout, calls, asked, slept = canary_rollout(tmp_path, monkeypatch, gates.GateError("prometheus x: refused"))
    report = rollout.run()
    assert report["hosts"][0]["status"] == "rolled back"
    assert report["hosts"][0]["message"] == "gates not evaluated: prometheus x: refused"
    assert report["traffic_canary"]["error"] == "gates not evaluated: prometheus x: refused"


def test_weights_that_cannot_be_set_stop_the_rollout_and_are_restored(tmp_path, monkeypatch):
    rollout, calls, asked, slept = canary_rollout(tmp_path, monkeypatch, verdict(True), lb=LB(fail_set=True))
    report = rollout.run()
    assert report["stopped"] == "traffic canary: weights not set: ModifyListener: AccessDenied"
    assert ("restore", True) in rollout.lb.calls and not asked and not slept
    assert report["hosts"][0]["status"] == "updated"  # the canary itself is fine; the rollout stops


def test_an_interrupt_during_the_bake_restores_the_weights_and_stops(tmp_path, monkeypatch):
    rollout, calls, asked, slept = canary_rollout(tmp_path, monkeypatch, verdict(True))
    rollout.sleep = lambda s: setattr(rollout, "stop_requested", True)
    report = rollout.run()
    assert report["stopped"] == "interrupted" and not asked
    assert rollout.lb.calls[-1] == ("restore", True)


def test_a_canary_that_failed_its_deploy_gets_no_traffic(tmp_path, monkeypatch):
    rollout, calls, asked, slept = canary_rollout(tmp_path, monkeypatch, verdict(True), serve_fails={"h1"})
    rollout.opts.fail_percent = 100
    report = rollout.run()
    assert report["stopped"] == "canary hosts failed: no traffic canary, no further batches"
    assert not any(c[0] == "weights" for c in rollout.lb.calls) and not asked


# -- with the HAProxy driver against the fake HAProxy --------------------------------------------------------


def test_the_canary_bakes_with_haproxy_weights_and_they_are_restored(tmp_path, monkeypatch):
    from tests.unit.haproxy_fake import FakeHAProxy, LocalSession
    from tritonfleet.fleet.haproxy import HAProxy

    fake = FakeHAProxy()
    for name, _ in HOSTS:
        fake.add(f"{name}-triton", weight=100)
    sock = str(tmp_path / "admin.sock")
    server = fake.serve(sock)
    try:
        lb = HAProxy([("lb1", {})], socket=sock, servers=lambda name, data: ["triton"], interval=0,
                     connect=lambda name, data: LocalSession(name, []), sleep=lambda s: None)
        rollout, calls, asked, slept = canary_rollout(tmp_path, monkeypatch, verdict(True), lb=lb)
        during = []
        rollout.sleep = lambda s: (during.append({k[1]: v.weight for k, v in fake.servers.items()
                                                  if k[0] == "triton_http"}), setattr(rollout, "clock", lambda: 1e9))
        report = rollout.run()
    finally:
        server.shutdown()
        server.server_close()
    assert [h["status"] for h in report["hosts"]] == ["updated"] * 4
    # 10 % to 1 server of 4: w1 / (w1 + 3 w2) = 0.1 -> w1 : w2 = 1 : 3
    assert during == [{"h1-triton": 1, "h2-triton": 3, "h3-triton": 3, "h4-triton": 3}]
    assert {v.weight for v in fake.servers.values()} == {100} and {v.status for v in fake.servers.values()} == {"UP"}
    assert report["traffic_canary"]["set"] == "HAProxy weights: canary servers 1, the others 3: 10% to the canary"


# -- the command line ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, said", [
    (["--lb", "haproxy", "--canary-weight", "150", "--prometheus", PROM],
     "Error: --canary-weight 150: expected a percentage 0-100"),
    (["--lb", "haproxy", "--canary-weight", "10", "--bake", "120"],
     "Error: --canary-weight needs --prometheus: a traffic canary is judged by comparing its hosts' metrics with the "
     "others' (without one, roll out in batches without weights)"),
])
def test_the_command_line_refuses_bad_canaries_in_one_line(tmp_path, monkeypatch, args, said):
    from click.testing import CliRunner

    from tritonfleet.access import inventory
    from tritonfleet.face.rollout import rollout as command

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: pytest.fail("the inventory was read"): (_read(path), {}))
    deploy = tmp_path / "serve.py"
    deploy.write_text("")
    result = CliRunner().invoke(command, ["-i", "inv.py", "--deploy", str(deploy), *args])
    assert result.exit_code == 1 and result.output.strip() == said, result.output


def test_the_command_line_hands_every_canary_option_to_the_rollout(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from tritonfleet.face.rollout import rollout as command

    seen = []
    monkeypatch.setattr(ro, "main", lambda o: seen.append(o) or 0)
    deploy = tmp_path / "serve.py"
    deploy.write_text("")
    result = CliRunner().invoke(command, [
        "-i", "inv.py", "--deploy", str(deploy), "--lb", "elbv2", "--target-group", "arn:tg", "--canary-weight", "10",
        "--bake", "120", "--prometheus", PROM, "--max-error-ratio", "0.05", "--max-latency-ratio", "2",
        "--listener-arn", "arn:l", "--canary-target-group", "arn:c"])
    assert result.exit_code == 0, result.output
    (o,) = seen
    assert (o.lb, o.target_group, o.canary_weight, o.bake, o.prometheus, o.max_error_ratio, o.max_latency_ratio,
            o.listener_arn, o.rule_arn, o.canary_target_group) == (
        "elbv2", "arn:tg", 10, 120, PROM, 0.05, 2, "arn:l", None, "arn:c")
