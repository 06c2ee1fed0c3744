"""The host-side agent runs on host Pythons 3.9 to 3.12 with boto3 and the standard library only: it
imports nothing else (not the rest of tritonfleet, pydantic, click, rich or pyinfra) and uses no syntax or
API newer than Python 3.9."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tritonfleet" / "agent"
MODULES = sorted(AGENT.glob("*.py"))
THIRD_PARTY = {"boto3", "botocore", "s3transfer"}
# Python 3.10+ names an agent module could use by habit and 3.9 does not have
NEWER_ATTRIBUTES = {"UTC", "pairwise", "bit_count", "file_digest", "StrEnum", "TaskGroup", "chdir", "batched",
                    "TypeAlias", "ParamSpec", "Concatenate", "TypeGuard", "Self", "Never", "LiteralString"}
NEWER_NAMES = {"aiter", "anext", "ExceptionGroup", "BaseExceptionGroup", "EncodingWarning"}
NEWER_KEYWORDS = {("zip", "strict"), ("dataclass", "slots"), ("dataclass", "kw_only"), ("rmtree", "onexc")}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


def test_there_are_agent_modules():
    assert {p.name for p in MODULES} >= {"__init__.py", "cli.py", "sync.py", "manifest.py", "verify.py", "layout.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_parses_as_python_3_9(path):
    _tree(path)  # a SyntaxError for match statements, parenthesized context managers, except* ...
    code = f"import ast; ast.parse(open({str(path)!r}).read(), feature_version=(3, 9))"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_imports_only_the_standard_library_boto3_and_the_agent(path):
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1, f"{path.name}: from {'.' * node.level}{node.module} leaves the agent"
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            top = name.split(".")[0]
            if top == "tritonfleet":
                assert name == "tritonfleet.agent" or name.startswith("tritonfleet.agent."), f"{path.name}: {name}"
            else:
                assert top in sys.stdlib_module_names or top in THIRD_PARTY or top == "__future__", \
                    f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_python_3_10_api(path):
    tree = _tree(path)
    annotated = any(isinstance(n, (ast.AnnAssign, ast.arg)) and n.annotation is not None or
                    isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns is not None
                    for n in ast.walk(tree))
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                 any(a.name == "annotations" for a in n.names) for n in tree.body)
    assert future or not annotated, f"{path.name}: annotations (X | None) need `from __future__ import annotations`"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            assert node.attr not in NEWER_ATTRIBUTES, f"{path.name}:{node.lineno}: .{node.attr}"
        elif isinstance(node, ast.Name):
            assert node.id not in NEWER_NAMES, f"{path.name}:{node.lineno}: {node.id}"
        elif isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for kw in node.keywords:
                assert (func, kw.arg) not in NEWER_KEYWORDS, f"{path.name}:{node.lineno}: {func}({kw.arg}=)"
            if func in ("isinstance", "issubclass") and len(node.args) == 2:
                assert not isinstance(node.args[1], ast.BinOp), f"{path.name}:{node.lineno}: X | Y at run time"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            assert not {"tomllib", "zoneinfo._tzpath"} & set(names), f"{path.name}:{node.lineno}"


def test_importing_the_agent_loads_nothing_else():
    """In a fresh interpreter: the agent and everything a sync imports, then what is loaded."""
    code = ("import sys, tritonfleet.agent.cli, tritonfleet.agent.sync, tritonfleet.agent.layout, "
            "s3transfer.manager, boto3.session\n"
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True,
                                timeout=60).stdout.split())
    ours = {m for m in loaded if m.split(".")[0] == "tritonfleet"}
    assert ours - {"tritonfleet"} == {m for m in ours if m.startswith("tritonfleet.agent")}, sorted(ours)
    for banned in ("pydantic", "click", "rich", "pyinfra", "jinja2", "paramiko", "docker", "tritonclient", "yaml"):
        assert banned not in loaded, banned
