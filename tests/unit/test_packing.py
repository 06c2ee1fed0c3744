"""tritonfleet.packing: first-fit-decreasing placement of model replicas on devices. Crafted cases against a
brute-force optimum, the architecture table, the reasons for unplaced replicas, determinism, the proposed
triton_servers (which placement accepts), and hypothesis properties over random fleets."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritonfleet import catalog
from tritonfleet.packing import (
    GPU,
    RUNS_ON,
    Bin,
    Demand,
    compatible,
    host_bins,
    pack,
    proposed_servers,
)
from tritonfleet.placement import ServerSpec, place

ARCHES = ["inf1", "inf2", "trn1", "trn2", GPU]


def bins(capacities: list[int], arch: str = "inf2", host: str = "h") -> list[Bin]:
    return [Bin(host, (i,), arch, c) for i, c in enumerate(capacities)]


def optimum(sizes: list[int], capacity: int) -> int:
    """The fewest bins of ``capacity`` that hold ``sizes``, by trying every assignment (small inputs only)."""
    best = len(sizes)
    for n in range(1, len(sizes) + 1):
        for assignment in itertools.product(range(n), repeat=len(sizes)):
            if assignment and assignment[0] != 0:
                continue  # symmetry: the first item goes into bin 0
            loads = [0] * n
            for size, b in zip(sizes, assignment, strict=True):
                loads[b] += size
            if all(load <= capacity for load in loads):
                return n
    return best


def bins_used(sizes: list[int], capacity: int) -> int:
    demands = [Demand(f"m{i}", s) for i, s in enumerate(sizes)]
    result = pack(demands, bins([capacity] * len(sizes)))
    assert not result.unplaced
    return len(result.used)


# -- optimality -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("sizes", "capacity", "best"), [
    ([6, 5, 4, 3, 2], 10, 2),  # 6+4, 5+3+2
    ([2, 5, 4, 7, 1, 3, 8], 10, 3),  # in this order first fit needs 4; decreasing: 8+2, 7+3, 5+4+1
    ([5, 5, 5, 5], 10, 2),
    ([7, 3, 6, 4, 5, 5], 10, 3),
    ([9, 1, 8, 2, 7, 3], 10, 3),
    ([4, 4, 4, 3, 3, 3, 3, 3, 3], 12, 3),
])
def test_ffd_needs_as_few_devices_as_the_brute_force_optimum(sizes, capacity, best):
    assert optimum(sizes, capacity) == best
    assert bins_used(sizes, capacity) == best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=7))
def test_ffd_is_optimal_for_divisible_sizes(sizes):
    # sizes that divide each other and the capacity: first fit decreasing is optimal (Coffman, Garey, Johnson)
    assert bins_used(sizes, 8) == optimum(sizes, 8) == -(-sum(sizes) // 8)


# -- architectures and reasons --------------------------------------------------------------------------------

@pytest.mark.parametrize(("compiled", "runs_on"), [
    ("inf1", {"inf1"}), ("inf2", {"inf2", "trn1"}), ("trn1", {"inf2", "trn1"}), ("trn2", {"trn2"}),
])
def test_neuron_artifacts_run_where_their_neuroncore_generation_is(compiled, runs_on):
    assert RUNS_ON[compiled] == runs_on
    assert {a for a in ARCHES if compatible(Demand("m", 1, neuron_arch=compiled), Bin("h", (0,), a, 10))} == runs_on


def test_gpu_only_goes_to_gpus_and_unconstrained_anywhere():
    assert {a for a in ARCHES if compatible(Demand("m", 1, gpu_only=True), Bin("h", (0,), a, 10))} == {GPU}
    assert {a for a in ARCHES if compatible(Demand("m", 1), Bin("h", (0,), a, 10))} == set(ARCHES)


def test_an_inf2_artifact_lands_on_trn1_and_an_inf1_one_nowhere_else():
    fleet = [Bin("trn", (0,), "trn1", 1000), Bin("g", (0,), GPU, 1000)]
    result = pack([Demand("bert", 500, neuron_arch="inf2"), Demand("old", 10, neuron_arch="inf1"),
                   Demand("vit", 100, gpu_only=True)], fleet)
    assert [(u.bin.host, u.models) for u in result.bins] == [("trn", ["bert"]), ("g", ["vit"])]
    [left] = result.unplaced
    assert left.model == "old" and left.reason.startswith("no compatible device")
    assert "inf1" in left.reason and "gpu, trn1" in left.reason


def test_reasons_too_big_and_out_of_room():
    result = pack([Demand("huge", 150), Demand("a", 90), Demand("b", 80), Demand("c", 30)], bins([100, 100]))
    assert [u.models for u in result.bins] == [["a"], ["b"]]
    reasons = {u.model: u.reason for u in result.unplaced}
    assert reasons == {
        "huge": "too big for any device: needs 150 MiB, the largest compatible device holds 100 MiB",
        "c": "out of room: no compatible device without a replica of c has 30 MiB free",
    }
    # a replica the size of the largest device is not too big: it found the device full
    result = pack([Demand("a", 100), Demand("b", 100)], bins([100]))
    assert result.unplaced[0].reason.startswith("out of room")
    # too big is judged against the compatible devices only
    result = pack([Demand("m", 150, neuron_arch="inf2")], bins([100]) + bins([200], arch="trn2", host="t"))
    assert result.unplaced[0].reason.endswith("the largest compatible device holds 100 MiB")


def test_a_device_serves_a_model_once():
    result = pack([Demand("m", 10, replicas=3)], bins([1000, 1000]))
    assert [u.models for u in result.bins] == [["m"], ["m"]]
    [left] = result.unplaced
    assert (left.model, left.index) == ("m", 2)
    assert left.reason == ("out of room: each of the 2 compatible device(s) already holds a replica of m "
                           "(a device serves a model once)")


def test_decreasing_size_then_name_then_fleet_order_and_no_dependence_on_input_order():
    demands = [Demand("b", 40), Demand("a", 40), Demand("c", 70), Demand("d", 20, replicas=2)]
    fleet = bins([100, 100])
    first = pack(demands, fleet)
    # c 70 -> 0; a 40 -> 1 (0 has 30 left); b 40 -> 1; d 20 -> 0; its second replica -> 1 (0 has a d)
    assert [u.models for u in first.bins] == [["c", "d"], ["a", "b", "d"]]
    for _ in range(5):
        shuffled = demands[:]
        random.shuffle(shuffled)
        assert pack(shuffled, fleet) == first


def test_utilisation_per_device():
    result = pack([Demand("a", 30), Demand("b", 45)], bins([100, 50]))
    a, b = result.bins
    assert (a.used_mib, a.free_mib, a.utilisation) == (75, 25, 0.75)
    assert (b.used_mib, b.free_mib, b.utilisation) == (0, 50, 0.0)


def test_bad_demands_and_fleets_are_refused():
    with pytest.raises(ValueError, match="neuron_arch 'inf3'"):
        Demand("m", 1, neuron_arch="inf3")
    with pytest.raises(ValueError, match="exclude each other"):
        Demand("m", 1, neuron_arch="inf2", gpu_only=True)
    with pytest.raises(ValueError, match="replicas"):
        Demand("m", 1, replicas=0)
    with pytest.raises(ValueError, match="footprint"):
        Demand("m", -1)
    with pytest.raises(ValueError, match="more than once"):
        pack([Demand("m", 1), Demand("m", 2)], bins([10]))
    with pytest.raises(ValueError, match="listed twice"):
        pack([Demand("m", 1)], bins([10]) + bins([10]))


# -- the fleet and the proposal -------------------------------------------------------------------------------

def test_host_bins_are_one_per_device_less_headroom():
    assert host_bins("a", catalog.get("inf2.24xlarge"), 10) == [Bin("a", (d,), "inf2", 29491) for d in range(6)]
    assert host_bins("t", catalog.get("trn1n.32xlarge"), 0)[0] == Bin("t", (0,), "trn1", 32768)
    assert [b.arch for b in host_bins("g", catalog.get("g5.12xlarge"))] == [GPU] * 4
    assert host_bins("g", catalog.get("g5.12xlarge"), 0)[3] == Bin("g", (3,), GPU, 24576)
    assert host_bins("lb", catalog.get("m5.large")) == []


def _spec(entry: dict) -> ServerSpec:
    """A proposed entry as ServerSpec; ``models`` only where ServerSpec has that field."""
    return ServerSpec(**{k: v for k, v in entry.items() if k in ServerSpec.model_fields})


def test_proposed_servers_are_one_per_used_device_and_place_accepts_them():
    inf2, g5 = catalog.get("inf2.24xlarge"), catalog.get("g5.12xlarge")
    fleet = host_bins("inf", inf2) + host_bins("gpu", g5) + host_bins("idle", catalog.get("inf1.xlarge"))
    demands = [Demand("bert", 20000, replicas=3, neuron_arch="trn1"), Demand("resnet", 10000, neuron_arch="inf2"),
               Demand("vit", 15000, gpu_only=True, replicas=2)]
    result = pack(demands, fleet)
    assert not result.unplaced
    servers = proposed_servers(result)  # resnet does not fit next to a bert (30000 > 29491 MiB)
    assert servers == {
        "inf": [{"devices": [0], "models": ["bert"]}, {"devices": [1], "models": ["bert"]},
                {"devices": [2], "models": ["bert"]}, {"devices": [3], "models": ["resnet"]}],
        "gpu": [{"gpus": [0], "models": ["vit"]}, {"gpus": [1], "models": ["vit"]}],
    }
    for host, itype in (("inf", inf2), ("gpu", g5)):
        placed = place(itype, [_spec(e) for e in servers[host]])
        assert [p.devices or p.gpus for p in placed] == [tuple(e.get("devices") or e["gpus"]) for e in servers[host]]


# -- properties -----------------------------------------------------------------------------------------------

demand_st = st.builds(
    lambda mib, replicas, constraint: Demand("x", mib, replicas, *constraint),
    st.integers(0, 120), st.integers(1, 4),
    st.sampled_from([(None, False), ("inf1", False), ("inf2", False), ("trn1", False), ("trn2", False),
                     (None, True)]),
)
bin_st = st.tuples(st.sampled_from(ARCHES), st.integers(0, 150))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(demand_st, max_size=8), st.lists(bin_st, max_size=8))
def test_nothing_over_capacity_every_replica_accounted_for_constraints_kept(raw_demands, raw_bins):
    demands = [Demand(f"m{i}", d.mib, d.replicas, d.neuron_arch, d.gpu_only) for i, d in enumerate(raw_demands)]
    fleet = [Bin(f"h{i // 3}", (i % 3,), arch, cap) for i, (arch, cap) in enumerate(raw_bins)]
    result = pack(demands, fleet)
    by_name = {d.name: d for d in demands}
    assert [u.bin for u in result.bins] == fleet
    seen = []
    for use in result.bins:
        assert use.used_mib <= use.bin.capacity_mib and use.free_mib >= 0
        assert len({r.model for r in use.replicas}) == len(use.replicas)  # one replica of a model per device
        for r in use.replicas:
            assert compatible(by_name[r.model], use.bin)
            assert r.mib == by_name[r.model].mib
            seen.append((r.model, r.index))
    for u in result.unplaced:
        assert u.reason.startswith(("too big for any device", "no compatible device", "out of room"))
        seen.append((u.model, u.index))
        # first fit: at the end, no compatible device has room for it and lacks the model
        for use in result.bins:
            if compatible(by_name[u.model], use.bin):
                assert use.free_mib < u.mib or u.model in use.models
    expected = [(d.name, i) for d in demands for i in range(d.replicas)]
    assert sorted(seen) == sorted(expected)
    assert pack(demands, fleet) == result  # deterministic
