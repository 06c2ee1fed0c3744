"""The host-side agent runs on host Pythons 3.9 to 3.12. Its sync side (``tritonfleet/agent/*.py``) imports
boto3 and the standard library only; its QA runner (``tritonfleet/agent/qa/``) may also import its own
runtime dependencies (numpy, tritonclient and grpc, PyYAML, pydantic), and the sync side loads it only
when ``qa`` runs. Neither imports the rest of tritonfleet (nor click, rich or pyinfra), and neither uses
syntax or API newer than Python 3.9 (pydantic evaluates annotations at run time: no ``X | Y`` there)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tritonfleet" / "agent"
SYNC_MODULES = sorted(AGENT.glob("*.py"))
QA_MODULES = sorted((AGENT / "qa").glob("*.py"))
MODULES = SYNC_MODULES + QA_MODULES
SYNC_THIRD_PARTY = {"boto3", "botocore", "s3transfer"}
QA_THIRD_PARTY = {"numpy", "tritonclient", "grpc", "yaml", "pydantic"}
# Python 3.10+ names an agent module could use by habit and 3.9 does not have
NEWER_ATTRIBUTES = {"UTC", "pairwise", "bit_count", "file_digest", "StrEnum", "TaskGroup", "chdir", "batched",
                    "TypeAlias", "ParamSpec", "Concatenate", "TypeGuard", "Self", "Never", "LiteralString"}
NEWER_NAMES = {"aiter", "anext", "ExceptionGroup", "BaseExceptionGroup", "EncodingWarning"}
NEWER_KEYWORDS = {("zip", "strict"), ("dataclass", "slots"), ("dataclass", "kw_only"), ("rmtree", "onexc")}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


def _name(path: Path) -> str:
    return str(path.relative_to(AGENT))


def _imports(tree: ast.AST):
    """(node, absolute-or-relative module name, level) of every import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node, node.module or "", node.level


def test_there_are_agent_modules():
    assert {p.name for p in SYNC_MODULES} >= {"__init__.py", "cli.py", "sync.py", "manifest.py", "verify.py",
                                              "layout.py"}
    assert {p.name for p in QA_MODULES} >= {"__init__.py", "schema.py", "suites.py", "bind.py", "client.py",
                                            "runner.py", "report.py", "selftest.py", "command.py"}


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_parses_as_python_3_9(path):
    _tree(path)  # a SyntaxError for match statements, parenthesized context managers, except* ...
    code = f"import ast; ast.parse(open({str(path)!r}).read(), feature_version=(3, 9))"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


@pytest.mark.parametrize("path", SYNC_MODULES, ids=_name)
def test_sync_modules_import_only_the_standard_library_boto3_and_the_agent(path):
    tree = _tree(path)
    for _node, name, level in _imports(tree):
        if level:
            assert level == 1, f"{path.name}: from {'.' * level}{name} leaves the agent"
            continue
        top = name.split(".")[0]
        if top == "tritonfleet":
            assert name == "tritonfleet.agent" or name.startswith("tritonfleet.agent."), f"{path.name}: {name}"
        elif top == "tritonclient":  # the live extra's gRPC client: live reloads only
            assert path.name == "live.py", f"{path.name} imports {name}"
        else:
            assert top in sys.stdlib_module_names or top in SYNC_THIRD_PARTY or top == "__future__", \
                f"{path.name} imports {name}"
    # the QA runner (and its dependencies) and the live extra's client only inside the functions that use them
    for node in tree.body:
        for _, name, level in _imports(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
            assert not (level == 1 and name.split(".")[0] == "qa"), f"{path.name}:{node.lineno}: module-level qa"
            assert name.split(".")[0] != "tritonclient", f"{path.name}:{node.lineno}: module-level {name}"
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):  # nor in a class body
        for node in cls.body:
            for _, name, _level in _imports(node) if not isinstance(node, ast.FunctionDef) else ():
                assert name.split(".")[0] != "tritonclient", f"{path.name}:{node.lineno}: class-level {name}"


@pytest.mark.parametrize("path", QA_MODULES, ids=_name)
def test_qa_modules_import_only_their_dependencies_and_the_agent(path):
    for _node, name, level in _imports(_tree(path)):
        if level:
            assert level in (1, 2), f"qa/{path.name}: from {'.' * level}{name} leaves the agent"
            continue
        top = name.split(".")[0]
        assert top != "tritonfleet" or name.startswith("tritonfleet.agent"), f"qa/{path.name}: {name}"
        assert top in sys.stdlib_module_names or top in QA_THIRD_PARTY or top in ("__future__", "tritonfleet"), \
            f"qa/{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
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


def _has_union_operator(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(node))


@pytest.mark.parametrize("path", QA_MODULES, ids=_name)
def test_pydantic_models_and_type_aliases_have_no_union_operator(path):
    """pydantic evaluates field annotations (and module-level aliases are evaluated anyway): ``X | None``
    raises a TypeError on Python 3.9 there, even under ``from __future__ import annotations``."""
    tree = _tree(path)
    models = {"BaseModel"}
    for node in tree.body:  # classes deriving (within the module) from pydantic's BaseModel
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) in models for b in node.bases):
            models.add(node.name)
            for item in node.body:
                if isinstance(item, ast.AnnAssign):
                    assert not _has_union_operator(item.annotation), f"qa/{path.name}:{item.lineno}: X | Y"
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            assert not _has_union_operator(node.value), f"qa/{path.name}:{node.lineno}: X | Y in a type alias"


def _loaded(code: str) -> set[str]:
    return set(subprocess.run([sys.executable, "-c", code + "\nprint('\\n'.join(sorted(sys.modules)))"], cwd=ROOT,
                              check=True, capture_output=True, text=True, timeout=60).stdout.split())


def test_importing_the_agent_loads_nothing_else():
    """In a fresh interpreter: the agent and everything a sync imports (and a parsed qa command), then what
    is loaded."""
    loaded = _loaded("import sys, tritonfleet.agent.cli, tritonfleet.agent.sync, tritonfleet.agent.layout, "
                     "s3transfer.manager, boto3.session\n"
                     "tritonfleet.agent.cli.build_parser().parse_args(['qa', 'check', '--suites', 'qa'])")
    ours = {m for m in loaded if m.split(".")[0] == "tritonfleet"}
    assert ours - {"tritonfleet"} == {m for m in ours if m.startswith("tritonfleet.agent")}, sorted(ours)
    assert not {m for m in ours if m.startswith("tritonfleet.agent.qa")}, sorted(ours)
    for banned in ("pydantic", "click", "rich", "pyinfra", "jinja2", "paramiko", "docker", "tritonclient", "yaml",
                   "numpy", "grpc"):
        assert banned not in loaded, banned


def test_the_qa_runner_loads_its_dependencies_only():
    """Everything ``qa run`` imports over gRPC: no boto3, none of the controller's packages, no HTTP client."""
    loaded = _loaded("import sys, tritonfleet.agent.qa.command, tritonfleet.agent.qa.drive, tritonclient.grpc, grpc")
    ours = {m for m in loaded if m.split(".")[0] == "tritonfleet"}
    assert ours - {"tritonfleet"} == {m for m in ours if m.startswith("tritonfleet.agent")}, sorted(ours)
    for banned in ("boto3", "click", "rich", "pyinfra", "jinja2", "paramiko", "docker", "tritonclient.http", "gevent",
                   "geventhttpclient"):
        assert banned not in loaded, banned
