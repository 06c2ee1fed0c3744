"""`tritonfleet status` shows a load-balancer host (a general-purpose instance type, the lb group) as the
balancer's view of its backends — each server up, draining, down or in maintenance, its weight and current
sessions — read over HAProxy's Runtime API, and never as a host without Triton servers."""

from __future__ import annotations

import pytest

from tests.unit.haproxy_fake import FakeHAProxy, LocalSession
from tritonfleet.face import status


@pytest.fixture
def balancer(tmp_path):
    fake = FakeHAProxy()
    for name in ("h1-triton", "h2-triton"):
        fake.add(name, weight=1)
    sock = str(tmp_path / "admin.sock")
    server = fake.serve(sock)
    yield fake, {"socket": sock, "connect": lambda name, data: LocalSession(name, [])}
    server.shutdown()
    server.server_close()


def test_a_general_purpose_host_is_a_balancer_an_accelerated_one_is_not():
    assert status.is_balancer({"instance_type": "c6i.large"})
    assert not status.is_balancer({"instance_type": "inf2.xlarge"})
    assert not status.is_balancer({"instance_type": "g5.xlarge"})
    assert not status.is_balancer({})  # unknown: read as a Triton host, which says what is wrong


def test_the_balancers_rows_are_its_view_of_every_backend_server(balancer):
    fake, kw = balancer
    fake.servers[("triton_http", "h1-triton")].status = "DRAIN"
    fake.servers[("triton_http", "h1-triton")].scur = 2
    fake.servers[("triton_grpc", "h2-triton")].status = "MAINT"
    rows = {r["server"]: r for r in status.balancer_rows("lb1", {"instance_type": "c6i.large"}, **kw)}
    assert sorted(rows) == ["triton_grpc/h1-triton", "triton_grpc/h2-triton", "triton_http/h1-triton",
                            "triton_http/h2-triton"]
    assert rows["triton_http/h1-triton"]["state"].startswith("draining (weight 1,")
    assert rows["triton_grpc/h2-triton"]["state"].startswith("maint")
    assert rows["triton_http/h2-triton"]["state"] == "up (weight 1, 0 sessions)"
    assert all(r["host"] == "lb1" and r["serving"] and "error" not in r for r in rows.values())


def test_a_balancer_that_cannot_be_asked_is_one_error_row(tmp_path):
    rows = status.balancer_rows("lb1", {"instance_type": "c6i.large"}, socket=str(tmp_path / "none.sock"),
                                connect=lambda name, data: LocalSession(name, []))
    assert len(rows) == 1 and rows[0]["host"] == "lb1" and not rows[0]["serving"]
    assert rows[0]["error"].startswith("load balancer: ")
