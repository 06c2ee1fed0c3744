"""tritonfleet.placement: the value each PlacementError carries (``err.value`` and the ``"{field} {value}:"``
prefix of its text) and how error lists of core or device ids are written. Written for the mutants
``make mutate`` found surviving that tests/unit/test_mut_placement.py left open (docs/mutation-survivors.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tritonfleet import catalog
from tritonfleet.placement import PlacementError, ServerSpec, place

INF2_1 = catalog.get("inf2.xlarge")
INF2_24 = catalog.get("inf2.24xlarge")  # 6 devices, 2 cores each


@pytest.mark.parametrize("itype, servers, field, value, message", [
    (INF2_1, [{}, {}], "triton_servers", 2,
     "more servers than devices: inf2.xlarge has 1 device(s) and each server needs at least one of its own"),
    (INF2_24, [{"gpus": [0]}], "triton_servers[0].gpus", [0],
     "gpus is not valid on inf2.24xlarge, which is a Neuron host (use devices/cores)"),
    (INF2_24, [{"devices": [-2, -1]}], "triton_servers[0].devices", [-2, -1],
     "devices -2,-1 not on inf2.24xlarge (inf2.24xlarge has devices 0-5)"),
    (INF2_24, [{"devices": [0, 1]}, {"devices": [1, 2]}], "triton_servers[1].devices", [1, 2],
     "devices 1 already used by triton_servers[0] (servers cannot share a device)"),
    # a server placed automatically before the two that clash: the check goes on past it
    (INF2_24, [{}, {"devices": [3]}, {"devices": [3, 4]}], "triton_servers[2].devices", [3, 4],
     "devices 3 already used by triton_servers[1] (servers cannot share a device)"),
    (INF2_24, [{"devices": [1]}, {"devices": [4]}, {}, {}], "triton_servers[2]", [0, 2],
     "the unclaimed devices left for this server are not contiguous (0,2-3,5 split 2 ways); give it explicit "
     "devices"),
    (INF2_24, [{"devices": [1], "cores": [0, 1]}], "triton_servers[0].cores", [0, 1],
     "cores 0-1 are not on this server's devices 1 (cores 2-3)"),
    (INF2_24, [{"devices": [1, 2], "cores": [2, 4]}], "triton_servers[0].cores", [2, 4],
     "cores must be contiguous"),
    (INF2_24, [{"http_port": 9000}, {"http_port": 9000}], "triton_servers[1].http_port", 9000,
     "port already used by triton_servers[0].http_port"),
    (INF2_24, [{"name": "aa"}, {"name": "aa"}], "triton_servers[1].name", "aa",
     "container name already used by triton_servers[0]"),
])
def test_each_error_carries_the_offending_value(itype, servers: list[dict[str, Any]], field, value, message):
    with pytest.raises(PlacementError) as info:
        place(itype, [ServerSpec.model_validate(s) for s in servers])
    err = info.value
    assert (err.field, err.value, err.message) == (field, value, message)
    assert str(err) == f"{field} {value}: {message}"


@pytest.mark.parametrize("base", [(8000, 8001), (8000, 8001, 8002, 8003)])
def test_base_ports_must_name_exactly_the_three_ports(base):
    with pytest.raises(ValueError, match="zip"):
        place(INF2_1, base_ports=base)
