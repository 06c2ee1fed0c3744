"""The suite's own layout: `make test`'s two xdist groups (tests/conftest.py) keep every test that uses the
sandbox on one worker, so two workers never share the sandbox fleet."""

from __future__ import annotations

from tests import conftest


def test_every_layer_has_a_group_and_the_sandbox_layers_share_one_alone():
    assert set(conftest.XDIST_GROUPS) == set(conftest.LAYERS)
    fleet = {conftest.XDIST_GROUPS["e2e"]}
    assert conftest.XDIST_GROUPS["sandbox"] in fleet
    assert not fleet & {conftest.XDIST_GROUPS[x] for x in ("pure", "fake", "triton")}


def test_node_ids_are_grouped_by_their_files_layer():
    split = conftest.xdist_group_of
    assert split("tests/e2e/test_03_serve.py::test_x") == split("tests/unit/test_sandbox_fleet.py::test_y")
    assert split("tests/e2e/test_teardown.py::test_z[a::b]") == split("tests/e2e/test_01_sandbox.py::t")
    assert split("tests/unit/test_rollout.py::t") == split("tests/fake/test_roles.py::t") \
        == split("tests/genmodel/test_cli.py::t") != split("tests/e2e/test_01_sandbox.py::t")
