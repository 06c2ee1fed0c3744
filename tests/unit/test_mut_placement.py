"""tritonfleet.placement: the edges of the default ports, the value named in each error, and the defaults that
the placement tests did not pin. Written for the mutants ``make mutate`` found surviving
(docs/mutation-survivors.md)."""

from __future__ import annotations

import pytest

from tritonfleet import catalog
from tritonfleet.placement import PlacementError, ServerSpec, format_core_range, place

INF2_1 = catalog.get("inf2.xlarge")


def test_default_ports_may_be_1_and_65535_and_bind_everywhere():
    (p,) = place(INF2_1, base_ports=(1, 2, 65535))
    assert (p.http_port, p.grpc_port, p.metrics_port, p.bind_address) == (1, 2, 65535, "0.0.0.0")


@pytest.mark.parametrize("base, said", [
    ((0, 2, 3), "triton_servers[0].http_port 0: default port (base 0 + 0 * 10) is out of range 1..65535"),
    ((1, 2, 65536), "triton_servers[0].metrics_port 65536: default port (base 65536 + 0 * 10) is out of range "
                    "1..65535"),
])
def test_default_ports_out_of_range_name_the_port(base, said):
    with pytest.raises(PlacementError) as info:
        place(INF2_1, base_ports=base)
    assert str(info.value) == said


def test_a_port_used_twice_names_the_port():
    with pytest.raises(PlacementError) as info:
        place(INF2_1, [ServerSpec.model_validate({"http_port": 9000, "grpc_port": 9000})])
    assert str(info.value) == "triton_servers[0].grpc_port 9000: same port as triton_servers[0].http_port"


@pytest.mark.parametrize("cores, said", [([], "no cores to format"),
                                         ([-1], "core ids must be non-negative integers, got -1")])
def test_format_core_range_errors(cores, said):
    with pytest.raises(ValueError) as info:
        format_core_range(cores)
    assert str(info.value) == said
