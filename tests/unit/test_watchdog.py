"""The host watchdog's decision core (tritonfleet/agent/watchdog.py) and its policy
(tritonfleet/agent/watchpolicy.py): each condition at its thresholds, the bounds (restart budget, escalation,
replace cooldown, hysteresis), the policy data and its one-line errors, the Prometheus textfile, and the names
watchdog re-exports. Pure: samples carry their time, nothing sleeps. The probes' parsers: test_probes.py."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import stat
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonfleet.agent import probes, watchpolicy
from tritonfleet.agent import watchdog as wd
from tritonfleet.agent.watchdog import Watchdog
from tritonfleet.agent.watchpolicy import (
    DEFAULT_CHAINS,
    Action,
    HostSample,
    Policy,
    PolicyError,
    ServerSample,
)

MiB = 1024 * 1024
T0 = 1_764_000_000.0


def srv(at: float, ready: bool = True, restarts: int = 0, rss: int = 1024 * MiB,
        models: dict[str, bool] | None = None, name: str = "triton-0") -> ServerSample:
    return ServerSample(name, T0 + at, ready, restarts, rss, dict(models or {}))


def host(at: float, **kw: Any) -> HostSample:
    return HostSample(T0 + at, **kw)


def policy(**data: Any) -> Policy:
    return Policy.from_data(data)


Step = tuple[list[ServerSample], HostSample | None]


def feed(w: Watchdog, steps: list[Step]) -> list[tuple[float, Action]]:
    """Every action with the time (relative to T0) of the step that returned it."""
    out = []
    for servers, h in steps:
        now = max([s.at for s in servers] + ([h.at] if h else []))
        out += [(now - T0, a) for a in w.observe(servers, h)]
    return out


# -- policy data -----------------------------------------------------------------------------------------

def test_defaults_are_the_documented_policy():
    doc = watchpolicy.__doc__ or ""
    block = doc[doc.index("**Policy data**"):]  # the docstring's last block
    documented = json.loads(block[block.index("{"):block.rindex("}") + 1])
    assert Policy.from_data(documented) == Policy() == Policy.from_data(None) == Policy.from_json("{}")
    assert Policy().chains == DEFAULT_CHAINS
    assert DEFAULT_CHAINS["foreign_cores"] == ("report",)  # report-only unless someone says otherwise
    assert Policy().allow_free_cores is False and Policy().max_restarts_per_hour == 3


def test_a_chain_replaces_its_default_only_and_an_empty_chain_turns_the_condition_off():
    p = policy(leak=["restart", "replace"], crash_loop=[], settle_seconds=0)
    assert p.chains["leak"] == ("restart", "replace")
    assert p.chains["crash_loop"] == ()
    assert p.chains["not_ready"] == DEFAULT_CHAINS["not_ready"]
    w = Watchdog(p)
    assert not feed(w, [([srv(i * 10, restarts=i)], None) for i in range(10)])  # a crash loop, off


@pytest.mark.parametrize(("data", "field"), [
    ({"leek": ["restart"]}, "leek"),
    ({"leak": "restart"}, "leak"),
    ({"leak": ["reboot"]}, "leak"),
    ({"leak": ["restart", "restart"]}, "leak"),
    ({"crash_loop": ["report", "restart"]}, "crash_loop"),
    ({"gpu_ecc": ["restart"]}, "gpu_ecc"),
    ({"leak": ["free-cores"], "allow_free_cores": True}, "leak"),
    ({"foreign_cores": ["free-cores", "report"]}, "foreign_cores"),
    ({"leak_window_seconds": -5}, "leak_window_seconds"),
    ({"leak_window_seconds": 0}, "leak_window_seconds"),
    ({"not_ready_seconds": "60"}, "not_ready_seconds"),
    ({"settle_seconds": float("nan")}, "settle_seconds"),
    ({"crash_restarts": 2.5}, "crash_restarts"),
    ({"crash_restarts": 0}, "crash_restarts"),
    ({"leak_min_samples": 2}, "leak_min_samples"),
    ({"max_restarts_per_hour": True}, "max_restarts_per_hour"),
    ({"max_restarts_per_hour": -1}, "max_restarts_per_hour"),
    ({"allow_free_cores": "yes"}, "allow_free_cores"),
])
def test_bad_policy_data_is_refused_in_one_line_naming_the_field(data, field):
    with pytest.raises(PolicyError) as exc:
        Policy.from_data(data)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"watchdog policy: {field}: "), message


def test_bad_policy_documents_are_refused_in_one_line():
    for text, words in (("{", "not valid JSON"), ("[1, 2]", "must be an object"),
                        ('"leak"', "must be an object")):
        with pytest.raises(PolicyError, match=words) as exc:
            Policy.from_json(text)
        assert "\n" not in str(exc.value)


def test_free_cores_is_refused_without_the_setting_and_taken_with_it():
    with pytest.raises(PolicyError,
                       match=r"^watchdog policy: foreign_cores: 'free-cores' needs allow_free_cores"):
        policy(foreign_cores=["free-cores"])
    with pytest.raises(PolicyError, match="allow_free_cores"):
        Policy(chains={"foreign_cores": ("free-cores",)})  # built in code: checked the same
    assert policy(foreign_cores=["free-cores", "report"], allow_free_cores=True).chains["foreign_cores"] == \
        ("free-cores", "report")


def test_zero_is_a_valid_setting_where_it_means_something():
    p = policy(settle_seconds=0, replace_cooldown_seconds=0, max_restarts_per_hour=0, leak_min_growth_pct=0)
    assert (p.settle_seconds, p.max_restarts_per_hour) == (0.0, 0)


def test_journal_lines_are_one_line():
    a = Action("restart", "triton-0", "leak", "rss grew 512 MiB/h over 600 s\n(1.2 GiB -> 1.3 GiB)")
    assert a.journal_line() == "watchdog: restart server triton-0: leak: rss grew 512 MiB/h over 600 s " \
                               "(1.2 GiB -> 1.3 GiB)"
    assert a.labels() == ("triton-0", "leak", "restart")
    assert Action("report", None, "foreign_cores", "x").labels() == ("", "foreign_cores", "report")


# -- conditions, each at its threshold -------------------------------------------------------------------

def kinds(actions: list[tuple[float, Action]]) -> list[tuple[float, str, str]]:
    return [(t, a.reason, a.kind) for t, a in actions]


@pytest.mark.parametrize(("last", "fires"), [(119, False), (120, True)])
def test_not_ready_fires_at_not_ready_seconds(last, fires):
    w = Watchdog(policy(not_ready=["report"], not_ready_seconds=120))
    got = feed(w, [([srv(t, ready=False)], None) for t in (0, 60, last)])
    assert kinds(got) == ([(last, "not_ready", "report")] if fires else [])
    if fires:
        assert got[0][1].journal_line() == "watchdog: report server triton-0: not_ready: not ready for 120 s"


def test_not_ready_counts_from_the_last_ready_sample():
    w = Watchdog(policy(not_ready=["report"], not_ready_seconds=120))
    steps = [([srv(0, ready=False)], None), ([srv(60, ready=True)], None)]
    steps += [([srv(t, ready=False)], None) for t in (100, 150, 219)]
    assert feed(w, steps) == []
    assert kinds(feed(w, [([srv(220, ready=False)], None)])) == [(220, "not_ready", "report")]


# restart counts: (time, count) pairs; crash_restarts 3 in 600 s
@pytest.mark.parametrize(("series", "fires"), [
    ([(0, 0), (100, 1), (200, 2), (300, 3)], True),
    ([(0, 0), (100, 1), (200, 2), (300, 2)], False),
    ([(0, 0), (100, 1), (200, 2), (700, 3)], True),  # the increment seen at now - 600 is in the window
    ([(0, 0), (100, 1), (200, 2), (701, 3)], False),  # ... and one a second earlier is not
    ([(0, 5), (100, 0), (200, 1), (300, 2)], False),  # a new container: the drop is no growth
    ([(0, 5), (100, 0), (200, 1), (300, 3)], True),
])
def test_crash_loop_fires_at_crash_restarts_within_the_window(series, fires):
    w = Watchdog(policy(crash_loop=["report"], crash_restarts=3, crash_window_seconds=600))
    got = feed(w, [([srv(t, restarts=n)], None) for t, n in series])
    assert kinds(got) == ([(series[-1][0], "crash_loop", "report")] if fires else [])


def linear(rate_mib_per_min: float, base_mib: float = 100, step: int = 60,
           count: int = 11) -> list[tuple[int, int]]:
    return [(i * step, int((base_mib + rate_mib_per_min * i * step / 60) * MiB)) for i in range(count)]


LEAK = {"leak": ["report"], "leak_window_seconds": 600, "leak_min_samples": 5}


@pytest.mark.parametrize(("settings_", "fires"), [
    # 1 MiB a minute from 100 MiB over 600 s: exactly 60 MiB/h, exactly 10 % growth (9 % at 540 s)
    ({"leak_mib_per_hour": 60, "leak_min_growth_pct": 9.5}, False),
    ({"leak_mib_per_hour": 59.9, "leak_min_growth_pct": 9.5}, True),
    ({"leak_mib_per_hour": 30, "leak_min_growth_pct": 10}, False),
    ({"leak_mib_per_hour": 30, "leak_min_growth_pct": 9.9}, True),
    ({"leak_mib_per_hour": 30, "leak_min_growth_pct": 9.5, "leak_min_samples": 12}, False),  # 11 samples
    ({"leak_mib_per_hour": 30, "leak_min_growth_pct": 9.5, "leak_min_samples": 11}, True),
])
def test_leak_fires_above_its_rate_and_growth_with_enough_samples(settings_, fires):
    w = Watchdog(policy(**{**LEAK, **settings_}))
    got = feed(w, [([srv(t, rss=rss)], None) for t, rss in linear(1)])
    assert kinds(got) == ([(600, "leak", "report")] if fires else [])
    if fires:
        assert got[0][1].detail == "rss grew 60 MiB/h over 600 s (100 MiB -> 110 MiB)"


@pytest.mark.parametrize(("last", "fires"), [(840, False), (900, True)])
def test_leak_needs_samples_over_half_the_window(last, fires):
    """A server that just started grows while it loads its models: no verdict before half a window."""
    w = Watchdog(policy(leak=["report"], leak_window_seconds=1800, leak_min_samples=5, leak_mib_per_hour=10,
                        leak_min_growth_pct=1))
    points = [(t, 1024 * MiB + t * 100 * MiB // 60) for t in range(0, last + 1, 60)]
    assert kinds(feed(w, [([srv(t, rss=rss)], None) for t, rss in points])) == \
        ([(last, "leak", "report")] if fires else [])


def sawtooth(t: float, period: float = 300, amplitude_mib: float = 200) -> float:
    """A garbage collector's memory: up by 2400 MiB/h within a tooth, back to the floor at each collection."""
    return 1024 * MiB + amplitude_mib * MiB * ((t % period) / period)


def run_memory(fn, seconds: int = 7200, step: int = 15) -> list[tuple[float, Action]]:
    w = Watchdog(policy(leak=["report"]))  # the default thresholds: 1800 s, 256 MiB/h, 10 %, 10 samples
    return feed(w, [([srv(t, rss=int(fn(t)))], None) for t in range(0, seconds, step)])


@pytest.mark.parametrize(("period", "amplitude"), [(300, 200), (120, 400), (600, 400), (900, 300)])
def test_a_garbage_collectors_sawtooth_is_no_leak(period, amplitude):
    assert run_memory(lambda t: sawtooth(t, period, amplitude)) == []


def test_a_linear_growth_is_a_leak_and_so_is_one_under_a_sawtooth():
    for fn in (lambda t: 1024 * MiB + 600 * MiB * t / 3600, lambda t: sawtooth(t) + 600 * MiB * t / 3600):
        got = run_memory(fn)
        assert got and got[0][0] == 900 and got[0][1].reason == "leak"  # as soon as half a window is seen
        assert re.fullmatch(r"rss grew \d+ MiB/h over 900 s \(1\.0 GiB -> 1\.\d GiB\)", got[0][1].detail)


def test_a_new_process_starts_a_new_leak_window():
    """Memory that drops with a restart (the container's count grew) is no part of the next fit."""
    w = Watchdog(policy(leak=["report"], leak_window_seconds=600, leak_min_samples=5, leak_mib_per_hour=30,
                        leak_min_growth_pct=5))
    before = [([srv(t, rss=rss)], None) for t, rss in linear(1, count=6)]  # 0..300 s
    after = [([srv(300 + t, restarts=1, rss=rss)], None) for t, rss in linear(1, count=6)[1:]]  # 360..600 s
    assert feed(w, before + after) == []  # 5 samples of the new process over 240 s: too short
    rest = [([srv(300 + t, restarts=1, rss=rss)], None) for t, rss in linear(1, count=11)[6:]]
    assert len(feed(w, rest)) == 1


def test_model_unready_fires_for_a_model_that_was_ready():
    w = Watchdog(policy(model_unready=["report"]))
    got = feed(w, [
        ([srv(0, models={"bert": False, "resnet": True})], None),  # bert still loading: not "was ready"
        ([srv(10, models={"bert": False, "resnet": True})], None),
        ([srv(20, ready=False, models={"bert": False, "resnet": False})], None),  # the server's own condition
    ])
    assert got == []
    got = feed(w, [([srv(30, models={"bert": True, "resnet": False})], None)])
    assert kinds(got) == [(30, "model_unready", "report")]
    assert got[0][1].detail == "not ready any more: resnet"


def test_what_a_server_that_is_not_ready_lists_is_not_used():
    w = Watchdog(policy(model_unready=["report"], not_ready=[]))
    steps = [([srv(0, models={"bert": True})], None), ([srv(10, ready=False, models={})], None),
             ([srv(20, models={"bert": False})], None)]  # still the bert that was ready: it failed
    assert kinds(feed(w, steps)) == [(20, "model_unready", "report")]


def test_a_model_no_longer_listed_was_unloaded_and_is_forgotten():
    w = Watchdog(policy(model_unready=["report"]))
    steps = [([srv(0, models={"bert": True})], None), ([srv(10, models={})], None),
             ([srv(20, models={"bert": False})], None)]  # loaded again: loading, not failed
    assert feed(w, steps) == []


NEURON = {"neuron_hw_error": ["report"]}


@pytest.mark.parametrize(("counters", "fires"), [
    ({"device0.mem_ecc_uncorrected": 6}, True),
    ({"device0.sram_ecc_uncorrected": 1}, True),
    ({"runtime.triton-0.hardware": 3}, True),
    ({"device0.mem_ecc_uncorrected": 5}, False),  # unchanged
    ({"device0.mem_ecc_corrected": 99}, False),  # corrected: no hardware error
    ({"runtime.triton-0.numerical": 7}, False),  # the model's, not the hardware's
    ({"device0.mem_ecc_uncorrected": 0}, False),  # dropped: a new baseline
])
def test_neuron_hw_error_fires_when_an_uncorrectable_counter_grows(counters, fires):
    w = Watchdog(policy(**NEURON))
    base = {"device0.mem_ecc_uncorrected": 5, "device0.mem_ecc_corrected": 10,
            "device0.sram_ecc_uncorrected": 0,
            "runtime.triton-0.hardware": 2, "runtime.triton-0.numerical": 0}
    assert feed(w, [([], host(0, neuron_errors=base))]) == []  # the first sample is the baseline
    got = feed(w, [([], host(10, neuron_errors={**base, **counters}))])
    assert kinds(got) == ([(10, "neuron_hw_error", "report")] if fires else [])
    if fires:
        (name, value), = counters.items()
        assert got[0][1].detail == f"{name} {base[name]} -> {value}" and got[0][1].server is None


def test_the_first_host_sample_is_the_baseline_and_a_counter_first_seen_later_starts_at_zero():
    w = Watchdog(policy(**NEURON, gpu_xid=["report"], gpu_ecc=["report"]))
    first = host(0, neuron_errors={"device0.mem_ecc_uncorrected": 4}, gpu_xid=3, gpu_ecc_dbe=1)
    assert feed(w, [([], first)]) == []
    got = feed(w, [([], host(10, neuron_errors={"device0.mem_ecc_uncorrected": 4, "runtime.new.hardware": 1},
                              gpu_xid=3, gpu_ecc_dbe=1))])
    assert [(a.reason, a.detail) for _, a in got] == [("neuron_hw_error", "runtime.new.hardware 0 -> 1")]


@pytest.mark.parametrize(("condition", "field", "label"), [
    ("gpu_xid", "gpu_xid", "Xid events"), ("gpu_ecc", "gpu_ecc_dbe", "uncorrected ECC errors")])
@pytest.mark.parametrize(("after", "fires"), [(2, False), (3, True)])
def test_gpu_counters_fire_when_they_grow(condition, field, label, after, fires):
    w = Watchdog(policy(**{condition: ["report"]}))
    got = feed(w, [([], host(0, **{field: 2})), ([], host(10, **{field: after}))])
    assert kinds(got) == ([(10, condition, "report")] if fires else [])
    if fires:
        assert got[0][1].journal_line() == f"watchdog: report host: {condition}: {label} 2 -> 3"


def test_foreign_cores_are_reported_by_default():
    w = Watchdog()
    got = feed(w, [([], host(0, foreign_core_pids={4242: [1, 0], 77: [4]}))])
    assert [a.journal_line() for _, a in got] == [
        "watchdog: report host: foreign_cores: pid 77 holds cores 4; pid 4242 holds cores 0-1"]
    assert feed(w, [([], host(700, foreign_core_pids={}))]) == []


# -- bounds ----------------------------------------------------------------------------------------------

def test_the_restart_budget_then_escalation():
    p = policy(not_ready=["restart", "replace", "report"], not_ready_seconds=60, settle_seconds=100,
               max_restarts_per_hour=2, replace_cooldown_seconds=100000)
    w = Watchdog(p)
    got = feed(w, [([srv(t, ready=False)], None) for t in range(0, 3800, 10)])
    assert kinds(got)[:4] == [(60, "not_ready", "restart"), (160, "not_ready", "restart"),
                              (260, "not_ready", "replace"), (360, "not_ready", "report")]
    assert "escalated: restart budget spent (2 in the last hour)" in got[2][1].detail
    assert "replace already asked 100 s ago" in got[3][1].detail
    # the restart at 60 s still counts at 3660 s (an hour, both ends included), no longer at 3760 s
    assert (3660, "not_ready", "report") in kinds(got)
    assert kinds(got)[-1] == (3760, "not_ready", "restart")
    assert w.restarts_in_last_hour("triton-0", T0 + 3790) == 1
    assert w.counts == {("triton-0", "not_ready", "restart"): 3, ("triton-0", "not_ready", "replace"): 1,
                        ("triton-0", "not_ready", "report"): len(got) - 4}


def test_a_chain_with_nothing_left_still_says_so():
    w = Watchdog(policy(not_ready=["restart"], not_ready_seconds=10, settle_seconds=0,
                        max_restarts_per_hour=1))
    got = feed(w, [([srv(t, ready=False)], None) for t in (0, 10, 20)])
    assert kinds(got) == [(10, "not_ready", "restart"), (20, "not_ready", "report")]
    assert got[1][1].detail.endswith("; nothing left to do: restart budget spent (1 in the last hour)")


@pytest.mark.parametrize(("again", "kind"), [(1009, "report"), (1010, "replace")])
def test_replace_at_most_once_per_cooldown(again, kind):
    w = Watchdog(policy(gpu_ecc=["replace"], replace_cooldown_seconds=1000, settle_seconds=0))
    got = feed(w, [([], host(0, gpu_ecc_dbe=0)), ([], host(10, gpu_ecc_dbe=1)), ([], host(20, gpu_ecc_dbe=2)),
                   ([], host(again, gpu_ecc_dbe=3))])
    assert kinds(got) == [(10, "gpu_ecc", "replace"), (20, "gpu_ecc", "report"), (again, "gpu_ecc", kind)]
    assert got[1][1].journal_line() == ("watchdog: report host: gpu_ecc: uncorrected ECC errors 1 -> 2; "
                                        "nothing left to do: replace already asked 10 s ago")


def test_a_replace_for_a_server_names_it():
    w = Watchdog(policy(not_ready=["replace"], not_ready_seconds=10))
    got = feed(w, [([srv(t, ready=False)], None) for t in (0, 10)])
    assert got[0][1].journal_line() == \
        "watchdog: replace host for server triton-0: not_ready: not ready for 10 s"


@pytest.mark.parametrize(("later", "fires"), [(309, False), (310, True)])
def test_hysteresis_waits_settle_seconds_even_when_the_condition_flaps(later, fires):
    w = Watchdog(policy(not_ready=["report"], not_ready_seconds=10, settle_seconds=300))
    steps = [([srv(t, ready=False)], None) for t in (0, 10, 20, 100)]
    steps += [([srv(150, ready=True)], None)]
    steps += [([srv(t, ready=False)], None) for t in (160, 170, 200, later)]
    again = [(later, "not_ready", "report")] if fires else []
    assert kinds(feed(w, steps)) == [(10, "not_ready", "report")] + again


def test_counter_growth_during_the_settle_time_is_acted_on_when_it_ends():
    w = Watchdog(policy(gpu_xid=["report"], settle_seconds=300))
    got = feed(w, [([], host(0, gpu_xid=0)), ([], host(10, gpu_xid=1)), ([], host(20, gpu_xid=2)),
                   ([], host(100, gpu_xid=2)), ([], host(310, gpu_xid=2)), ([], host(620, gpu_xid=2))])
    assert [(t, a.detail) for t, a in got] == [(10, "Xid events 0 -> 1"), (310, "Xid events 1 -> 2")]


def test_one_restart_per_server_per_round_covers_every_condition_that_asks():
    p = policy(not_ready=["restart", "replace"], crash_loop=["restart", "replace"], not_ready_seconds=10,
               crash_restarts=1, max_restarts_per_hour=1)
    w = Watchdog(p)
    got = feed(w, [([srv(0, ready=False, restarts=0)], None), ([srv(10, ready=False, restarts=1)], None)])
    assert [a.kind for _, a in got] == ["restart"]  # and not a replace for the budget that restart spent
    assert w.restarts_in_last_hour("triton-0", T0 + 10) == 1


def test_servers_have_budgets_of_their_own():
    w = Watchdog(policy(not_ready=["restart"], not_ready_seconds=10, max_restarts_per_hour=1,
                        settle_seconds=0))
    got = feed(w, [([srv(t, ready=False, name=n) for n in ("a", "b")], None) for t in (0, 10)])
    assert [(a.server, a.kind) for _, a in got] == [("a", "restart"), ("b", "restart")]


def test_free_cores_once_per_process_then_the_next_action():
    w = Watchdog(policy(foreign_cores=["free-cores", "report"], allow_free_cores=True, settle_seconds=60))
    got = feed(w, [([], host(0, foreign_core_pids={4242: [0, 1]})),
                   ([], host(30, foreign_core_pids={4242: [0, 1]})),
                   ([], host(60, foreign_core_pids={4242: [0, 1]})),
                   ([], host(120, foreign_core_pids={4242: [0, 1], 5151: [2]}))])
    assert [(t, a.kind, a.pids) for t, a in got] == [(0, "free-cores", (4242,)), (60, "report", ()),
                                                    (120, "free-cores", (5151,))]
    assert got[0][1].journal_line() == "watchdog: free-cores host: foreign_cores: pid 4242 holds cores 0-1"
    assert "escalated: free-cores already tried for pid 4242" in got[1][1].detail


def test_stale_samples_and_empty_rounds_do_nothing():
    w = Watchdog(policy(not_ready=["report"], not_ready_seconds=10))
    assert w.observe([]) == [] and w.last_run is None
    feed(w, [([srv(100, ready=False)], None)])
    assert feed(w, [([srv(50, ready=False)], None), ([srv(100, ready=False)], None)]) == []  # older, repeated


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(0, 4), settle=st.sampled_from([0, 30, 300, 900]),
       steps=st.lists(st.tuples(st.integers(1, 900), st.booleans(), st.integers(0, 2),
                                st.booleans()), min_size=1, max_size=80))
def test_restarts_in_any_hour_never_exceed_the_bound(budget, settle, steps):
    p = policy(not_ready=["restart", "report"], crash_loop=["restart", "report"], model_unready=["restart"],
               leak=["restart"], not_ready_seconds=1, crash_restarts=1, max_restarts_per_hour=budget,
               settle_seconds=settle, leak_window_seconds=60, leak_min_samples=3, leak_mib_per_hour=0,
               leak_min_growth_pct=0)
    w = Watchdog(p)
    t, restarts, restarted = 0, {"a": 0, "b": 0}, []
    for gap, ready, grew, model_ok in steps:
        t += gap
        samples = []
        for name in ("a", "b"):
            restarts[name] += grew
            samples.append(srv(t, ready=ready, restarts=restarts[name], rss=(1000 + t) * MiB,
                               models={"m": model_ok}, name=name))
        restarted += [(a.server, t) for a in w.observe(samples) if a.kind == "restart"]
    for name in ("a", "b"):
        times = [at for server, at in restarted if server == name]
        for start in times:  # every window of an hour (both ends included) that starts at a restart
            assert sum(1 for at in times if start <= at <= start + 3600) <= budget
        assert w.restarts_in_last_hour(name, T0 + t) <= budget


# -- the textfile ----------------------------------------------------------------------------------------

SAMPLE = re.compile(r'^tritonfleet_watchdog_actions_total\{server="((?:[^"\\\n]|\\[\\"n])*)",'
                    r'reason="((?:[^"\\\n]|\\[\\"n])*)",action="((?:[^"\\\n]|\\[\\"n])*)"\} ([0-9]+)$')


def unescape(value: str) -> str:
    return re.sub(r'\\([\\"n])', lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def test_textfile_format_escaping_and_order():
    counts = {("triton-1", "leak", "restart"): 2, ("", "gpu_ecc", "replace"): 1,
              ('we"ird\\name\nx', "not_ready", "report"): 7, ("triton-0", "leak", "restart"): 1}
    text = wd.textfile(counts, T0 + 0.25)
    lines = text.split("\n")
    assert text.endswith("\n") and lines[-1] == ""
    assert lines[:2] == [
        "# HELP tritonfleet_watchdog_actions_total Actions the host watchdog took, by server, reason and "
        "action.",
        "# TYPE tritonfleet_watchdog_actions_total counter"]
    assert lines[-4:-1] == [
        "# HELP tritonfleet_watchdog_last_run_timestamp_seconds Unix time of the host watchdog's last run.",
        "# TYPE tritonfleet_watchdog_last_run_timestamp_seconds gauge",
        "tritonfleet_watchdog_last_run_timestamp_seconds 1764000000.25"]
    samples = lines[2:-4]
    parsed = [SAMPLE.match(line) for line in samples]
    assert all(parsed), samples
    back = {tuple(unescape(v) for v in m.groups()[:3]): int(m.group(4)) for m in parsed if m}
    assert back == counts
    assert list(back) == sorted(counts)  # sorted by server, reason, action
    assert 'server="we\\"ird\\\\name\\nx"' in text
    assert wd.textfile({}, T0).endswith("tritonfleet_watchdog_last_run_timestamp_seconds 1764000000\n")


def test_textfile_reads_back_with_prometheus_client():
    parser = pytest.importorskip("prometheus_client.parser")
    counts = {('a"b\\c\nd', "leak", "restart"): 3, ("", "foreign_cores", "report"): 1}
    families = {f.name: f for f in parser.text_string_to_metric_families(wd.textfile(counts, T0))}
    got = {(s.labels["server"], s.labels["reason"], s.labels["action"]): s.value
           for s in families["tritonfleet_watchdog_actions"].samples if s.name.endswith("_total")}
    assert got == counts
    assert families["tritonfleet_watchdog_last_run_timestamp_seconds"].samples[0].value == T0


def test_watchdog_counts_make_the_textfile():
    w = Watchdog(policy(not_ready=["report"], not_ready_seconds=10))
    feed(w, [([srv(t, ready=False)], None) for t in (0, 10)])
    assert 'tritonfleet_watchdog_actions_total{server="triton-0",reason="not_ready",action="report"} 1\n' in \
        wd.textfile(w.counts, w.last_run or 0)


def test_write_textfile_is_atomic_and_0644(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "tritonfleet_watchdog.prom"
    path.write_text("old\n")
    old_umask = os.umask(0o077)
    try:
        wd.write_textfile(str(path), "new\n")
    finally:
        os.umask(old_umask)
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary file left

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wd.os, "replace", broken)
    with pytest.raises(OSError):
        wd.write_textfile(str(path), "newer\n")
    assert path.read_text() == "new\n"  # the old file stands, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


# -- the re-exports --------------------------------------------------------------------------------------

def public(module: ModuleType) -> set[str]:
    """The public names ``module`` defines itself (top-level functions, classes and assignments)."""
    names: set[str] = set()
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def test_watchdog_re_exports_every_public_name_of_the_policy_and_the_parsers():
    assert len(wd.__all__) == len(set(wd.__all__))
    assert set(wd.__all__) == public(wd) | public(watchpolicy) | public(probes)
    for module in (watchpolicy, probes):
        for name in public(module):
            assert getattr(wd, name) is getattr(module, name), name
