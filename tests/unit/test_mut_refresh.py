"""tritonfleet.fleet.refresh against stub Auto Scaling clients: the limits' edges, the preferences sent, the
one-line errors and what a sparse DescribeInstanceRefreshes answer means. Written for the mutants
``make mutate`` found surviving (docs/mutation-survivors.md)."""

from __future__ import annotations

import re

import pytest
from botocore.exceptions import ClientError

from tritonfleet.fleet import refresh
from tritonfleet.fleet.refresh import MAX_DELAY, describe_refresh, start_refresh, wait_refresh
from tritonfleet.fleet.tags import FleetError


def client_error(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "Operation")


class Asg:
    def __init__(self, fail: Exception | None = None, found: dict | None = None):
        self.fail, self.found, self.started = fail, found, []

    def start_instance_refresh(self, **kwargs):
        if self.fail:
            raise self.fail
        self.started.append(kwargs)
        return {"InstanceRefreshId": "r-1"}

    def describe_instance_refreshes(self, **kwargs):
        if self.fail:
            raise self.fail
        return self.found


@pytest.mark.parametrize("limits", [
    dict(min_healthy=100),
    dict(min_healthy=90, max_healthy=100),
    dict(min_healthy=100, max_healthy=200),
    dict(min_healthy=50, max_healthy=150),
    dict(checkpoints=[1, 100]),
    dict(checkpoints=[50], checkpoint_delay=0),
    dict(checkpoints=[50], checkpoint_delay=MAX_DELAY),
])
def test_the_edges_of_the_limits_are_allowed(limits):
    assert start_refresh(Asg(), "g", **limits) == "r-1"


@pytest.mark.parametrize("limits, said", [
    (dict(min_healthy=101), "min healthy 101%"),
    (dict(min_healthy=90, max_healthy=191), "max healthy 191%"),  # min + 101
    (dict(checkpoints=[101]), "checkpoints [101]"),
    (dict(checkpoints=[50], checkpoint_delay=MAX_DELAY + 1), f"checkpoint delay {MAX_DELAY + 1}"),
])
def test_past_the_edges_is_refused(limits, said):
    with pytest.raises(FleetError, match="^" + re.escape(said)):
        start_refresh(Asg(), "g", **limits)


def test_preferences_sent():
    asg = Asg()
    start_refresh(asg, "g")
    assert asg.started[-1]["Preferences"] == {"MinHealthyPercentage": 90, "SkipMatching": True}
    start_refresh(asg, "g", max_healthy=110)
    assert asg.started[-1]["Preferences"]["MaxHealthyPercentage"] == 110


def test_start_errors_are_one_line():
    busy = Asg(fail=client_error("InstanceRefreshInProgress", "busy"))
    with pytest.raises(FleetError) as info:
        start_refresh(busy, "g")
    assert str(info.value) == ("g: an instance refresh is already in progress; wait for it or cancel it "
                               "(aws autoscaling cancel-instance-refresh)")
    with pytest.raises(FleetError) as info:
        start_refresh(Asg(fail=client_error("AccessDenied", "not allowed")), "g")
    assert str(info.value) == "g: cannot start an instance refresh: AccessDenied: not allowed"


def test_describe_errors_are_one_line():
    with pytest.raises(FleetError) as info:
        describe_refresh(Asg(fail=client_error("Throttling", "slow down")), "g", "r-1")
    assert str(info.value) == ("g: cannot describe instance refresh r-1: AWS throttled the requests (Throttling: "
                               "slow down); run it again in a minute, or with fewer concurrent tritonfleet runs "
                               "against this account and region")
    with pytest.raises(FleetError, match="^g: instance refresh r-1 not found$"):
        describe_refresh(Asg(found={}), "g", "r-1")


def test_a_sparse_refresh_is_pending_at_zero_without_reason():
    outcome = describe_refresh(Asg(found={"InstanceRefreshes": [{}]}), "g", "r-1")
    assert (outcome.status, outcome.percent, outcome.reason) == ("Pending", 0, "")
    assert outcome.line() == "g: instance refresh r-1 pending (0% replaced)"


def test_wait_polls_every_30_s_for_at_most_2_hours(monkeypatch):
    seen = {}
    monkeypatch.setattr(refresh, "poll", lambda check, **kwargs: seen.update(kwargs))
    wait_refresh(Asg(), "g", "r-1")
    assert (seen["timeout"], seen["interval"]) == (7200, 30)
