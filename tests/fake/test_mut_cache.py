"""roles/facts/cache.py, the fact plan's edges: where plans are kept, which facts can be planned, what a damaged
plan loads, which hosts' plans are saved, the batch command run in a real shell (each fact into its own file, a
last line without a newline, the temporary directory removed), the arguments it runs with and the one save per
run. Written for the mutants ``make mutate`` found surviving (docs/mutation-survivors.md)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from types import SimpleNamespace

import pytest
from pyinfra.api import FactBase

from roles.facts import cache
from roles.facts.system import LinuxDistribution

# -- where a plan is kept --------------------------------------------------------------------------------------


def test_without_a_deploy_file_there_is_no_plan():
    assert cache._plan_file(SimpleNamespace(), SimpleNamespace(name="h1")) is None


def test_a_plan_is_named_by_24_hex_digits_under_the_directory_given(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONFLEET_FACT_PLANS", str(tmp_path / "plans"))
    path = cache._plan_file(SimpleNamespace(current_exec_filename="deploys/serve.py"), SimpleNamespace(name="h1"))
    assert path.parent == tmp_path / "plans" and len(path.stem) == 24 and path.suffix == ".json"


def test_plans_default_to_the_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITONFLEET_FACT_PLANS", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = cache._plan_file(SimpleNamespace(current_exec_filename="deploys/serve.py"), SimpleNamespace(name="h1"))
    assert path.parent == tmp_path / ".cache" / "tritonfleet" / "factplans"


# -- the cache on hosts ----------------------------------------------------------------------------------------


class Host:
    """A host whose fact reads, commands and uploads are recorded; reading ``Outer`` reads ``Inner`` and runs a
    command inside that read (as a fact whose command needs another fact does)."""

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, []

    def get_fact(self, cls, *args, **kwargs):
        self.calls.append(("fact", cls.__name__, args, kwargs))
        if cls is Outer:
            self.get_fact(Inner)  # through the cache: the wrapped method
            self.run_shell_command("cat /proc/cpuinfo")
        return f"{cls.__name__}{args}"

    def run_shell_command(self, *args, **kwargs):
        self.calls.append(("run", args, kwargs))
        return True

    def put_file(self, *args, **kwargs):
        self.calls.append(("put", args, kwargs))
        return True


def installed(*names):
    hosts = [Host(name) for name in names]
    st = SimpleNamespace(inventory=hosts)
    cache.install(st)
    return st, hosts


def test_install_is_idempotent_and_covers_hosts_added_later():
    st, (h1,) = installed("h1")
    first = getattr(h1, cache._MARK)
    st.inventory.append(Host("h2"))
    cache.install(st)
    assert getattr(h1, cache._MARK) is first and getattr(st.inventory[1], cache._MARK) is not None
    h1.get_fact(Inner)
    assert [c for c in h1.calls if c[0] == "fact"] == [("fact", "Inner", (), {})]  # wrapped once, read once


def test_facts_with_arguments_are_read_with_them_and_never_planned():
    _, (h1,) = installed("h1")
    assert h1.get_fact(Inner, "x", flag=1) == "Inner('x',)"
    assert h1.calls == [("fact", "Inner", ("x",), {"flag": 1})]
    assert getattr(h1, cache._MARK).asked == {}


def test_commands_and_uploads_get_their_arguments():
    _, (h1,) = installed("h1")
    h1.run_shell_command("true", _sudo=True)
    h1.put_file("src", "dst", mode="644")
    assert h1.calls == [("run", ("true",), {"_sudo": True}), ("put", ("src", "dst"), {"mode": "644"})]


def test_a_command_run_inside_nested_fact_reads_keeps_the_cache():
    _, (h1,) = installed("h1")
    cached = getattr(h1, cache._MARK)
    cached.values[("other", "()", "[]")] = "kept"
    h1.get_fact(Outer)
    assert cached.values[("other", "()", "[]")] == "kept" and cached.reading == 0


def test_only_fact_classes_without_arguments_are_plannable():
    assert not cache._plannable("LinuxDistribution", ())
    assert not cache._plannable(Echo, ("x",))


# -- which facts can be planned, what a plan loads -------------------------------------------------------------


class Echo(FactBase):
    def command(self):
        return "echo hello; echo world"

    def process(self, output):
        return list(output)

    @staticmethod
    def default():
        return "default"


class Inner(Echo):
    pass


class Outer(Echo):
    pass


class WithShell(Echo):
    shell_executable = "bash"


class Guarded(Echo):
    def requires_command(self):
        return "docker"


def test_facts_with_their_own_shell_or_a_guard_command_are_not_planned():
    assert cache._plannable(Echo, ())
    assert not cache._plannable(WithShell, ())
    assert not cache._plannable(Guarded, ())


@pytest.mark.parametrize("content", ['{"pyinfra.facts.server": 1}', "7"])
def test_a_plan_that_is_no_list_loads_nothing(tmp_path, content):
    path = tmp_path / "plan.json"
    path.write_text(content)
    assert cache._load_plan(path) == []


def test_bad_entries_of_a_plan_are_skipped_and_the_rest_loaded(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps([["no.such.module", "X", "{}"], ["roles.facts.system", "LinuxDistribution", "[1]"],
                                ["roles.facts.system", "LinuxDistribution", "{}"]]))
    assert cache._load_plan(path) == [(LinuxDistribution, {})]


# -- which plans are saved -------------------------------------------------------------------------------------


def test_only_hosts_with_a_plan_file_and_facts_asked_are_saved(tmp_path):
    def host(plan, asked):
        h = SimpleNamespace()
        c = cache._HostCache()  # no plan unless given: one never made (API mode)
        c.asked = asked
        if plan is not None:
            c.plan = plan
        setattr(h, cache._MARK, c)
        return h

    entry = ["roles.facts.system", "LinuxDistribution", "{}"]
    hosts = [SimpleNamespace(), host(None, {"k": entry}), host(tmp_path / "p" / "none.json", {}),
             host(tmp_path / "p" / "h1.json", {"k": entry})]
    cache._save_plans(SimpleNamespace(inventory=hosts))
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["h1.json"]
    assert json.loads((tmp_path / "p" / "h1.json").read_text()) == [entry]
    assert stat.S_IMODE(os.stat(tmp_path / "p").st_mode) == 0o700


# -- the batch command -----------------------------------------------------------------------------------------


class NoNewline(Echo):
    def command(self):
        return "printf abc"


class Fails(Echo):
    def command(self):
        return "echo partial; exit 3"


class Empty(Echo):
    def command(self):
        return "true"


class Skipped(Echo):
    def check_preconditions(self, state, host):
        return (state.skip, host.name) == ("h1", "h1")


class ShellHost:
    """The parts of a pyinfra Host _prefetch_host uses; its commands run in a real shell (TMPDIR ``tmp``)."""

    name = "h1"
    current_op_global_arguments = None

    def __init__(self, tmp, connected=True, fail: Exception | None = None) -> None:
        setattr(self, cache._MARK, cache._HostCache())
        self.tmp, self.connected, self.fail, self.sent, self.connects = tmp, connected, fail, [], []

    def connect(self, **kwargs):
        self.connects.append(kwargs)
        self.connected = True

    def run_shell_command(self, command, **kwargs):
        self.sent.append((kwargs, getattr(self, cache._MARK).reading))
        if self.fail:
            raise self.fail
        # -u: a variable the command forgot to set is an error (not "" making "$d/0" a path under /)
        done = subprocess.run(["sh", "-u", "-c", command.get_raw_value()], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TMPDIR": str(self.tmp)})
        return done.returncode == 0, SimpleNamespace(stdout_lines=done.stdout.splitlines())


def state(print_output=False, print_input=False):
    return SimpleNamespace(print_fact_output=print_output, print_fact_input=print_input, skip="h1")


@pytest.fixture
def globals_(monkeypatch):
    """The global arguments the facts run with (as pop_global_arguments would give them)."""
    given = {"_sudo": True, "_sudo_user": None}
    monkeypatch.setattr("pyinfra.api.facts.pop_global_arguments", lambda st, host, kw: (dict(given), {}))
    return given


def key(cls):
    return (cls, "()", "[]")


def test_the_batch_reads_each_fact_in_a_real_shell_and_cleans_up(tmp_path, globals_):
    host = ShellHost(tmp_path)
    plan = [(Echo, {}), (Skipped, {}), (NoNewline, {}), (Fails, {}), (Empty, {})]
    assert cache._prefetch_host(state(), host, plan) == 3
    values = getattr(host, cache._MARK).values
    assert values == {key(Echo): ["hello", "world"], key(NoNewline): ["abc"], key(Empty): "default"}
    assert list(tmp_path.iterdir()) == []  # its temporary directory removed


def test_the_batch_runs_with_the_connector_arguments_and_the_printing_asked(tmp_path, globals_):
    host = ShellHost(tmp_path, connected=False)
    getattr(host, cache._MARK).reading = 2  # inside other fact reads
    cache._prefetch_host(state(print_output=True, print_input=True), host, [(Echo, {})])
    assert host.connects == [{"reason": "to read its facts", "raise_exceptions": True}]
    ((kwargs, reading),) = host.sent
    assert kwargs == {"print_output": True, "print_input": True, "_sudo": True, "_sudo_user": None}
    assert reading == 3 and getattr(host, cache._MARK).reading == 2  # a read, not a change, while it runs


def test_facts_already_cached_are_not_read_again(tmp_path, globals_):
    host = ShellHost(tmp_path)
    getattr(host, cache._MARK).values[key(Echo)] = ["cached"]
    assert cache._prefetch_host(state(), host, [(Echo, {})]) == 0 and host.sent == []
    assert cache._prefetch_host(state(), host, [(Echo, {}), (NoNewline, {})]) == 1
    assert getattr(host, cache._MARK).values[key(NoNewline)] == ["abc"]


def test_a_batch_that_cannot_run_seeds_nothing(tmp_path, globals_):
    host = ShellHost(tmp_path, fail=OSError("connection lost"))
    assert cache._prefetch_host(state(), host, [(Echo, {})]) == 0
    assert getattr(host, cache._MARK).values == {} and getattr(host, cache._MARK).reading == 0


# -- prefetch: every host at once, one save per run ------------------------------------------------------------


def test_prefetch_survives_a_failing_host_and_registers_one_save_per_run(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONFLEET_FACT_PLANS", str(tmp_path))
    registered = []
    monkeypatch.setattr(cache.atexit, "register", lambda *args: registered.append(args))
    seen = []

    def prefetch_host(st, host, plan):
        import gevent

        gevent.sleep(0.05)  # a read over the network: the greenlet yields
        seen.append(host.name)
        if host.name == "h1":
            raise RuntimeError("boom")
        return 1

    monkeypatch.setattr(cache, "_prefetch_host", prefetch_host)
    st = SimpleNamespace(current_exec_filename="deploys/serve.py")
    hosts = []
    for name in ("h1", "h2"):
        h = SimpleNamespace(name=name)
        setattr(h, cache._MARK, cache._HostCache())
        cache._plan_file(st, h).write_text(json.dumps([["roles.facts.system", "LinuxDistribution", "{}"]]))
        hosts.append(h)
    cache.prefetch(st, hosts)
    assert seen == ["h1", "h2"]  # all done when it returns
    cache.prefetch(st, hosts)
    assert seen == ["h1", "h2", "h1", "h2"]
    assert registered == [(cache._save_plans, st)]


# -- a plan is data (issue "Security", item 1) ------------------------------------------------------------------


def _plan(tmp_path, entries, mode=0o600, dir_mode=0o700):
    d = tmp_path / "plans"
    d.mkdir(exist_ok=True)
    d.chmod(dir_mode)
    path = d / "plan.json"
    path.write_text(json.dumps(entries))
    path.chmod(mode)
    return path


def test_a_plan_may_name_only_the_fact_classes_of_roles_facts(tmp_path):
    """pyinfra's ``server.Command`` (a command given as data) was shown to run from a planted plan; a plan
    names roles/facts/ classes only, from the module that defines them, and nothing else is imported."""
    path = _plan(tmp_path, [
        ["pyinfra.facts.server", "Command", repr({"command": "touch /root/pwned"})],
        ["pyinfra.facts.server", "LinuxDistribution", "{}"],
        ["os", "system", repr({"command": "touch /root/pwned"})],
        ["roles.facts.cache", "FactBase", "{}"],  # imported there, defined elsewhere
        ["roles.facts.system", "server.Command", "{}"],  # not a name of the module itself
        ["roles.facts.../x", "Y", "{}"],
        ["roles.factsx", "Y", "{}"],
        ["roles.facts.system", "LinuxDistribution", "{}"]])
    assert cache._load_plan(path) == [(LinuxDistribution, {})]


def test_a_plan_s_arguments_are_those_the_fact_takes_of_the_types_it_declares(tmp_path):
    from roles.facts.files import FileDigests
    from roles.facts.models import AgentState

    path = _plan(tmp_path, [
        ["roles.facts.files", "FileDigests", repr({"paths": "/etc/passwd; touch /root/pwned"})],  # not a tuple
        ["roles.facts.files", "FileDigests", repr({"paths": ("/a", 7)})],  # not all str
        ["roles.facts.files", "FileDigests", repr({"paths": ("/a",), "extra": 1})],  # no such argument
        ["roles.facts.files", "FileDigests", "{}"],  # its one argument missing
        ["roles.facts.models", "AgentState", repr({"python": "python3", "venv": 3})],
        ["roles.facts.models", "AgentState", "{'python': __import__('os')}"],  # not a literal
        ["roles.facts.files", "FileDigests", repr({"paths": ("/a", "/b")})],
        ["roles.facts.models", "AgentState", repr({"python": "python3", "venv": "/opt/v"})]])
    assert cache._load_plan(path) == [(FileDigests, {"paths": ("/a", "/b")}),
                                      (AgentState, {"python": "python3", "venv": "/opt/v"})]


@pytest.mark.parametrize("mode, dir_mode, why", [
    (0o666, 0o700, "plan.json is writable by group or others (mode 666)"),
    (0o620, 0o700, "plan.json is writable by group or others (mode 620)"),
    (0o600, 0o777, "plans is writable by group or others (mode 777)"),
    (0o600, 0o770, "plans is writable by group or others (mode 770)")])
def test_a_plan_others_could_have_written_is_ignored_with_a_warning(tmp_path, caplog, mode, dir_mode, why):
    path = _plan(tmp_path, [["roles.facts.system", "LinuxDistribution", "{}"]], mode, dir_mode)
    with caplog.at_level("WARNING"):
        assert cache._load_plan(path) == []
    assert f"fact plan {path} ignored (" in caplog.text and why in caplog.text
    assert "its facts are read one by one" in caplog.text
    path.chmod(0o600)
    path.parent.chmod(0o700)
    assert cache._load_plan(path) == [(LinuxDistribution, {})]


def test_a_plan_that_is_a_symlink_or_not_ours_is_ignored(tmp_path, caplog, monkeypatch):
    real = _plan(tmp_path, [["roles.facts.system", "LinuxDistribution", "{}"]])
    link = real.parent / "link.json"
    link.symlink_to(real)
    with caplog.at_level("WARNING"):
        assert cache._load_plan(link) == []
    assert "link.json is a symlink" in caplog.text
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    with caplog.at_level("WARNING"):
        assert cache._load_plan(real) == []
    assert f"is owned by uid {os.stat(real).st_uid}, not by this user (4242)" in caplog.text
