"""Sandbox parts that need no fleet: killing processes, finding listeners and cgroups, the controller's
Debian mirrors, and recognising the sandbox's own service processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tritonfleet.sandbox import cgroups, debsources, machine, services


def test_terminate_kills_what_ignores_sigterm():
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        machine.terminate([proc.pid], grace=0.2)
        assert not machine.pid_alive(proc.pid)
        assert proc.wait(timeout=10) == -9
    finally:
        proc.kill()
        proc.wait()


def test_listeners_finds_the_owner_of_a_listening_socket():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert machine.listeners("127.0.0.1", [port]) == {}  # bound, not listening
        s.listen()
        assert machine.listeners("127.0.0.1", [port]) == {f"127.0.0.1:{port}": os.getpid()}
        assert machine.listeners("127.0.0.2", [port]) == {}


def test_debian_mirrors_from_deb822_sources(tmp_path):
    src = tmp_path / "debian.sources"
    src.write_text(textwrap.dedent("""\
        Types: deb
        # http://snapshot.debian.org/archive/debian/20250520T000000Z
        URIs: http://mirror.example/debian
        Suites: bookworm bookworm-updates
        Components: main

        Types: deb
        URIs: http://security.example/debian-security
        Suites: bookworm-security
        Components: main
        """))
    assert debsources.debian_mirrors(src) == ("http://mirror.example/debian", "http://security.example/debian-security")
    assert debsources.bookworm_lines(src) == [
        "deb http://mirror.example/debian bookworm main",
        "deb http://mirror.example/debian bookworm-updates main",
        "deb http://security.example/debian-security bookworm-security main",
    ]
    assert debsources.debian_mirrors(tmp_path / "missing") == (debsources.DEFAULT_MIRROR, debsources.DEFAULT_SECURITY)


def test_cgroups_are_found_by_their_parent_name_only(tmp_path):
    root = tmp_path / "cgroup"
    parent = root / "memory/process_api/abc/tritonfleet-sandbox"
    for d in (parent / "inf2", parent / "inf2big", root / "pids/tritonfleet-sandbox",
              root / "pids/tritonfleet-sandboxes/x", root / "cpu/tritonfleet-sandbox-old",
              root / "cpu/tritonfleet-sandbox-inf2x"):
        d.mkdir(parents=True)
    assert sorted(cgroups.find_cgroups(root=root)) == [parent / "inf2", parent / "inf2big",
                                                        root / "pids/tritonfleet-sandbox"]
    # the cgroups of an older version are found by exact host name, from the state
    assert root / "cpu/tritonfleet-sandbox-old" in cgroups.find_cgroups(["old"], root=root)
    assert cgroups.host_cgroups("inf2", root=root) == [parent / "inf2"]
    assert cgroups.host_cgroups("inf", root=root) == []


def test_service_processes_are_recognised_from_any_cache_dir():
    wanted = services.wanted_services(services.layout.CACHE_DIR)
    _, repo = wanted["repo"]
    moved = [a.replace(str(services.layout.CACHE_DIR), "/tmp/x") for a in repo]
    assert services.looks_like_service(["/usr/bin/python3.11", *moved[1:]])
    other_port = [a if a != str(services.REPO_PORT) else "8081" for a in repo]
    assert not services.looks_like_service(other_port)
    _, moto = wanted["s3"]
    assert services.looks_like_service(["/usr/bin/python3.11", *moto[1:]])
    assert services.is_recorded(0, {"argv": moto}) is False
    assert services._runs(moto, moto) and not services._runs(moto[:-1], moto)
    as_script = ["/usr/bin/python3", "/opt/x/bin/script", "-p", "1"]  # how /proc shows a script run by its #! interpreter
    assert services._runs(as_script, as_script[1:])



# the launcher (hostrun): runs nspawn, passes SIGTERM on to it, ends with nspawn's status. Like hostrun, it takes
# SIGTERM before it starts nspawn: set after, a SIGTERM in between (a busy machine) ended it with -15 (CI run 4 of
# the seventh session). Once nspawn has ended it says so (FILE.launcher: nspawn's status), then exits: a SIGTERM
# that comes while the interpreter exits (its handlers reset) still ends it with -15, on a busy machine
LAUNCHER_PY = """import signal, subprocess, sys
nspawn, stopping = None, []
def stop(*_):
    stopping.append(True)
    if nspawn is not None:
        nspawn.send_signal(signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
nspawn = subprocess.Popen(['systemd-nspawn', '-c', sys.argv[1], 'nspawn', '-b', '-D', sys.argv[2], sys.argv[3]],
                          executable='/bin/sh')
if stopping:
    nspawn.send_signal(signal.SIGTERM)
status = nspawn.wait()
with open(sys.argv[3] + '.launcher', 'w') as f:
    f.write(f'{status}\\n')
sys.exit(status)
"""
# nspawn (a shell named systemd-nspawn): its child is the host's init (SIGTERM: a clean shutdown, passed on to
# it); when the init ends, nspawn writes its status (128 + the signal that ended it) and ends too
NSPAWN_SH = """sleep 60 & init=$!
trap 'kill -TERM $init' TERM
while kill -0 $init 2>/dev/null; do wait $init; code=$?; done
echo $code > "$4"
"""


@pytest.mark.parametrize("discard", [True, False])
def test_a_discarded_host_is_killed_from_its_init_up_and_a_kept_one_is_asked_to_stop(tmp_path, monkeypatch, discard):
    """remove_host/down (``discard``): the host's init gets SIGKILL first, so that nspawn reaps it and the launcher
    reaps nspawn (killing a parent first leaves its children to PID 1 as zombies), and nothing waits for a clean
    shutdown. A kept host's launcher gets SIGTERM (passed on to nspawn: a clean shutdown of its disk)."""
    from tritonfleet.sandbox import hosts, network
    from tritonfleet.sandbox.layout import HostState

    h = HostState(name="tf-unit-stop", ip="192.0.2.1", instance_type="inf2.xlarge", instance_id="i-0", spec={})
    monkeypatch.setattr(network, "del_host_network", lambda host: None)  # no network of its own here
    monkeypatch.setattr(machine, "umount_under", lambda path: None)
    said = tmp_path / "init-status"
    # the launcher as hosts.launcher_cmd runs it: its command line names the module and the host's root
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER_PY, NSPAWN_SH, str(h.root), str(said),
                                 "-m", hosts.LAUNCHER, "-D", str(h.root)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(hosts._children(c) for c in hosts._children(launcher.pid)):
        time.sleep(0.05)  # until the init runs
    (nspawn,) = hosts._children(launcher.pid)
    assert hosts.is_launcher(machine.cmdline(launcher.pid), h.root)
    h.nspawn_pid = launcher.pid
    started = time.monotonic()
    hosts.stop_host(h, timeout=60, discard=discard)
    launcher.wait(10)
    took = time.monotonic() - started
    # it ended because nspawn did, whose init ended (the SIGTERM stop_host sends it may come as it exits)
    assert (tmp_path / "init-status.launcher").read_text() == "0\n"
    assert launcher.returncode in ((0, -signal.SIGTERM) if discard else (0,))
    if discard:
        assert said.read_text() == f"{128 + signal.SIGKILL}\n"  # the init killed first; nspawn saw it
        assert took < 20  # and nothing waited for the 60 s timeout
    else:
        assert said.read_text() == f"{128 + signal.SIGTERM}\n"  # a clean shutdown, passed down
    assert not machine.pid_alive(nspawn)
