"""Imports run downwards: the face (``tritonfleet/face/``: the CLI, tables, generated docs) sits on top, and no
module of ``tritonfleet/fleet/``, ``tritonfleet/access/`` or ``tritonfleet/agent/`` imports it. What several
commands share (reading a host's health: :mod:`tritonfleet.access.health`) lives below the face, which only
renders it. Every import counts: module level, inside functions, relative, and ``importlib`` by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACE = "tritonfleet.face"
BELOW_THE_FACE = ("fleet", "access", "agent")
MODULES = sorted(p for layer in BELOW_THE_FACE for p in (ROOT / "tritonfleet" / layer).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, module: str | None = None) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of everything the module imports, wherever the import is; relative imports
    resolved against the module's package (``module``: its dotted name, by default from its path), ``from a
    import b`` giving ``a.b`` too (``b`` may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = module or _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return found


def face_imports(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in imported_names(path)
            if name == FACE or name.startswith(FACE + ".")]


def test_there_are_modules_below_the_face():
    names = {_module_name(p) for p in MODULES}
    assert {"tritonfleet.fleet.rollout", "tritonfleet.access.health", "tritonfleet.access.ssh",
            "tritonfleet.agent.cli"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT / "tritonfleet")))
def test_no_module_below_the_face_imports_it(path):
    assert face_imports(path) == []


@pytest.mark.parametrize("source", [
    "from tritonfleet.face.status import host_status",
    "def f():\n    from tritonfleet.face import status\n",
    "def f():\n    import tritonfleet.face.status\n",
    "from tritonfleet import face",
    "from ..face.status import host_status",
    "from .. import face",
    "import importlib\nimportlib.import_module('tritonfleet.face.status')",
])
def test_the_check_sees_every_spelling_of_the_import(tmp_path, source):
    """The rule's own check: each way of importing the face is found (in a module that would be
    tritonfleet/fleet/probe.py: relative imports resolve from there)."""
    path = tmp_path / "probe.py"
    path.write_text(source)
    names = [name for _, name in imported_names(path, "tritonfleet.fleet.probe")]
    assert any(n == FACE or n.startswith(FACE + ".") for n in names), names


def test_imports_of_other_modules_are_not_taken_for_the_face(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("from tritonfleet.access.health import read_host\nimport tritonfleet.faces\n"
                    "from tritonfleet import fleet\n")
    names = [n for _, n in imported_names(path, "tritonfleet.fleet.probe")]
    assert "tritonfleet.access.health.read_host" in names
    assert [n for n in names if n == FACE or n.startswith(FACE + ".")] == []
