"""Table-driven tests of the facts, as in pyinfra's own tree (``tests/facts/<module>.<Fact>/*.json``): a
fact's raw command output in, the parsed value out.

A case file ``tests/fake/facts/<module>.<Fact>/<case>.json`` holds ``args`` (the fact's arguments),
``output`` (the command's output lines) and ``fact`` (the value ``process()`` returns; server records compare
as their JSON form), or ``fact_keys`` ({key: [sorted keys of that part]}) where only the shape matters.

Every fact's command is also checked for what it must never ask the host for (``NEVER``): the command line
of a container, which carries Triton's arguments and the repository secret (`pyinfra -vvv` prints facts'
output)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from pyinfra.api import FactBase

from tritonfleet import hostcontract as hc

CASES = Path(__file__).parent / "facts"
FACT_MODULES = ("system", "packages", "docker", "accelerators", "files", "models")
NEVER = (".Args", ".Config.Cmd", ".Path", ".Config.Entrypoint", "docker inspect $", "docker inspect \"$")


def _plain(value):
    if isinstance(value, hc.ServerRecord):
        return json.loads(value.to_json())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _case_ids():
    return sorted(str(p.relative_to(CASES)).removesuffix(".json") for p in CASES.glob("*/*.json"))


@pytest.mark.parametrize("case", _case_ids())
def test_fact(case):
    spec = json.loads((CASES / f"{case}.json").read_text())
    module, name = case.split("/")[0].split(".")
    fact = getattr(importlib.import_module(f"roles.facts.{module}"), name)()
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.get("args", {}).items()}
    assert isinstance(fact.command(**args), str)
    value = fact.process(spec["output"]) if spec["output"] else fact.default()
    if "fact_keys" in spec:
        for key, keys in spec["fact_keys"].items():
            assert sorted(value[key]) == keys
    else:
        assert _plain(value) == spec["fact"]


def _facts():
    for module in FACT_MODULES:
        mod = importlib.import_module(f"roles.facts.{module}")
        for name, cls in sorted(vars(mod).items()):
            if isinstance(cls, type) and issubclass(cls, FactBase) and cls is not FactBase \
                    and cls.__module__ == mod.__name__:
                yield f"{module}.{name}", cls


@pytest.mark.parametrize("name,cls", list(_facts()), ids=[n for n, _ in _facts()])
def test_no_fact_reads_a_containers_command_line(name, cls):
    """Inspecting a container whole (or its Args, Cmd, Path, Entrypoint) prints the secret under -vvv."""
    import inspect

    command = inspect.getsource(cls.command) if "command" in vars(cls) else ""
    for bad in NEVER:
        assert bad not in command, f"{name}.command reads {bad!r}"
    if "docker inspect" in command:
        assert "--format" in command or "-f " in command, f"{name}: docker inspect without --format"


@pytest.mark.parametrize("name,cls", list(_facts()), ids=[n for n, _ in _facts()])
def test_every_fact_has_its_table(name, cls):
    """Every fact of roles/facts/ has case files, but pyinfra's own facts taken over as they are (pyinfra's
    tests/facts/ holds theirs)."""
    if cls.process is getattr(cls.__mro__[1], "process", None) and cls.__mro__[1].__module__.startswith("pyinfra."):
        return
    assert list((CASES / name).glob("*.json")), f"no tests/fake/facts/{name}/*.json"
