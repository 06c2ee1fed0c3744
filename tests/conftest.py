"""Shared pytest setup for every layer of the suite.

* The repository root on sys.path (roles/, deploys/ are top-level dirs).
* Layers: every test gets exactly one layer marker from its folder, so each layer runs on its own
  (``pytest -m pure``, ``-m fake``, ``-m triton``, ``-m sandbox``, ``-m e2e``).
* Three groups for pytest-xdist (``XDIST_GROUPS``, ``E2E_SECOND_FILES``): ``make test`` runs the sandbox
  fleet's tests on two workers, on hosts of their own, and the rest on those and a third, at the same time.
* Order: tests marked ``teardown`` (they take the e2e fleet down) run after every other e2e test,
  whatever their file is called.
* CI (``CI=true``): a skipped test is a failure unless it is marked ``allow_skip("reason")``;
  a missing tool, package or privilege on the CI machine must not pass quietly.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# layer marker -> what the layer needs
LAYERS = {
    "pure": "pure Python: no hosts, no root, no external tools (tests/unit)",
    "fake": "pyinfra deploys against @fake hosts: no real hosts (tests/fake)",
    "triton": "a real Triton 2.51 server on CPU, from the nvidia-pytriton wheel (tests/genmodel)",
    "sandbox": "the sandbox fleet's own machinery on this machine: root, mmdebstrap, dpkg, apt tools, "
               "no running fleet (tests/unit/test_sandbox_*.py)",
    "e2e": "needs root and the sandbox fleet (real hosts) (tests/e2e)",
}

# `make test` runs pytest-xdist with three workers and `--dist loadgroup`: "fleet" runs the sandbox fleet's e2e
# tests, then the sandbox builders', in order (they share the machine's sandbox state and the e2e teardown comes
# last); "fleet2" runs the e2e files of E2E_SECOND_FILES on hosts of their own at the same time, then the
# real-Triton layer (its worker is free of the fleet by then); "host" runs the pure and @fake layers and the
# sandbox builders that need no fleet, meanwhile, file by file on the third worker, and on the other two as well
# once their own group is ending (GroupScheduling: the three share the host group's tail). A worker that runs a
# test of a layer that needs no fleet lowers its CPU priority (HOST_GROUP_NICE): the fleet's deploys get the CPU
# first. The group follows the file's layer by LAYER_RULES (below), and GroupScheduling below does the grouping:
# xdist 3.8's own `xdist_group` marks have no effect under pytest 9.2 (xdist renames ``item._nodeid``, which
# pytest 9.2 no longer reads).
XDIST_GROUPS = {"pure": "host", "fake": "host", "triton": "fleet2", "sandbox": "fleet", "e2e": "fleet"}
#: the layers that need no sandbox fleet: a worker lowers its CPU priority once it runs one of their tests
NO_FLEET_LAYERS = {"pure", "fake", "triton"}
# The e2e files that run on a second fleet worker ("fleet2"), beside the first: each uses only hosts no other e2e
# file touches (tests/e2e/conftest.py's ``SECOND_WORKER_HOSTS``) and state of its own (its S3 prefix, its inventories), so
# the two streams share the fleet's bring-up (one ``up`` under the sandbox's lock, the machine's baseline taken
# once: ``run_dir``) and nothing else. The teardown tests wait for this stream to end (``wait_for_groups``).
E2E_SECOND_FILES = {"test_04_faults.py", "test_07_models.py", "test_12_server_models.py", "test_15_release.py",
                    "test_16_asg_boot.py", "test_17_watchdog_leak.py"}
# Of the sandbox layer, only these files touch the machine's sandbox state (its state dir, machines, bridge and
# ports) and so run on the fleet worker after the e2e tests; the other builders' tests (images, packages,
# repositories, the PyPI index, IMDS) work in temporary directories and on loopback, and run on the host
# worker, which has the time to spare (`make test` prints the time per group at the end).
SANDBOX_FLEET_FILES = {"test_sandbox_fleet.py", "test_sandbox_machine.py", "test_sandbox_lb.py",
                       "test_sandbox_hostrun.py"}

# First match wins: (top folder under tests/, file name glob, layer). A test file no rule matches is a
# usage error, so a new folder has to say which layer it belongs to.
LAYER_RULES = [
    ("unit", "test_sandbox_*.py", "sandbox"),
    ("unit", "*", "pure"),
    ("fake", "*", "fake"),
    ("genmodel", "*", "triton"),
    ("e2e", "*", "e2e"),
]

OTHER_MARKERS = [
    "teardown: runs after every other e2e test of the session (takes the sandbox fleet down)",
    "allow_skip(reason): this test may be skipped under CI=true; the reason says why that is acceptable",
    "slow: takes more than a few seconds",
]


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in LAYERS.items():
        config.addinivalue_line("markers", f"{name}: layer: {help_text}")
    for line in OTHER_MARKERS:
        config.addinivalue_line("markers", line)
    config.pluginmanager.register(TeardownLast(), "tritonfleet-teardown-last")
    config.pluginmanager.register(GroupTimes(), "tritonfleet-group-times")
    config.pluginmanager.register(GroupsDone(), "tritonfleet-groups-done")
    if getattr(config, "workerinput", None) is None and getattr(config.option, "testrunuid", "set") is None:
        # xdist's own, made here so that the controller knows the workers' run_dir (it removes it at the end)
        config.option.testrunuid = uuid.uuid4().hex


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def layer_of(path: Path) -> str | None:
    """The layer of a test file by its folder (``None``: outside every layer)."""
    try:
        rel = Path(path).resolve().relative_to(TESTS)
    except ValueError:
        return None
    for folder, name_glob, layer in LAYER_RULES:
        if rel.parts[0] == folder and fnmatch.fnmatch(rel.name, name_glob):
            return layer
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the layer markers must be there by then
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unplaced = []
    for item in items:
        explicit = {m.name for m in item.iter_markers() if m.name in LAYERS}
        if len(explicit) > 1:
            raise pytest.UsageError(f"{item.nodeid} has more than one layer marker: {sorted(explicit)}")
        if not explicit:
            layer = layer_of(item.path)
            if layer is None:
                unplaced.append(item.nodeid)
                continue
            item.add_marker(getattr(pytest.mark, layer))
    if unplaced:
        raise pytest.UsageError(
            "tests outside every layer (add a rule to LAYER_RULES in tests/conftest.py): " + ", ".join(unplaced))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under ``--dist loadgroup``: the fleet groups ("fleet", "fleet2") one scope each, handed out first, one to a
    worker, their tests in collection order (the order TeardownLast leaves); the host group one scope per file
    (:func:`scope_of`), handed out in :func:`scope_order` to whichever worker is nearly out of work: the third worker
    first, and the fleet workers too once their own group is ending, so the host group's tail is shared."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the first call comes once the whole queue is known (``schedule``)
                self.ordered = True
                first: dict[str, int] = {}
                for n, nodeid in enumerate(self.collection or ()):
                    first.setdefault(scope_of(nodeid), n)
                queue = sorted(self.workqueue.items(), key=lambda kv: scope_order(kv[0], first.get(kv[0], 0)))
                self.workqueue.clear()
                self.workqueue.update(queue)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


def scope_of(nodeid: str) -> str:
    """The xdist scope of a test under ``make test``: its group when that is a fleet group, else its file."""
    group = xdist_group_of(nodeid)
    return group if group != "host" else nodeid.split("::", 1)[0]


#: The host group's longest files (30 s or more of a `make test`: its "slowest files" line), longest first, handed out
#: before the others so that the group's tail, shared by every worker, is made of short files. Only the order
#: depends on it.
LONG_HOST_FILES = ("tests/unit/test_mut_sync.py", "tests/unit/test_agent_crash.py", "tests/unit/test_agent_sync.py",
                   "tests/unit/test_asg_lifecycle.py", "tests/unit/test_lint.py", "tests/unit/test_release.py",
                   "tests/unit/test_no_traceback.py", "tests/unit/test_lb_elbv2_canary.py",
                   "tests/unit/test_fleet_asg.py", "tests/unit/test_agent_s3_faults.py", "tests/unit/test_mut_live.py",
                   "tests/unit/test_lb_haproxy.py")


def scope_order(scope: str, first_seen: int) -> tuple[int, int]:
    """The fleet groups first (one to each of the first two workers), then the host group's LONG_HOST_FILES, then its
    other files in collection order."""
    if scope in ("fleet", "fleet2"):
        return (0, ("fleet", "fleet2").index(scope))
    if scope in LONG_HOST_FILES:
        return (1, LONG_HOST_FILES.index(scope))
    return (2, first_seen)


def xdist_group_of(nodeid: str) -> str:
    """The XDIST_GROUPS group of a test, by its file's layer (and SANDBOX_FLEET_FILES)."""
    path = ROOT / nodeid.split("::", 1)[0]
    layer = layer_of(path) or ""
    if layer == "sandbox" and path.name not in SANDBOX_FLEET_FILES:
        return "host"
    if layer == "e2e" and path.name in E2E_SECOND_FILES:
        return "fleet2"
    return XDIST_GROUPS.get(layer, "host")


def run_dir(config: pytest.Config) -> Path:
    """A directory shared by every worker of this pytest run (xdist's ``testrunuid``), or one of this process's
    own in a run without workers: where workers leave what the others wait for."""
    workerinput = getattr(config, "workerinput", None)
    uid = workerinput["testrunuid"] if workerinput else getattr(config.option, "testrunuid", None)
    path = Path(tempfile.gettempdir()) / f"tritonfleet-pytest-{uid or f'pid{os.getpid()}'}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@contextlib.contextmanager
def run_lock(config: pytest.Config, name: str) -> Iterator[None]:
    """One worker of this run at a time in the block (``flock`` on a file of ``run_dir``)."""
    with open(run_dir(config) / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


#: how long the teardown tests wait for the other fleet worker's tests to end (they take the fleet down)
GROUP_WAIT_S = 1500


def wait_for_groups(item: pytest.Item, timeout: float = GROUP_WAIT_S) -> None:
    """On an xdist worker, wait until every other worker that runs e2e tests has ended (its ``<group>.done`` in
    ``run_dir``, written when its session finishes); bounded by ``timeout``, then the test fails saying so."""
    if getattr(item.config, "workerinput", None) is None:
        return  # one process runs every test in order: the others are done by now (TeardownLast)
    mine = xdist_group_of(item.nodeid)
    others = {xdist_group_of(i.nodeid) for i in item.session.items if i.get_closest_marker("e2e") is not None}
    others.discard(mine)
    deadline = time.monotonic() + timeout
    for group in sorted(others):
        done = run_dir(item.config) / f"{group}.done"
        while not done.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the e2e tests of worker group {group} did not end within {timeout:.0f} s; the "
                            f"fleet is left up for them (the next `sandbox up` cleans it)", pytrace=False)
            time.sleep(1)


class GroupsDone:
    """A worker writes ``<group>.done`` in ``run_dir`` once its group's last e2e test has ended (its module's
    fixtures torn down): the fleet is free of it, whatever the worker runs next (fleet2's real-Triton layer). At
    the end of its session at the latest (a run stopped early)."""

    def __init__(self) -> None:
        self.e2e_left: dict[str, int] = {}
        self.ran: set[str] = set()
        self.config: pytest.Config | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.config = session.config
        for item in session.items:
            if item.get_closest_marker("e2e") is not None:
                group = xdist_group_of(item.nodeid)
                self.e2e_left[group] = self.e2e_left.get(group, 0) + 1

    def _done(self, group: str) -> None:
        if self.config is not None and getattr(self.config, "workerinput", None) is not None:
            (run_dir(self.config) / f"{group}.done").touch()

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.ran.add(xdist_group_of(nodeid))

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        group = xdist_group_of(nodeid)
        if layer_of(ROOT / nodeid.split("::", 1)[0]) == "e2e" and group in self.e2e_left:
            self.e2e_left[group] -= 1
            if self.e2e_left[group] == 0:
                self._done(group)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if getattr(session.config, "workerinput", None) is None:
            shutil.rmtree(run_dir(session.config), ignore_errors=True)  # the controller, at the very end
            return
        self.config = session.config
        for group in self.ran:
            self._done(group)


class TeardownLast:
    """Runs the tests marked ``teardown`` after every other e2e test, whatever their files are called.

    They go right after the last other e2e test (all of them, if there is none), keeping their own
    order: the fleet is down before any later layer runs. Only e2e tests can use the fleet (its
    fixture lives in tests/e2e/conftest.py), so nothing that needs it comes after them."""

    @pytest.hookimpl(trylast=True)  # after every other plugin that reorders
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        down = [i for i in items if i.get_closest_marker("teardown") is not None]
        if not down:
            return
        rest = [i for i in items if i.get_closest_marker("teardown") is None]
        last_e2e = max((n for n, i in enumerate(rest) if i.get_closest_marker("e2e") is not None),
                       default=len(rest) - 1)
        items[:] = rest[:last_e2e + 1] + down + rest[last_e2e + 1:]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Under xdist another worker may still run e2e tests on the fleet (``E2E_SECOND_FILES``): a teardown
        test waits for it first."""
        if item.get_closest_marker("teardown") is not None:
            wait_for_groups(item)


_RENICED: list[bool] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under ``make test`` (xdist, ``--dist loadgroup``) the fleet group is the critical path (its e2e tests wait on
    hosts that share the machine's CPUs) and the other tests have time to spare: a worker lowers its own CPU
    priority once it runs a test of a layer that needs no fleet (nice 10, inherited by the Triton servers and
    tools it starts; fleet2's worker after its e2e files), so that the fleet's deploys get the CPU first."""
    workerinput = getattr(item.config, "workerinput", None)  # a worker's own "dist" option reads "no"
    if _RENICED or workerinput is None or "loadgroup" not in " ".join(workerinput.get("mainargv", [])):
        return
    if layer_of(item.path) in NO_FLEET_LAYERS:
        _RENICED.append(True)
        os.nice(HOST_GROUP_NICE)


#: the host group's CPU priority under ``make test`` (see pytest_runtest_setup)
HOST_GROUP_NICE = 10


class GroupTimes:
    """Sums the time of setup, call and teardown per XDIST_GROUPS group and per layer, and prints it at the
    end: the suite's wall time is that of its slowest group, so this says where time is to be won."""

    def __init__(self) -> None:
        self.groups: dict[str, float] = {}
        self.layers: dict[str, float] = {}
        self.files: dict[str, float] = {}
        self.workers: dict[str, float] = {}

    def pytest_runtest_logreport(self, report) -> None:
        path = report.nodeid.split("::", 1)[0]
        layer = layer_of(ROOT / path) if path.startswith("tests/") else None
        group = xdist_group_of(report.nodeid) if layer else "host"
        self.groups[group] = self.groups.get(group, 0.0) + report.duration
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
        if worker:
            self.workers[worker] = self.workers.get(worker, 0.0) + report.duration
        self.layers[layer or "?"] = self.layers.get(layer or "?", 0.0) + report.duration
        self.files[path] = self.files.get(path, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if getattr(terminalreporter.config, "workerinput", None) is not None or not self.groups:
            return
        line = ", ".join(f"{g} {t:.0f} s" for g, t in sorted(self.groups.items()))
        layers = ", ".join(f"{g} {t:.0f} s" for g, t in sorted(self.layers.items()))
        workers = ", ".join(f"{w} {t:.0f} s" for w, t in sorted(self.workers.items()))
        terminalreporter.write_line(f"time per group: {line}; per worker: {workers or '-'} (per layer: {layers})")
        slowest = sorted(self.files.items(), key=lambda kv: -kv[1])[:15]
        terminalreporter.write_line("slowest files: " + ", ".join(f"{p.removeprefix('tests/')} {t:.0f} s"
                                                                   for p, t in slowest))


def _allowed_skip(node) -> bool:
    marker = node.get_closest_marker("allow_skip")
    if marker is None:
        return False
    reason = marker.args[0] if marker.args else marker.kwargs.get("reason")
    if not (isinstance(reason, str) and reason.strip()):
        raise pytest.UsageError(f"{node.nodeid}: allow_skip needs a reason, e.g. @pytest.mark.allow_skip('why')")
    return True


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")  # (path, lineno, "Skipped: reason")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and in_ci() and not hasattr(report, "wasxfail") and not _allowed_skip(item)):
        report.outcome = "failed"
        report.longrepr = (f"skipped under CI=true ({_skip_reason(report)}): CI must run every test; install "
                           f"what is missing, or mark the test @pytest.mark.allow_skip('reason')")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A module-level skip (pytest.importorskip, pytest.skip(allow_module_level=True)) skips a whole file.
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not _allowed_skip(collector):
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid} skipped under CI=true ({_skip_reason(report)}): CI must run "
                           f"every test; install what is missing")
