"""The custom operations (``roles/operations/``) are named and documented as pyinfra's own are.

- a name that does not repeat its module (``docker.image``, not ``docker.docker_image``; ``packages.install``,
  not ``packages.packages``);
- a docstring that lists every argument (``+ arg: meaning``) and ends in an ``**Example:**`` (or
  ``**Examples:**``) block, ``.. code:: python``, whose calls are operations of that same module, with
  arguments the operation takes.

Operations are found by import (pyinfra's ``@operation`` leaves ``_inner``, the generator, marked with
``is_idempotent``) and, as a cross-check, by reading each module for ``@operation`` decorators.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest
from pyinfra.api import operation

OPERATIONS = Path(__file__).resolve().parents[2] / "roles" / "operations"
EXAMPLE = re.compile(r"^\*\*Examples?:\*\*\n\n\.\. code:: python\n\n(?P<code>(?:(?: {4}.*)?\n)+)", re.M)
ARGUMENT = re.compile(r"^\+ (\w+):", re.M)


def is_operation(obj) -> bool:
    """An operation made by pyinfra's ``@operation`` decorator."""
    inner = getattr(obj, "_inner", None)
    return callable(obj) and inspect.isgeneratorfunction(inner) and hasattr(inner, "is_idempotent")


def subjects() -> dict[str, dict[str, object]]:
    """``{module: {operation name: operation}}`` for every module of roles/operations/."""
    out = {}
    for path in sorted(OPERATIONS.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        module = importlib.import_module(f"roles.operations.{path.stem}")
        out[path.stem] = {name: obj for name, obj in vars(module).items()
                          if is_operation(obj) and obj.__module__ == module.__name__}
    return out


def decorated(path: Path) -> set[str]:
    """Names of the functions in ``path`` whose source carries an ``@operation(...)`` decorator."""
    def is_op(d: ast.expr) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        return (isinstance(d, ast.Name) and d.id == "operation") or (isinstance(d, ast.Attribute)
                                                                    and d.attr == "operation")
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)
            and any(is_op(d) for d in n.decorator_list)}


def stutters(module: str, name: str) -> bool:
    """Whether ``name`` repeats its module: the module's name (or its singular) as a whole word of it."""
    forms = {module, module[:-1] if module.endswith("s") else module}
    return any(word in forms for word in name.split("_"))


def problems(module: str, name: str, op, module_ops: dict[str, object]) -> list[str]:
    """What is wrong with operation ``module.name`` (``module_ops``: the module's operations by name)."""
    found = []
    if stutters(module, name):
        found.append(f"{module}.{name}: the name repeats its module ({module}.{name} -> {module}.<what it does>)")
    doc = inspect.cleandoc(op.__doc__ or "")
    params = [p for p in inspect.signature(op._inner).parameters]
    listed = ARGUMENT.findall(doc)
    if sorted(listed) != sorted(params):
        found.append(f"{module}.{name}: the docstring lists arguments {listed}, the operation takes {params} "
                     "(one '+ arg: meaning' line each)")
    match = EXAMPLE.search(doc + "\n")
    if match is None:
        found.append(f"{module}.{name}: no '**Example:**' block with '.. code:: python' in its docstring")
        return found
    try:
        tree = ast.parse(textwrap.dedent(match["code"]))
    except SyntaxError as exc:
        found.append(f"{module}.{name}: the example is not Python ({exc})")
        return found
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    called = set()
    for call in calls:
        f = call.func
        shown = ast.unparse(f)
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == module
                and f.attr in module_ops):
            found.append(f"{module}.{name}: the example calls {shown}, not an operation of roles/operations/"
                         f"{module}.py ({', '.join(sorted(module_ops))})")
            continue
        called.add(f.attr)
        # pyinfra's global arguments (name=, _if=, _sudo=...) aside, the call binds to the operation
        kwargs = {k.arg: None for k in call.keywords if k.arg and k.arg != "name" and not k.arg.startswith("_")}
        try:
            inspect.signature(module_ops[f.attr]._inner).bind(*[None] * len(call.args), **kwargs)
        except TypeError as exc:
            found.append(f"{module}.{name}: the example's {shown}(...) does not fit the operation: {exc}")
        if not any(k.arg == "name" for k in call.keywords):
            found.append(f"{module}.{name}: the example's {shown}(...) has no name= (as the roles' calls do)")
    if name not in called:
        found.append(f"{module}.{name}: the example never calls {module}.{name}")
    return found


SUBJECTS = subjects()


def test_every_operation_is_found():
    """Import and source agree on what the operations are (a module with no operation is a helper)."""
    for module, ops in SUBJECTS.items():
        assert set(ops) == decorated(OPERATIONS / f"{module}.py"), module
    assert sum(len(ops) for ops in SUBJECTS.values()) >= 20
    assert {m for m, ops in SUBJECTS.items() if not ops} == {"common"}


@pytest.mark.parametrize("module,name", [(m, n) for m, ops in SUBJECTS.items() for n in ops],
                         ids=lambda v: v)
def test_operation_is_named_and_documented_as_pyinfra_s(module, name):
    found = problems(module, name, SUBJECTS[module][name], SUBJECTS[module])
    assert not found, "\n".join(found)


# -- the checks themselves fail where they should --------------------------------------------------------------

@operation()
def docker_image(image: str, source: str):
    """
    A stuttering name, an argument not listed, an example calling another module.

    + image: image reference

    **Example:**

    .. code:: python

        docker.docker_image(name="Triton image", image="nvcr.io/nvidia/tritonserver:24.10-py3", source="pull")
        files.managed(name="x", files={})
    """
    yield "true"


@operation()
def image(image: str):
    """
    A good name, and an example that calls it with an argument it does not take, and without a name.

    + image: image reference

    **Example:**

    .. code:: python

        docker.image(image="nvcr.io/nvidia/tritonserver:24.10-py3", source="pull")
    """
    yield "true"


@operation()
def pull(image: str):
    """
    No example at all.

    + image: image reference
    """
    yield "true"


def test_the_checks_catch_a_stutter_a_missing_argument_and_a_wrong_example():
    module_ops = {"docker_image": docker_image, "image": image, "pull": pull}
    found = "\n".join(problems("docker", "docker_image", docker_image, module_ops))
    assert "docker.docker_image: the name repeats its module" in found
    assert "lists arguments ['image'], the operation takes ['image', 'source']" in found
    assert "the example calls files.managed, not an operation of roles/operations/docker.py" in found
    found = "\n".join(problems("docker", "image", image, module_ops))
    assert "repeats" not in found
    assert "docker.image(...) does not fit the operation: got an unexpected keyword argument 'source'" in found
    assert "docker.image(...) has no name=" in found
    assert problems("docker", "pull", pull, module_ops) == [
        "docker.pull: no '**Example:**' block with '.. code:: python' in its docstring"]
    assert stutters("packages", "packages") and stutters("models", "model_sync") and stutters("files", "managed_files")
    assert not stutters("keys", "keyring") and not stutters("triton", "models") and not stutters("qa", "run")
