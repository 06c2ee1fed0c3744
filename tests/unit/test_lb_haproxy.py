"""The HAProxy backend of the rollout's load balancer (tritonfleet/fleet/haproxy.py) against a small HAProxy
(tests/unit/haproxy_fake.py): its Runtime API on a real unix socket, spoken to by the driver's own ``python3 -c``
client run in a local shell as the lb host would run it. What it cannot show: a real HAProxy's health checks
and connection counts (the sandbox's e2e test drives a real one)."""

from __future__ import annotations

import shlex

import pytest

from tests.unit.haproxy_fake import FakeHAProxy, LocalSession
from tritonfleet.fleet import haproxy as hx
from tritonfleet.fleet.lb import LoadBalancer, LoadBalancerError

LB = ("lb1", {"ssh_hostname": "10.0.0.9"})
HOSTS = [("h1", {}), ("h2", {}), ("h3", {})]
SERVERS = {"h1": ["triton"], "h2": ["triton"], "h3": ["triton-a", "triton-b"]}


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s

    def clock(self):
        return self.now


@pytest.fixture
def fleet(tmp_path):
    fake = FakeHAProxy()
    for host, servers in SERVERS.items():
        for s in servers:
            fake.add(f"{host}-{s}", weight=1)
    sock = str(tmp_path / "admin.sock")
    server = fake.serve(sock)
    sent: list = []
    clock = Clock()
    lb = hx.HAProxy([LB], socket=sock, timeout=30, interval=2, servers=lambda name, data: SERVERS.get(name, []),
                    connect=lambda name, data: LocalSession(name, sent), sleep=clock.sleep, clock=clock.clock)
    yield fake, lb, sent, clock
    server.shutdown()
    server.server_close()


def test_it_is_a_load_balancer(fleet):
    assert isinstance(fleet[1], LoadBalancer)


def test_take_out_drains_both_backends_waits_for_the_sessions_then_maint(fleet):
    fake, lb, sent, clock = fleet
    fake.servers[("triton_http", "h1-triton")].scur = 3
    lb.take_out("h1", {})
    sets = [c for c in fake.log if c.startswith("set")]
    assert sets == ["set server triton_http/h1-triton state drain", "set server triton_grpc/h1-triton state drain",
                    "set server triton_http/h1-triton state maint", "set server triton_grpc/h1-triton state maint"]
    # three looks saw sessions ending (3 -> 2 -> 1 -> 0): it waited in between, maint came after the last
    assert fake.log.count("show stat") == 3 and clock.slept == [2, 2]
    assert all(root for _n, _c, root in sent) and {n for n, _c, _r in sent} == {"lb1"}


def test_a_drain_that_never_ends_names_the_servers_and_their_sessions(fleet):
    fake, lb, sent, clock = fleet
    fake.servers[("triton_grpc", "h3-triton-b")].scur = 10_000
    lb.timeout = 6
    with pytest.raises(LoadBalancerError) as info:
        lb.take_out("h3", {})
    assert str(info.value).startswith("h3: not drained (no current sessions) after 6s (lb1 triton_grpc/h3-triton-b: ")
    assert "current sessions, DRAIN" in str(info.value)
    assert not any("maint" in c for c in fake.log)  # never put in maintenance with sessions in flight
    assert clock.now == 6 and fake.log.count("show stat") == 4  # a look at 0, 2, 4 and at the deadline


def test_put_back_waits_until_the_health_checks_pass(fleet):
    fake, lb, sent, clock = fleet
    lb.take_out("h3", {})
    assert {s.status for k, s in fake.servers.items() if k[1].startswith("h3")} == {"MAINT"}
    lb.put_back("h3", {})
    assert {s.status for k, s in fake.servers.items() if k[1].startswith("h3")} == {"UP"}
    assert [c for c in fake.log if c.endswith("ready")] == [f"set server {b}/h3-{s} state ready"
                                                            for s in ("triton-a", "triton-b")
                                                            for b in ("triton_http", "triton_grpc")]


def test_a_changed_server_that_fails_its_checks_is_not_taken_for_up_by_a_stale_state(fleet):
    """HAProxy leaves maintenance in the health the server had before (UP) until its next check, and ignores a
    health forced in maintenance: put back drains (out of maintenance, no new requests), forces the health down,
    and readies the server only once its checks passed (the sandbox e2e test found a changed server that never
    answered the balancer counted as back, and a request sent to it)."""
    fake, lb, sent, clock = fleet
    lb.take_out("h1", {})
    for b in ("triton_http", "triton_grpc"):
        fake.servers[(b, "h1-triton")].healthy = False  # the change broke it
    lb.timeout = 6
    with pytest.raises(LoadBalancerError, match="h1: not UP in HAProxy after 6s"):
        lb.put_back("h1", {})
    sets = [c for c in fake.log if c.startswith("set server triton_http/h1-triton")]
    assert sets[-3:-1] == ["set server triton_http/h1-triton state drain", "set server triton_http/h1-triton health down"]
    assert fake.servers[("triton_http", "h1-triton")].status == "DOWN"  # no request reached it
    # left ready, as an ELBv2 target stays registered: its checks alone decide when it gets requests again
    assert sets[-1] == "set server triton_http/h1-triton state ready" and fake.servers[
        ("triton_http", "h1-triton")].admin == "ready"


def test_a_server_that_never_turns_up_is_said_with_haproxys_last_check(fleet):
    fake, lb, sent, clock = fleet
    lb.take_out("h2", {})
    fake.servers[("triton_http", "h2-triton")].healthy = False
    lb.timeout = 4
    with pytest.raises(LoadBalancerError) as info:
        lb.put_back("h2", {})
    assert str(info.value) == ("h2: not UP in HAProxy after 4s (lb1 triton_http/h2-triton: DOWN (check: L4CON "
                               "Connection refused))")


def test_check_refuses_a_host_haproxy_does_not_know_before_anything_changes(fleet):
    fake, lb, sent, clock = fleet
    lb.check(HOSTS)
    with pytest.raises(LoadBalancerError) as info:
        lb.check([("h9", {})])
    assert str(info.value).startswith("h9: triton_servers: no Triton server is placed on it")
    del fake.servers[("triton_grpc", "h2-triton")]
    with pytest.raises(LoadBalancerError) as info:
        lb.check(HOSTS)
    assert str(info.value) == ("h2: HAProxy on lb1 has no server triton_grpc/h2-triton (apply deploys/lb.py after "
                               "changing the inventory)")
    assert not any(c.startswith("set") for c in fake.log)


def test_an_lb_group_without_hosts_is_refused():
    with pytest.raises(LoadBalancerError, match="^rollout_lb haproxy: the inventory's lb group has no hosts"):
        hx.HAProxy([])


def test_a_refused_command_is_one_line_naming_it(fleet):
    fake, lb, sent, clock = fleet
    lb._servers = lambda name, data: ["gone"]
    with pytest.raises(LoadBalancerError) as info:
        lb.take_out("h1", {})
    assert str(info.value) == "lb1: HAProxy refused `set server triton_http/h1-gone state drain`: No such server."


def test_a_socket_that_cannot_be_reached_is_one_line(fleet, tmp_path):
    fake, lb, sent, clock = fleet
    lb.socket = str(tmp_path / "missing.sock")
    with pytest.raises(LoadBalancerError) as info:
        lb.view()
    assert str(info.value) == f"lb1: HAProxy Runtime API {lb.socket}: FileNotFoundError: [Errno 2] No such file or directory"


def test_every_value_in_the_command_line_is_quoted(fleet):
    fake, lb, sent, clock = fleet
    lb.socket = "/tmp/x y; touch pwned"
    with pytest.raises(LoadBalancerError):
        lb.view()
    (_n, command, _r), = sent
    words = shlex.split(command)
    assert words[:2] == ["python3", "-c"] and words[3:] == ["/tmp/x y; touch pwned", "show stat"]


def test_weights_send_the_percent_to_the_canary_and_restore_the_configured_weights(fleet):
    fake, lb, sent, clock = fleet
    fake.servers[("triton_http", "h2-triton")].iweight = fake.servers[("triton_http", "h2-triton")].weight = 7
    said = lb.set_weights([("h1", {})], 10)
    w = {k: s.weight for k, s in fake.servers.items()}
    # 1 canary server of 4 per backend: 10% -> w1 / (w1 + 3 * w2) = 0.1 -> w1 / w2 = 1/3
    assert w[("triton_http", "h1-triton")] * 3 * 9 == w[("triton_http", "h2-triton")] * 3 * 3
    assert said == "HAProxy weights: canary servers 1, the others 3: 10% to the canary"
    assert {w[k] for k in w if k[1] != "h1-triton"} == {3}
    view = {(v.pool, v.server): v for v in lb.view()}
    assert view[("triton_grpc", "h1-triton")].weight == 1 and view[("triton_grpc", "h1-triton")].host == "h1"
    lb.restore_weights()
    assert {k: s.weight for k, s in fake.servers.items()} == {k: s.iweight for k, s in fake.servers.items()}
    assert fake.servers[("triton_http", "h2-triton")].weight == 7


def test_restore_without_rejoin_drains_the_canary_first(fleet):
    fake, lb, sent, clock = fleet
    lb.set_weights([("h1", {})], 50)
    lb.restore_weights(rejoin=False)
    assert fake.servers[("triton_http", "h1-triton")].status == "MAINT"
    first_weight_back = max(i for i, c in enumerate(fake.log) if c.endswith("weight 1"))
    assert fake.log.index("set server triton_http/h1-triton state maint") < first_weight_back


def test_the_view_says_state_weight_and_sessions(fleet):
    fake, lb, sent, clock = fleet
    fake.servers[("triton_http", "h1-triton")].status = "DRAIN"
    fake.servers[("triton_http", "h1-triton")].scur = 4
    fake.servers[("triton_http", "h2-triton")].status = "MAINT"
    fake.servers[("triton_http", "h3-triton-a")].status = "DOWN"
    fake.servers[("triton_http", "h3-triton-a")].healthy = False
    view = {(v.pool, v.server): v for v in lb.view()}
    assert len(view) == 8
    assert (view[("triton_http", "h1-triton")].state, view[("triton_http", "h1-triton")].sessions) == ("draining", 3)
    assert view[("triton_http", "h2-triton")].state == "maint"
    assert view[("triton_http", "h3-triton-a")].state == "down"
    assert view[("triton_grpc", "h3-triton-a")].state == "up" and view[("triton_grpc", "h3-triton-a")].balancer == "lb1"


@pytest.mark.parametrize("checks, ceiling, want", [
    ([None], 5, 2.0),  # HAProxy's default check interval (roles/lb.py), under the rollout's lb_delay
    ([500], 5, 0.5), ([500, 3000], 5, 0.5),  # the shortest of the lb hosts' intervals
    ([100], 5, hx.MIN_POLL_SECONDS),  # never busier than MIN_POLL_SECONDS
    ([20000], 5, 5), ([2000], 1, 1),  # never slower than lb_delay
    (["2000"], 5, 2.0), ([0], 5, 2.0), ([True], 5, 2.0)])  # not a positive number: the default
def test_the_poll_interval_follows_haproxys_check_interval(checks, ceiling, want):
    lbs = [(f"lb{i}", {} if c is None else {"lb_check_interval_ms": c}) for i, c in enumerate(checks)]
    assert hx.poll_interval(lbs, ceiling) == want


def test_the_poll_interval_default_is_the_lb_roles():
    from roles.lb import Settings

    assert Settings().check_interval_ms == hx.CHECK_INTERVAL_MS


@pytest.mark.parametrize("canary, rest, percent, want", [
    (1, 3, 10, (1, 3, 10.0)), (1, 1, 50, (1, 1, 50.0)), (2, 8, 20, (1, 1, 20.0)), (1, 9, 0, (0, 256, 0.0)),
    (1, 9, 100, (256, 0, 100.0)), (1, 1, 1, (1, 99, 1.0))])
def test_canary_weights(canary, rest, percent, want):
    assert hx.canary_weights(canary, rest, percent) == want


def test_canary_weights_are_within_half_a_percent_and_inside_haproxys_range():
    for canary in (1, 2, 3, 7):
        for rest in (1, 2, 5, 40):
            for percent in range(1, 100):
                wc, wr, share = hx.canary_weights(canary, rest, percent)
                assert 1 <= wc <= 256 and 1 <= wr <= 256
                assert share == round(100 * canary * wc / (canary * wc + rest * wr), 2)
                most = 100 * canary * 256 / (canary * 256 + rest)  # the canary at 256, the others at 1
                least = 100 * canary / (canary + rest * 256)
                if least + 0.5 <= percent <= most - 0.5:
                    assert abs(share - percent) < 0.5, (canary, rest, percent)
                else:  # beyond what weights 1-256 can express: the nearest end, and the share says so
                    assert share in (round(most, 2), round(least, 2)) or abs(share - percent) < 0.5


def test_a_share_weights_cannot_express_is_the_nearest_one_and_said():
    assert hx.canary_weights(1, 40, 99) == (256, 1, 86.49)


def test_canary_weights_outside_0_100_are_refused():
    with pytest.raises(LoadBalancerError, match="canary weight 101: expected a percentage 0-100"):
        hx.canary_weights(1, 1, 101)


# a `show stat` of HAProxy 2.6 (its management guide's column order), cut after check_health
SAMPLE = """\
# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_desc,agent_desc,check_rise,check_fall,check_health
triton_http,FRONTEND,,,2,9,20000,120,5120,8800,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,1,0,9,,,,0,118,0,2,0,0,,1,9,120,,,0,0,0,0,,,,,,,,,,,,,,,
triton_http,sbx-01-triton,0,0,2,5,,60,2560,4400,,0,,0,0,0,0,UP,100,1,0,0,0,812,0,,1,3,1,,60,,2,0,,5,L7OK,200,1,0,59,0,1,0,0,,,,,0,0,,,,,3,OK,,0,0,2,3,,,,Layer7 check passed,,2,3,4
triton_http,sbx-02-triton,0,0,0,4,,58,2560,4400,,0,,0,0,0,0,DRAIN,0,1,0,0,0,5,0,,1,3,2,,58,,2,0,,4,L7OK,200,1,0,58,0,0,0,0,,,,,0,0,,,,,5,OK,,0,0,2,3,,,,Layer7 check passed,,2,3,4
triton_http,sbx-03-triton,0,0,0,0,,0,0,0,,0,,0,0,0,0,MAINT,0,1,0,1,1,30,30,,1,3,3,,0,,2,0,,0,L4CON,,0,0,0,0,0,0,0,,,,,0,0,,,,,-1,Connection refused,,,,,,,,,Connection refused,,2,3,0
triton_http,sbx-04-triton,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN 1/2,100,1,0,2,1,4,4,,1,3,4,,0,,2,0,,0,L7STS,503,2,0,0,0,0,0,0,,,,,0,0,,,,,-1,HTTP status check returned code <3C>503<3E>,,,,,,,,,HTTP status check returned code <3C>503<3E>,,2,3,1
triton_http,BACKEND,0,0,2,9,2000,120,5120,8800,0,0,,0,0,0,0,UP,200,2,0,,0,812,0,,1,3,0,,118,,1,1,,9,,,,0,118,0,2,0,0,,,,120,0,0,0,0,0,0,3,,,0,0,2,3,,,,,,,,
"""


def test_show_stat_is_parsed_by_column_name():
    stats = {s.server: s for s in hx.parse_stat(SAMPLE)}
    assert set(stats) == {"sbx-01-triton", "sbx-02-triton", "sbx-03-triton", "sbx-04-triton"}
    one, two, three, four = (stats[f"sbx-0{i}-triton"] for i in range(1, 5))
    assert (one.scur, one.weight, one.status, one.state) == (2, 100, "UP", "up")
    assert (two.state, two.weight, three.state, four.state) == ("draining", 0, "maint", "down")
    assert three.check == "L4CON Connection refused" and one.backend == "triton_http"


def test_a_reply_that_is_not_show_stat_is_one_line():
    with pytest.raises(LoadBalancerError, match="^show stat: unexpected reply: Permission denied.$"):
        hx.parse_stat("Permission denied.\n")


def test_server_names_are_those_of_roles_lb():
    lb_role = pytest.importorskip("roles.lb")
    for host, server in (("sbx-01", "triton"), ("@ssh/10.0.0.1", "triton-0")):
        assert hx.server_name(host, server) == lb_role.server_name(host, server)
    assert (lb_role.BACKEND_HTTP, lb_role.BACKEND_GRPC) == hx.BACKENDS and lb_role.SOCKET == hx.SOCKET


def test_restore_puts_back_the_configured_weight_even_after_a_rollout_that_died_mid_bake(fleet):
    fake, lb, sent, clock = fleet
    fake.servers[("triton_http", "h2-triton")].weight = 3  # left by a killed rollout; configured: 1
    lb.set_weights([("h1", {})], 10)
    lb.restore_weights()
    assert {s.weight for s in fake.servers.values()} == {1}
