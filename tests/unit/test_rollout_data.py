"""The rollout's options from the inventory's data (roles/rollout.py: ``rollout_lb``, ``rollout_canary_weight``,
``rollout_max_latency_ratio``, ...): unset command-line options take the hosts' one value, the command line wins,
and hosts that disagree or a value the settings refuse are one line naming host and field, before anything
changes (the inventory is read, no host is contacted)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tritonfleet.fleet import canary
from tritonfleet.fleet import rollout as ro

pytestmark = pytest.mark.pure

PROM = "http://prometheus.internal:9090"
DATA = {"rollout_lb": "haproxy", "rollout_canary_weight": 10, "rollout_bake": 60, "rollout_prometheus": PROM + "/",
        "rollout_max_error_ratio": 0.02, "rollout_max_latency_ratio": 2, "rollout_lb_timeout": 90}


def _hosts(**overrides) -> list[tuple[str, dict]]:
    return [(f"h{i}", {**DATA, **overrides.get(f"h{i}", {})}) for i in (1, 2, 3)]


def test_unset_options_come_from_the_hosts_data():
    o = canary.options_from_data(ro.Options(inventory="inv.py"), _hosts())
    assert (o.lb, o.canary_weight, o.bake, o.prometheus, o.max_error_ratio, o.max_latency_ratio, o.lb_timeout) == (
        "haproxy", 10, 60, PROM, 0.02, 2, 90)  # validated: the URL without its trailing slash


def test_the_command_line_wins():
    o = canary.options_from_data(ro.Options(inventory="inv.py", canary_weight=25, max_latency_ratio=3,
                                            given=frozenset({"canary_weight", "max_latency_ratio"})), _hosts())
    assert (o.canary_weight, o.max_latency_ratio, o.bake) == (25, 3, 60)


def test_without_data_the_options_stay_as_they_are():
    o = ro.Options(inventory="inv.py")
    assert canary.options_from_data(o, [("h1", {}), ("h2", {"rollout_lb": None})]) is o


def test_elbv2_in_the_data_means_a_target_group_when_one_is_given():
    o = canary.options_from_data(ro.Options(inventory="inv.py"), [("h1", {"rollout_lb": "elbv2"})])
    assert o.lb is None and o.lb_kind is None
    arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/triton/0123456789abcdef"
    o = canary.options_from_data(ro.Options(inventory="inv.py"), [("h1", {"rollout_target_group": arn})])
    assert o.lb_kind == "elbv2" and o.target_group == arn


@pytest.mark.parametrize("hosts, said", [
    (_hosts(h3={"rollout_canary_weight": 20}),
     "h3: rollout_canary_weight: 20 differs from h1's 10: a rollout has one value (set it for every host, e.g. in "
     "group_data/all.py, or pass --canary-weight)"),
    ([("h1", {"rollout_canary_weight": 150})], "h1: rollout_canary_weight: 150: Input should be less than or equal to 100"),
    ([("h1", {"rollout_prometheus": "prometheus:9090"})],
     "h1: rollout_prometheus: 'prometheus:9090': Value error, expected an http(s):// URL"),
    ([("h1", {"rollout_lb": "nginx"})], "h1: rollout_lb: 'nginx': Input should be 'elbv2' or 'haproxy'"),
    ([("h1", {"rollout_max_error_ratio": 2})],
     "h1: rollout_max_error_ratio: 2: Input should be less than or equal to 1"),
])
def test_disagreeing_or_bad_data_is_one_line_naming_host_and_field(hosts, said):
    with pytest.raises(ro.RolloutError) as info:
        canary.options_from_data(ro.Options(inventory="inv.py"), hosts)
    assert str(info.value) == said


def test_the_command_line_rollout_takes_the_data_and_refuses_a_canary_without_prometheus(tmp_path, monkeypatch):
    """End to end through the CLI: a weight in the data but no Prometheus anywhere is refused in one line after
    the inventory is read and before any host is contacted."""
    from tritonfleet.face.rollout import rollout as command

    inv = tmp_path / "inv.py"
    inv.write_text("fleet = (['h1', 'h2'], {'rollout_lb': 'haproxy', 'rollout_canary_weight': 10})\nlb = ['lb1']\n")
    deploy = tmp_path / "serve.py"
    deploy.write_text("")
    monkeypatch.setattr(ro, "rollback_point", lambda *a: pytest.fail("a host was contacted"))
    result = CliRunner().invoke(command, ["-i", str(inv), "--deploy", str(deploy), "--reports", str(tmp_path / "r")])
    assert result.exit_code == 1, result.output
    assert result.output.strip() == ("Error: --canary-weight needs --prometheus: a traffic canary is judged by "
                                     "comparing its hosts' metrics with the others' (without one, roll out in "
                                     "batches without weights)")
