"""The suite's own layout: `make test`'s two xdist groups (tests/conftest.py) keep every test that uses the
sandbox on one worker, so two workers never share the sandbox fleet."""

from __future__ import annotations

import pytest

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
        == split("tests/unit/test_sandbox_image.py::t") == "host" != split("tests/e2e/test_01_sandbox.py::t")
    # the real-Triton layer runs on the second fleet worker, after its e2e files (collection order: e2e first)
    assert split("tests/genmodel/test_cli.py::t") == split("tests/e2e/test_07_models.py::t") == "fleet2"
    assert "tests/e2e" < "tests/genmodel"


def _named_hosts(path, names: set[str]) -> set[str]:
    """The sandbox host names a test file spells out as string constants."""
    import ast

    tree = ast.parse(path.read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names}


def test_the_second_fleet_workers_files_use_hosts_no_other_e2e_file_names():
    """The two fleet workers run at once: the second one's files (E2E_SECOND_FILES) use only its hosts
    (SECOND_WORKER_HOSTS), which no other e2e file names (a reset or deploy there would pull a host from under a
    running test)."""
    from tests.e2e.conftest import FLEET, SECOND_WORKER_HOSTS

    names = {spec.name for spec in FLEET}
    assert set(SECOND_WORKER_HOSTS) <= names
    e2e = conftest.TESTS / "e2e"
    files = sorted(e2e.glob("test_*.py"))
    assert {f.name for f in files} >= conftest.E2E_SECOND_FILES
    second = set().union(*(_named_hosts(f, names) for f in files if f.name in conftest.E2E_SECOND_FILES))
    first = set().union(*(_named_hosts(f, names) for f in files if f.name not in conftest.E2E_SECOND_FILES))
    assert second, "the second fleet worker's files name no host of their own"
    assert second <= set(SECOND_WORKER_HOSTS), f"not the second worker's hosts: {sorted(second - set(SECOND_WORKER_HOSTS))}"
    assert not first & set(SECOND_WORKER_HOSTS), f"hosts used by both fleet workers: {sorted(first & set(SECOND_WORKER_HOSTS))}"
    for name in conftest.E2E_SECOND_FILES:
        assert conftest.xdist_group_of(f"tests/e2e/{name}::t") == "fleet2"
        assert conftest.xdist_group_of(f"tests/e2e/{name}::t") != conftest.xdist_group_of("tests/e2e/test_teardown.py::t")


class _Item:
    """What ``wait_for_groups`` reads of a pytest item: its node id, markers, the session's items, the config."""

    def __init__(self, nodeid, config, session=None, marks=("e2e",)):
        self.nodeid, self.config, self.session, self._marks = nodeid, config, session, marks

    def get_closest_marker(self, name):
        return name if name in self._marks else None


def test_a_teardown_test_waits_for_the_other_fleet_worker_and_fails_in_one_line_past_its_bound(tmp_path, monkeypatch):
    import threading
    import time
    import types

    import pytest

    monkeypatch.setattr(conftest.tempfile, "gettempdir", lambda: str(tmp_path))
    config = types.SimpleNamespace(workerinput={"testrunuid": "abc"}, option=types.SimpleNamespace())
    session = types.SimpleNamespace(items=[])
    down = _Item("tests/e2e/test_teardown.py::test_down", config, session, ("e2e", "teardown"))
    session.items = [down, _Item("tests/e2e/test_07_models.py::t", config, session),
                     _Item("tests/unit/test_rollout.py::t", config, session, ())]
    done = conftest.run_dir(config) / "fleet2.done"
    assert done.parent == tmp_path / "tritonfleet-pytest-abc"
    with pytest.raises(pytest.fail.Exception, match="worker group fleet2 did not end within 1 s"):
        conftest.wait_for_groups(down, timeout=1)
    threading.Timer(1.5, done.touch).start()
    t0 = time.monotonic()
    conftest.wait_for_groups(down, timeout=30)
    assert 1.4 < time.monotonic() - t0 < 10
    # without workers (one process runs every test in order) nothing is waited for
    conftest.wait_for_groups(_Item(down.nodeid, types.SimpleNamespace(option=types.SimpleNamespace()), session), timeout=0)


def test_a_worker_leaves_its_done_file_after_its_last_e2e_test_not_at_its_end(tmp_path, monkeypatch):
    """fleet2's worker runs the real-Triton layer after its e2e files: the teardown must not wait for that."""
    import types

    monkeypatch.setattr(conftest.tempfile, "gettempdir", lambda: str(tmp_path))
    config = types.SimpleNamespace(workerinput={"testrunuid": "r1"}, option=types.SimpleNamespace())
    ids = ["tests/e2e/test_04_faults.py::a", "tests/e2e/test_07_models.py::b", "tests/genmodel/test_cli.py::c",
           "tests/e2e/test_03_serve.py::d"]
    session = types.SimpleNamespace(config=config, items=[
        _Item(i, config, marks=("e2e",) if "/e2e/" in i else ("triton",)) for i in ids])
    plugin = conftest.GroupsDone()
    plugin.pytest_collection_finish(session)
    done = tmp_path / "tritonfleet-pytest-r1" / "fleet2.done"
    for nodeid in ids[:2]:
        assert not done.exists()
        plugin.pytest_runtest_logstart(nodeid, None)
        plugin.pytest_runtest_logfinish(nodeid, None)
    assert done.exists()  # before the worker's real-Triton tests
    assert not (tmp_path / "tritonfleet-pytest-r1" / "fleet.done").exists()  # another worker's group
    done.unlink()
    plugin.pytest_runtest_logstart(ids[2], None)
    plugin.pytest_runtest_logfinish(ids[2], None)
    assert not done.exists()
    plugin.pytest_sessionfinish(session)  # and at the end at the latest
    assert sorted(p.name for p in done.parent.iterdir()) == ["fleet2.done"]
    # the controller knows the workers' run id (xdist's --testrunuid, which pytest_configure sets)
    controller = types.SimpleNamespace(config=types.SimpleNamespace(option=types.SimpleNamespace(testrunuid="r1")))
    conftest.GroupsDone().pytest_sessionfinish(controller)
    assert not (tmp_path / "tritonfleet-pytest-r1").exists()


class _Node:
    """What xdist's scheduler asks of a worker: the test indices it is sent, and shutdown."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


class _Config:
    option = type("Option", (), {"loadscopereorder": True})()

    def getvalue(self, name):
        return {"dist": "loadgroup", "tx": ["3*popen"]}[name]


def test_the_fleet_groups_go_to_two_workers_and_the_host_groups_files_are_shared_long_ones_first():
    """GroupScheduling (tests/conftest.py), driven as xdist drives it: the fleet and fleet2 groups each go whole to a
    worker of their own; the host group goes file by file, LONG_HOST_FILES first, to the third worker and then to
    any worker nearly out of work, a fleet worker included once its group is ending."""
    pytest.importorskip("xdist")
    collection = [
        "tests/e2e/test_01_sandbox.py::a", "tests/e2e/test_01_sandbox.py::b", "tests/e2e/test_04_faults.py::a",
        "tests/e2e/test_04_faults.py::b", "tests/e2e/test_04_faults.py::c",
        "tests/e2e/test_03_serve.py::a", "tests/e2e/test_03_serve.py::b", "tests/e2e/test_03_serve.py::c",
        "tests/fake/test_roles.py::a", "tests/fake/test_roles.py::b", "tests/genmodel/test_cli.py::a",
        "tests/unit/test_catalog.py::a", "tests/unit/test_catalog.py::b", "tests/unit/test_catalog.py::c",
        "tests/unit/test_mut_sync.py::a", "tests/unit/test_no_traceback.py::a", "tests/unit/test_no_traceback.py::b",
        "tests/unit/test_zz.py::a", "tests/unit/test_sandbox_fleet.py::a",
    ]
    sched = conftest.pytest_xdist_make_scheduler(_Config(), None)
    nodes = [_Node(f"gw{n}") for n in range(3)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    sched.schedule()

    def sent(node):
        return [collection[i] for i in node.sent]

    fleet, fleet2, host = nodes
    assert sent(fleet) == ["tests/e2e/test_01_sandbox.py::a", "tests/e2e/test_01_sandbox.py::b",
                           "tests/e2e/test_03_serve.py::a", "tests/e2e/test_03_serve.py::b",
                           "tests/e2e/test_03_serve.py::c", "tests/unit/test_sandbox_fleet.py::a"]
    assert sent(fleet2) == ["tests/e2e/test_04_faults.py::a", "tests/e2e/test_04_faults.py::b",
                            "tests/e2e/test_04_faults.py::c", "tests/genmodel/test_cli.py::a"]
    # the host group's long files first (LONG_HOST_FILES' order); a worker with 2 tests or fewer to go gets more
    assert sent(host) == ["tests/unit/test_mut_sync.py::a", "tests/unit/test_no_traceback.py::a",
                          "tests/unit/test_no_traceback.py::b"]
    sched.mark_test_complete(host, host.sent[0])
    assert sent(host)[3:] == ["tests/fake/test_roles.py::a", "tests/fake/test_roles.py::b"]
    # fleet2 is down to its last tests: it takes the next host file (the short ones in collection order)
    sched.mark_test_complete(fleet2, fleet2.sent[0])
    assert len(fleet2.sent) == 4
    sched.mark_test_complete(fleet2, fleet2.sent[1])
    assert sent(fleet2)[4:] == ["tests/unit/test_catalog.py::a", "tests/unit/test_catalog.py::b",
                                "tests/unit/test_catalog.py::c"]
    # the fleet worker takes nothing more until it is nearly done
    for index in fleet.sent[:3]:
        sched.mark_test_complete(fleet, index)
    assert len(fleet.sent) == 6
    sched.mark_test_complete(fleet, fleet.sent[3])
    assert sent(fleet)[6:] == ["tests/unit/test_zz.py::a"]
    assert not sched.workqueue
    # every test was sent once
    assert sorted(sent(fleet) + sent(fleet2) + sent(host)) == sorted(collection)


def test_the_long_host_files_exist_and_belong_to_the_host_group():
    for path in conftest.LONG_HOST_FILES:
        assert (conftest.ROOT / path).is_file(), path
        assert conftest.xdist_group_of(f"{path}::t") == "host"
