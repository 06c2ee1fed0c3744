"""Tests for tritonfleet.placement: defaults, splits, every rejection rule, and hypothesis properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roles.triton import ROLE as TRITON
from tritonfleet import catalog
from tritonfleet.catalog import CATALOG, InstanceType
from tritonfleet.config import FieldProblem, validate_section
from tritonfleet.placement import Placement, PlacementError, ServerSpec, format_core_range, place

SERVER_KEYS = tuple(ServerSpec.model_fields)

INF2_48 = catalog.get("inf2.48xlarge")
INF2_24 = catalog.get("inf2.24xlarge")
INF2_1 = catalog.get("inf2.xlarge")
TRN2_48 = catalog.get("trn2.48xlarge")
G5_12 = catalog.get("g5.12xlarge")


def place_data(itype: InstanceType, servers: Any = None, **kwargs: Any) -> list[Placement]:
    """``triton_servers`` data through the real edge: the triton role's settings type the servers (one
    ``ServerSpec`` each), then :func:`place` allocates them on ``itype``."""
    if kwargs:  # placement parameters that host data does not set
        return place(itype, [ServerSpec.model_validate(s) for s in servers or []], **kwargs)
    settings = validate_section(TRITON, {"servers": [] if servers is None else servers}, {"instance": itype})
    return list(settings.placements)


def reject(itype: InstanceType, servers: Any, field: str, message: str, **kwargs: Any) -> Exception:
    """Assert the data is rejected naming exactly this field, with this message (or a message starting
    with it, for pydantic's type errors); return the error."""
    with pytest.raises((PlacementError, FieldProblem)) as info:
        place_data(itype, servers, **kwargs)
    err = info.value
    assert err.field == field
    assert err.message.startswith(message), err.message
    if isinstance(err, PlacementError):
        assert err.message == message
        assert str(err) == f"{err.field} {err.value}: {err.message}"
    return err


# --- format_core_range --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "text"),
    [
        ([3], "3"),
        (range(8), "0-7"),
        ([9, 8], "8-9"),
        ([0, 1, 4], "0-1,4"),
        ([5, 0, 2, 3], "0,2-3,5"),
        ((7, 7), "7"),
    ],
)
def test_format_core_range(cores: Any, text: str) -> None:
    assert format_core_range(cores) == text


@pytest.mark.parametrize("cores", [[], [-1], [True], ["1"]])
def test_format_core_range_rejects(cores: list[Any]) -> None:
    with pytest.raises(ValueError):
        format_core_range(cores)


# --- defaults and splits -----------------------------------------------------------------------------


@pytest.mark.parametrize("servers", [None, []])
def test_default_is_one_server_with_everything(servers: list | None) -> None:
    (p,) = place_data(INF2_48, servers)
    assert p == Placement(
        index=0,
        name="triton",
        devices=tuple(range(12)),
        cores=tuple(range(24)),
        visible_cores="0-23",
        device_paths=tuple(f"/dev/neuron{i}" for i in range(12)),
        gpus=(),
        gpus_flag=None,
        http_port=8000,
        grpc_port=8001,
        metrics_port=8002,
        bind_address="0.0.0.0",
    )


def test_default_single_device_single_core_string() -> None:
    (p,) = place_data(INF2_1, [{"cores": [1]}])
    assert (p.devices, p.cores, p.visible_cores, p.device_paths) == ((0,), (1,), "1", ("/dev/neuron0",))


def test_default_trn2_uses_logical_cores() -> None:
    (p,) = place_data(TRN2_48)
    assert p.visible_cores == "0-63" and len(p.device_paths) == 16


def test_default_gpu_host() -> None:
    (p,) = place_data(G5_12)
    assert (p.gpus, p.gpus_flag) == ((0, 1, 2, 3), "device=0,1,2,3")
    assert (p.devices, p.cores, p.visible_cores, p.device_paths) == ((), (), None, ())


def test_three_servers_split_inf2_48xlarge() -> None:
    ps = place_data(INF2_48, [{}, {}, {}])
    assert [p.name for p in ps] == ["triton-0", "triton-1", "triton-2"]
    assert [p.devices for p in ps] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)]
    assert [p.visible_cores for p in ps] == ["0-7", "8-15", "16-23"]
    assert [(p.http_port, p.grpc_port, p.metrics_port) for p in ps] == [
        (8000, 8001, 8002),
        (8010, 8011, 8012),
        (8020, 8021, 8022),
    ]


def test_mixed_explicit_cores_and_auto() -> None:
    ps = place_data(INF2_48, [{"devices": [0, 1, 2, 3]}, {"devices": [4, 5, 6, 7], "cores": [8, 9]}, {}])
    assert [p.devices for p in ps] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)]
    assert [p.cores for p in ps] == [tuple(range(8)), (8, 9), tuple(range(16, 24))]
    assert [p.visible_cores for p in ps] == ["0-7", "8-9", "16-23"]


def test_auto_servers_split_around_explicit_devices() -> None:
    ps = place_data(INF2_24, [{}, {"devices": [3, 2]}, {}])
    assert [p.devices for p in ps] == [(0, 1), (2, 3), (4, 5)]


def test_auto_server_cores_checked_against_its_split() -> None:
    ps = place_data(INF2_24, [{"cores": [2]}, {}])
    assert ps[0].devices == (0, 1, 2) and ps[0].cores == (2,)


def test_names_ports_and_bind_address() -> None:
    ps = place_data(
        G5_12,
        [{"name": "llm", "gpus": [3], "http_port": 9000, "bind_address": "127.0.0.1"}, {"gpus": [0, 1]}],
        base_ports=(7000, 7001, 7002),
        port_stride=100,
        bind_address="10.0.0.5",
    )
    assert [p.name for p in ps] == ["llm", "triton-1"]
    assert [(p.http_port, p.grpc_port, p.metrics_port) for p in ps] == [
        (9000, 7001, 7002),
        (7100, 7101, 7102),
    ]
    assert [p.bind_address for p in ps] == ["127.0.0.1", "10.0.0.5"]
    assert [p.gpus_flag for p in ps] == ["device=3", "device=0,1"]


def test_same_port_on_different_specific_addresses_is_allowed() -> None:
    ps = place_data(INF2_24, [{"bind_address": "10.0.0.1"}, {"bind_address": "10.0.0.2", "http_port": 8000}])
    assert ps[0].http_port == ps[1].http_port == 8000


# --- rejections: one test per rule ---------------------------------------------------------------------


def test_reject_non_contiguous_devices() -> None:
    reject(
        INF2_24,
        [{"devices": [0]}, {"devices": [3, 5]}],
        "triton_servers[1].devices",
        "devices must be contiguous (inf2.24xlarge has devices 0-5)",
    )
    err = reject(
        INF2_24,
        [{}, {"devices": [3, 5]}],
        "triton_servers[1].devices",
        "devices must be contiguous (inf2.24xlarge has devices 0-5)",
    )
    assert (
        str(err)
        == "triton_servers[1].devices [3, 5]: devices must be contiguous (inf2.24xlarge has devices 0-5)"
    )


def test_reject_duplicate_devices() -> None:
    reject(INF2_24, [{"devices": [1, 2, 2]}], "triton_servers[0].devices", "duplicate devices 2")
    reject(INF2_24, [{"devices": [-1, -1]}], "triton_servers[0].devices", "duplicate devices -1")


def test_reject_devices_beyond_instance() -> None:
    reject(
        INF2_24,
        [{"devices": [5, 6, 7]}],
        "triton_servers[0].devices",
        "devices 6-7 not on inf2.24xlarge (inf2.24xlarge has devices 0-5)",
    )
    reject(
        INF2_1,
        [{"devices": [1]}],
        "triton_servers[0].devices",
        "device 1 not on inf2.xlarge (inf2.xlarge has device 0)",
    )


def test_reject_negative_device() -> None:
    reject(
        INF2_24,
        [{"devices": [-1, 0]}],
        "triton_servers[0].devices",
        "device -1 not on inf2.24xlarge (inf2.24xlarge has devices 0-5)",
    )


def test_reject_overlapping_devices_between_servers() -> None:
    reject(
        INF2_24,
        [{"devices": [0, 1, 2]}, {"devices": [2, 3]}],
        "triton_servers[1].devices",
        "devices 2 already used by triton_servers[0] (servers cannot share a device)",
    )


def test_reject_overlapping_cores_even_via_shared_device() -> None:
    # Cores are always on a server's own devices, so shared cores imply a shared device; the device rule
    # reports it (also when the cores would be disjoint: devices are exclusive to one server).
    for second_cores in ([1], [0]):
        reject(
            INF2_24,
            [{"devices": [0], "cores": [0], "http_port": 9000}, {"devices": [0], "cores": second_cores}],
            "triton_servers[1].devices",
            "devices 0 already used by triton_servers[0] (servers cannot share a device)",
        )


def test_reject_cores_not_on_own_devices() -> None:
    reject(
        INF2_48,
        [{"devices": [0, 1, 2, 3]}, {"devices": [4, 5, 6, 7], "cores": [7, 8]}],
        "triton_servers[1].cores",
        "cores 7 are not on this server's devices 4-7 (cores 8-15)",
    )
    reject(
        INF2_24,
        [{}, {"cores": [0]}],
        "triton_servers[1].cores",
        "cores 0 are not on this server's devices 3-5 (cores 6-11)",
    )


def test_reject_core_beyond_instance() -> None:
    reject(
        INF2_1,
        [{"cores": [2]}],
        "triton_servers[0].cores",
        "cores 2 are not on this server's devices 0 (cores 0-1)",
    )


def test_reject_non_contiguous_cores() -> None:
    reject(
        INF2_24, [{"devices": [0, 1], "cores": [0, 2]}], "triton_servers[0].cores", "cores must be contiguous"
    )


def test_reject_duplicate_cores() -> None:
    reject(INF2_24, [{"cores": [3, 3]}], "triton_servers[0].cores", "duplicate cores 3")


def test_reject_empty_devices() -> None:
    reject(
        INF2_24,
        [{"devices": []}],
        "triton_servers[0].devices",
        "devices must not be empty (omit the key for the default)",
    )


def test_reject_empty_cores() -> None:
    reject(
        INF2_24,
        [{"cores": []}],
        "triton_servers[0].cores",
        "cores must not be empty (omit the key for the default)",
    )


def test_reject_empty_gpus() -> None:
    reject(
        G5_12,
        [{"gpus": []}],
        "triton_servers[0].gpus",
        "gpus must not be empty (omit the key for the default)",
    )


def test_reject_port_clash_within_server() -> None:
    reject(
        INF2_24,
        [{"http_port": 9000, "metrics_port": 9000}],
        "triton_servers[0].metrics_port",
        "same port as triton_servers[0].http_port",
    )


def test_reject_port_clash_across_servers() -> None:
    reject(
        INF2_24,
        [{}, {"grpc_port": 8002}],
        "triton_servers[1].grpc_port",
        "port already used by triton_servers[0].metrics_port",
    )
    # an explicit port on server 0 hitting server 1's default
    reject(
        INF2_24,
        [{"metrics_port": 8010}, {}],
        "triton_servers[1].http_port",
        "port already used by triton_servers[0].metrics_port",
    )


def test_reject_port_clash_wildcard_vs_specific_address() -> None:
    reject(
        INF2_24,
        [{"bind_address": "10.0.0.1"}, {"http_port": 8000}],
        "triton_servers[1].http_port",
        "port already used by triton_servers[0].http_port",
    )


def test_reject_zero_stride_port_clash() -> None:
    reject(
        INF2_24,
        [{}, {}],
        "triton_servers[1].http_port",
        "port already used by triton_servers[0].http_port",
        port_stride=0,
    )


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_reject_port_out_of_range(port: int) -> None:
    reject(INF2_24, [{"grpc_port": port}], "triton_servers[0].grpc_port", "Input should be")


def test_reject_default_port_out_of_range() -> None:
    reject(
        INF2_24,
        [{}, {}],
        "triton_servers[1].http_port",
        "default port (base 65530 + 1 * 10) is out of range 1..65535",
        base_ports=(65530, 65531, 65532),
    )


@pytest.mark.parametrize("port", ["8000", 8000.0, True])
def test_reject_port_wrong_type(port: Any) -> None:
    reject(INF2_24, [{"http_port": port}], "triton_servers[0].http_port", "Input should be a valid integer")


@pytest.mark.parametrize("key", ["devices", "cores"])
def test_reject_neuron_keys_on_gpu_host(key: str) -> None:
    reject(
        G5_12,
        [{key: [0]}],
        f"triton_servers[0].{key}",
        f"{key} is not valid on g5.12xlarge, which is a GPU host (use gpus)",
    )


def test_reject_gpus_on_neuron_host() -> None:
    reject(
        INF2_24,
        [{"gpus": [0]}],
        "triton_servers[0].gpus",
        "gpus is not valid on inf2.24xlarge, which is a Neuron host (use devices/cores)",
    )


def test_reject_gpus_beyond_count() -> None:
    reject(
        G5_12,
        [{"gpus": [2, 4]}],
        "triton_servers[0].gpus",
        "GPU 4 not on g5.12xlarge (g5.12xlarge has GPUs 0-3)",
    )


def test_reject_overlapping_gpus() -> None:
    reject(
        G5_12,
        [{"gpus": [0, 1]}, {"gpus": [1, 2]}],
        "triton_servers[1].gpus",
        "GPUs 1 already used by triton_servers[0] (servers cannot share a GPU)",
    )


def test_reject_duplicate_gpus() -> None:
    reject(G5_12, [{"gpus": [1, 1]}], "triton_servers[0].gpus", "duplicate gpus 1")


def test_gpus_need_not_be_contiguous() -> None:
    ps = place_data(G5_12, [{"gpus": [0, 2]}, {"gpus": [3, 1]}])
    assert [p.gpus for p in ps] == [(0, 2), (1, 3)]


def test_reject_more_servers_than_devices() -> None:
    reject(
        INF2_1,
        [{}, {}],
        "triton_servers",
        "more servers than devices: inf2.xlarge has 1 device(s) and each server needs at least one of its own",
    )
    reject(
        G5_12,
        [{}] * 5,
        "triton_servers",
        "more servers than GPUs: g5.12xlarge has 4 GPU(s) and each server needs at least one of its own",
    )


def test_reject_uneven_split() -> None:
    err = reject(
        INF2_24,
        [{}] * 4,
        "triton_servers",
        "4 server(s) without devices cannot evenly split the 6 unclaimed device(s) of inf2.24xlarge (0-5); "
        "give them explicit devices",
    )
    assert err.value == [0, 1, 2, 3]


def test_reject_no_devices_left() -> None:
    reject(
        INF2_24,
        [{"devices": list(range(6))}, {}],
        "triton_servers",
        "1 server(s) without devices cannot evenly split the 0 unclaimed device(s) of inf2.24xlarge (none); "
        "give them explicit devices",
    )


def test_reject_auto_split_not_contiguous() -> None:
    reject(
        INF2_24,
        [{"devices": [1, 2]}, {}, {}],
        "triton_servers[1]",
        "the unclaimed devices left for this server are not contiguous (0,3-5 split 2 ways); give it explicit devices",
    )


def test_reject_unknown_key() -> None:
    reject(INF2_24, [{"device": [0]}], "triton_servers[0].device",
           "Extra inputs are not permitted; did you mean devices?")
    reject(INF2_24, [{"model_repo": "/x"}], "triton_servers[0].model_repo", "Extra inputs are not permitted")


@pytest.mark.parametrize(
    ("value", "field"),
    [("0-3", "triton_servers[0].devices"), (0, "triton_servers[0].devices"),
     ([0, "1"], "triton_servers[0].devices[1]"), ([True], "triton_servers[0].devices[0]"),
     ({0: 1}, "triton_servers[0].devices")],
)
def test_reject_wrong_type_devices(value: Any, field: str) -> None:
    reject(INF2_24, [{"devices": value}], field, "Input should be a valid")


def test_reject_wrong_type_cores_and_gpus() -> None:
    reject(INF2_24, [{"cores": "8-9"}], "triton_servers[0].cores", "Input should be a valid list")
    reject(G5_12, [{"gpus": "all"}], "triton_servers[0].gpus", "Input should be a valid list")


def test_reject_servers_not_a_list() -> None:
    reject(INF2_24, {"devices": [0]}, "triton_servers", "Input should be a valid list")
    reject(INF2_24, "triton", "triton_servers", "Input should be a valid list")


def test_reject_server_not_a_mapping() -> None:
    reject(INF2_24, [{}, [0, 1]], "triton_servers[1]", "Input should be a valid dictionary")


@pytest.mark.parametrize(("name", "message"), [("", "String should match pattern"), ("-x", "String should match"),
                                               ("a b", "String should match"), (5, "Input should be a valid string")])
def test_reject_bad_name(name: Any, message: str) -> None:
    reject(INF2_24, [{"name": name}], "triton_servers[0].name", message)


def test_reject_duplicate_name() -> None:
    reject(
        INF2_24,
        [{"name": "triton-1"}, {}],
        "triton_servers[1].name",
        "container name already used by triton_servers[0]",
    )


@pytest.mark.parametrize(("address", "message"), [("localhost", "expected an IPv4 or IPv6 address"),
                                                    ("10.0.0.256", "expected an IPv4"), (1, "Input should be a valid string")])
def test_reject_bad_bind_address(address: Any, message: str) -> None:
    reject(INF2_24, [{"bind_address": address}], "triton_servers[0].bind_address", message)


def test_reject_bad_default_bind_address() -> None:
    with pytest.raises(FieldProblem) as info:
        validate_section(TRITON, {"bind_address": "*"}, {"instance": INF2_24})
    assert info.value.field == "triton_bind_address" and "IPv4 or IPv6" in info.value.message


# --- properties ------------------------------------------------------------------------------------------

INSTANCE_TYPES = sorted((it for it in CATALOG.values() if it.has_accelerator), key=lambda it: it.name)  # Triton hosts


@st.composite
def valid_layouts(draw: st.DrawFn) -> tuple[InstanceType, list[dict], list[tuple[int, ...]]]:
    """A random instance type, a valid ``triton_servers`` list, and the devices/gpus each server must get."""
    itype = draw(st.sampled_from(INSTANCE_TYPES))
    total = itype.device_count
    n = draw(st.integers(1, min(total, 8)))
    end = draw(st.integers(n, total))  # devices [end, total) stay unused unless a server is auto-placed
    cuts = sorted(draw(st.sets(st.integers(1, end - 1), min_size=n - 1, max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, end]
    groups = [tuple(range(bounds[k], bounds[k + 1])) for k in range(n)]
    modes = [draw(st.sampled_from(["explicit", "auto", "cores"])) for _ in range(n)]
    if end < total:
        modes = ["explicit" if m == "auto" else m for m in modes]
    auto_sizes = {len(groups[k]) for k in range(n) if modes[k] == "auto"}
    if len(auto_sizes) > 1:  # auto servers only reproduce the groups when those are equal-sized
        first = next(len(groups[k]) for k in range(n) if modes[k] == "auto")
        modes = ["explicit" if m == "auto" and len(groups[k]) != first else m for k, m in enumerate(modes)]
    # explicit servers may hold their groups in any order; auto servers get theirs in index order
    explicit_idx = [k for k in range(n) if modes[k] != "auto"]
    permuted = draw(st.permutations([groups[k] for k in explicit_idx]))
    assigned = list(groups)
    for k, g in zip(explicit_idx, permuted, strict=True):
        assigned[k] = g
    key = "devices" if itype.accelerator == "neuron" else "gpus"
    servers: list[dict] = []
    for k in range(n):
        server: dict[str, Any] = {}
        if modes[k] != "auto":
            ids = list(assigned[k])
            if key == "gpus":
                ids = draw(st.permutations(ids))
            server[key] = ids
        if modes[k] == "cores" and key == "devices":
            owned = [c for d in assigned[k] for c in itype.cores_of_device(d)]
            start = draw(st.integers(0, len(owned) - 1))
            length = draw(st.integers(1, len(owned) - start))
            server["cores"] = owned[start : start + length]
        if draw(st.booleans()):
            server["name"] = f"srv{k}"
        servers.append(server)
    return itype, servers, assigned


def check_invariants(itype: InstanceType, placements: list[Placement]) -> None:
    """No two servers share a device, core, GPU or port, and every core is on one of its server's devices."""
    seen_devices: set[int] = set()
    seen_cores: set[int] = set()
    seen_gpus: set[int] = set()
    seen_ports: set[int] = set()
    for p in placements:
        assert not seen_devices & set(p.devices)
        assert not seen_cores & set(p.cores)
        assert not seen_gpus & set(p.gpus)
        ports = {p.http_port, p.grpc_port, p.metrics_port}
        assert len(ports) == 3 and not seen_ports & ports
        seen_devices |= set(p.devices)
        seen_cores |= set(p.cores)
        seen_gpus |= set(p.gpus)
        seen_ports |= ports
        if itype.accelerator == "neuron":
            assert p.devices and p.cores and not p.gpus and p.gpus_flag is None
            assert all(itype.device_of_core(c) in p.devices for c in p.cores)
            assert list(p.devices) == list(range(p.devices[0], p.devices[-1] + 1))
            assert list(p.cores) == list(range(p.cores[0], p.cores[-1] + 1))
            assert p.visible_cores == format_core_range(p.cores)
            assert p.device_paths == tuple(f"/dev/neuron{d}" for d in p.devices)
            assert max(p.devices) < itype.device_count
        else:
            assert p.gpus and not p.devices and not p.cores and p.visible_cores is None
            assert p.gpus_flag == "device=" + ",".join(map(str, p.gpus))
            assert max(p.gpus) < itype.device_count
    assert len({p.name for p in placements}) == len(placements)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_layouts())
def test_property_valid_layouts_never_share(
    layout: tuple[InstanceType, list[dict], list[tuple[int, ...]]],
) -> None:
    itype, servers, assigned = layout
    placements = place_data(itype, servers)
    assert len(placements) == len(servers)
    check_invariants(itype, placements)
    for p, server, want in zip(placements, servers, assigned, strict=True):
        got = p.devices if itype.accelerator == "neuron" else p.gpus
        assert set(got) == set(want)
        if "cores" in server:
            assert p.cores == tuple(server["cores"])
        elif itype.accelerator == "neuron":
            assert set(p.cores) == {c for d in want for c in itype.cores_of_device(d)}


_values = st.one_of(
    st.integers(-2, 20),
    st.lists(st.integers(-1, 17), max_size=6),
    st.text(max_size=4),
    st.none(),
    st.booleans(),
)
_servers = st.lists(
    st.dictionaries(st.sampled_from([*SERVER_KEYS, "device", "extra"]), _values, max_size=4), max_size=5
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(INSTANCE_TYPES), _servers)
def test_property_arbitrary_input_is_rejected_cleanly_or_valid(
    itype: InstanceType, servers: list[dict]
) -> None:
    """Any input either raises PlacementError (never another exception) or yields a valid placement."""
    try:
        placements = place_data(itype, servers)
    except (PlacementError, FieldProblem) as err:
        assert err.field.startswith("triton_servers")
        return
    check_invariants(itype, placements)
