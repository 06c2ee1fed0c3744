"""Sandbox parts that need no fleet: killing processes, finding listeners and cgroups, the controller's
Debian mirrors, and recognising the sandbox's own service processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

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
    as_script = [sys.executable, *moto]  # how /proc shows a script run by its #! interpreter
    assert services.looks_like_service(as_script)
    assert services.is_recorded(0, {"argv": moto}) is False
    assert services._runs(as_script, moto) and services._runs(moto, moto)
    assert not services._runs(moto[:-1], moto)

