"""Table-driven tests of the custom operations, as in pyinfra's own tree (``tests/operations/<op>/*.json``):
arguments plus facts in, commands out.

A case file ``tests/fake/operations/<module>.<operation>/<case>.json`` holds:

- ``args`` / ``kwargs``: the operation's arguments;
- ``facts``: ``{FactClass: value}`` or, for facts with arguments, ``{FactClass: {"k=v, ...": value}}``.
  A value ``{"output": [lines]}`` is raw command output, parsed by the fact's own ``process()``;
- ``executing`` (default true): whether pyinfra is in its execute phase;
- ``commands``: what the operation yields. A string is a shell command (as pyinfra shows it, secrets
  masked); a list ``[script, arg, ...]`` is a script from ``templates/scripts`` with its arguments, where
  ``{"json": ...}`` compares an argument as JSON;
- ``stdin``: per command, what it gets on standard input (secrets travel there, not as arguments);
- ``noop``: the no-op message, when the operation yields nothing.
"""

from __future__ import annotations

import importlib
import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import FileUploadCommand, StringCommand
from pyinfra.context import ctx_host, ctx_state

from roles.operations.docker import ExplainedCommand

CASES = Path(__file__).parent / "operations"
ROOT = Path(__file__).resolve().parents[2]
FACT_MODULES = ("roles.facts.system", "roles.facts.packages", "roles.facts.docker", "roles.facts.accelerators",
                "roles.facts.files", "roles.facts.models")


def _fact_class(name: str):
    for module in FACT_MODULES:
        cls = getattr(importlib.import_module(module), name, None)
        if cls is not None:
            return cls
    raise KeyError(name)


class FakeHost:
    """The parts of pyinfra's Host an operation uses: facts (from the case), noop, state."""

    name = "h1"

    def __init__(self, facts: dict, executing: bool) -> None:
        self.facts = facts
        self.noops: list[str] = []
        self.state = SimpleNamespace(is_executing=executing)
        self.data = SimpleNamespace()

    def get_fact(self, cls, **kwargs):
        if cls.__name__ not in self.facts:
            raise AssertionError(f"the case gives no fact {cls.__name__} (asked with {kwargs})")
        value = self.facts[cls.__name__]
        if kwargs:
            key = ", ".join(f"{k}={v}" for k, v in sorted(kwargs.items()))
            if key not in value:
                raise AssertionError(f"the case gives no {cls.__name__} for {key!r} (has {list(value)})")
            value = value[key]
        if isinstance(value, dict) and set(value) == {"output"}:
            lines = value["output"]
            if lines == ["LOCAL"]:  # the digests of the local tree the operation reads (sync_tree)
                from roles.operations.files import _local_tree

                return _local_tree(self.local_src, ("__pycache__",), (".pyc",))
            return cls().process(lines) if lines else cls.default()
        return value

    def noop(self, description: str) -> None:
        self.noops.append(description)


def _shown(command) -> str | list:
    if isinstance(command, ExplainedCommand):  # the command it runs (its failure explained on the controller)
        command = command.command
    if isinstance(command, FileUploadCommand):
        return f"upload {command.dest}"
    if isinstance(command, StringCommand) and list(command.bits[:2]) == ["sh", "-c"]:
        args = StringCommand(*command.bits[4:]).get_masked_value()
        return [command.bits[3], *shlex.split(args)]
    return str(command)


def _same(got, want) -> bool:
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            json.loads(g) == w["json"] if isinstance(w, dict) else g == w for g, w in zip(got, want, strict=True))
    return got == want


def _cases():
    for op_dir in sorted(CASES.iterdir()):
        for case in sorted(op_dir.glob("*.json")):
            yield pytest.param(op_dir.name, case, id=f"{op_dir.name}/{case.stem}")


@pytest.mark.parametrize("op_name,case", list(_cases()))
def test_operation(op_name: str, case: Path) -> None:
    spec = json.loads(case.read_text())
    module, _, func = op_name.rpartition(".")
    op = getattr(importlib.import_module(f"roles.operations.{module}"), func)
    facts = {name: value for name, value in spec.get("facts", {}).items() if _fact_class(name)}
    fake = FakeHost(facts, spec.get("executing", True))
    fake.local_src = str(ROOT / spec.get("kwargs", {}).get("src", "."))
    kwargs = dict(spec.get("kwargs", {}))
    if "src" in kwargs:  # local paths in cases are relative to the repository
        kwargs["src"] = str(ROOT / kwargs["src"])
    with ctx_state.use(fake.state), ctx_host.use(fake):
        yielded = list(op._inner(*spec.get("args", []), **kwargs))
    commands = [_shown(c) for c in yielded]
    if "stdin" in spec:
        assert [getattr(c, "connector_arguments", {}).get("_stdin") for c in yielded] == spec["stdin"]
    want = spec.get("commands", [])
    assert len(commands) == len(want) and all(_same(g, w) for g, w in zip(commands, want, strict=True)), \
        json.dumps(commands, indent=1)
    if "noop" in spec:
        assert fake.noops == [spec["noop"].replace("SRC", kwargs.get("src", ""))]
    else:
        assert not fake.noops or commands, fake.noops


def test_every_operation_has_cases() -> None:
    """Each custom operation has at least one table case (a new operation needs its fixtures)."""
    from pyinfra.api.operation import OperationMeta  # noqa: F401 - pyinfra loaded

    ops = set()
    for path in (Path(__file__).resolve().parents[2] / "roles" / "operations").glob("*.py"):
        module = importlib.import_module(f"roles.operations.{path.stem}")
        ops |= {f"{path.stem}.{name}" for name, obj in vars(module).items()
                if hasattr(obj, "_inner") and getattr(obj, "__module__", "") == module.__name__}
    covered = {d.name for d in CASES.iterdir() if any(d.glob("*.json"))}
    assert ops and ops <= covered, f"operations without cases: {sorted(ops - covered)}"


def test_writable_dirs_names_a_path_it_cannot_write(tmp_path) -> None:
    """The failure command, run for real: a directory that cannot be created, and one that can."""
    import subprocess

    from roles.operations.files import writable_dirs

    good, bad = tmp_path / "ok", "/proc/tritonfleet-test"
    fake = FakeHost({}, True)
    fake.get_fact = lambda cls, **kw: False  # the probe says: not writable
    with ctx_state.use(fake.state), ctx_host.use(fake):
        (command,) = list(writable_dirs._inner(paths=[str(good), bad]))
    proc = subprocess.run(["sh", "-c", command.get_raw_value()], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and good.is_dir()
    assert f"ERROR: {bad} is not writable or is full on this host" in proc.stderr and "\n" == proc.stderr[-1]
    assert proc.stderr.count("\n") == 1  # one line
