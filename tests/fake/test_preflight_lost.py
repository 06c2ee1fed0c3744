"""Preflight's rule for a host lost on the connection while its facts are read (issue 20, part 3): pyinfra has
failed the host (its fact read failed), so it is left out with its cause while the others go on; bad data on
any host still stops every host. The whole path, with a real partition, is tests/e2e/test_05_partition.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from roles.preflight import _Causes, _each
from tritonfleet.config import MISSING, ConfigError


class _Host:  # hashable like pyinfra's hosts
    def __init__(self, name: str) -> None:
        self.name, self.print_prefix = name, f"\x1b[1m[{name}]\x1b[0m "


def _hosts(*names):
    return [_Host(n) for n in names]


def test_a_host_pyinfra_failed_during_the_check_is_lost_not_an_error():
    a, b, c = _hosts("a", "b", "c")
    state = SimpleNamespace(failed_hosts=set())

    def check(h):
        if h is b:  # the fact read failed on the connection: pyinfra failed the host, the fact was its default
            state.failed_hosts.add(h)
            raise ConfigError("b", "platform", MISSING, "unsupported OS unknown (no /etc/os-release)")
        return h.name.upper()

    lost: dict[str, str] = {}
    done, errors = _each(state, [a, b, c], check, lost)
    assert done == {"a": "A", "c": "C"} and errors == [] and list(lost) == ["b"]
    # a later stage does not ask a lost host again
    done, errors = _each(state, [a, b, c], lambda h: h.name, lost)
    assert sorted(done) == ["a", "c"]


def test_bad_data_on_a_reachable_host_is_still_an_error_for_everyone():
    a, b = _hosts("a", "b")
    state = SimpleNamespace(failed_hosts=set())

    def check(h):
        if h is a:
            raise ConfigError("a", "docker_ulimit_stack", 0, "expected -1 (unlimited) or a positive limit")
        return h.name

    lost: dict[str, str] = {}
    done, errors = _each(state, [a, b], check, lost)
    assert errors == ["a: docker_ulimit_stack 0: expected -1 (unlimited) or a positive limit"] and lost == {}


def test_a_host_that_succeeds_but_was_failed_meanwhile_is_lost():
    (a,) = _hosts("a")
    state = SimpleNamespace(failed_hosts=set())

    def check(h):
        state.failed_hosts.add(h)  # e.g. the IMDS fact failed, its default went through
        return "x"

    lost: dict[str, str] = {}
    assert _each(state, [a], check, lost) == ({}, []) and list(lost) == ["a"]


def test_the_cause_is_what_pyinfra_logged_for_the_host_first():
    hosts = _hosts("gpu", "inf2")
    causes = _Causes(hosts)
    logger = logging.getLogger("pyinfra")
    logger.addHandler(causes)
    try:
        logger.error("\x1b[1m[gpu]\x1b[0m \x1b[31mSSH error: timed out\x1b[0m")
        logger.error("\x1b[1m[gpu]\x1b[0m could not load fact: server.LinuxDistribution")
        logger.warning("unrelated")
    finally:
        logger.removeHandler(causes)
    assert causes.said == {"gpu": "SSH error: timed out"}
