"""Declared dependencies are what the code imports, and what the code imports is declared (issue "Security",
"Dependencies"): every third-party module imported by tritonfleet/, roles/, deploys/ and inventories/ comes
from a distribution pyproject.toml declares (or is an optional import named below, with why), and every
declared distribution is imported somewhere. The agent's own imports come from its wheel's requirements."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import tomllib

from tritonfleet import wheelhouse

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"tritonfleet", "roles", "deploys", "inventories", "tests", "__future__"}
#: imported only when present, each for a reason
OPTIONAL = {
    "setuptools": "the wheelhouse asks whether pip can build without isolation",
    "torch": "gen-model's TorchScript input (the test extra has it)",
    "torch_neuron": "gen-model's self-test on an inf1 host", "torch_neuronx": "the same on inf2/trn",
    "tensorflow": "gen-model's SavedModel signatures, when installed",
}
#: declared but imported under another name, or used without an import
UNIMPORTED = {"tritonclient": "imported as tritonclient.* (the mapping below sees it)"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=~!;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imports(paths) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LOCAL:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _distributions(top: str) -> set[str]:
    return {d.lower().replace("_", "-") for d in md.packages_distributions().get(top, [])}


def _controller_files():
    for sub in ("tritonfleet", "roles", "deploys", "inventories"):
        yield from (p for p in (ROOT / sub).rglob("*.py") if "/sandbox/" not in str(p))


def test_every_imported_module_is_declared_and_every_declared_one_imported():
    declared = {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    imports = _imports(_controller_files())
    undeclared = {top: sorted(files)[:2] for top, files in imports.items()
                  if top not in OPTIONAL and not (_distributions(top) & declared)}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    imported = set().union(*(_distributions(top) for top in imports))
    assert not (declared - imported - set(UNIMPORTED)), f"declared but never imported: {declared - imported}"


def test_the_agent_imports_only_its_wheels_requirements():
    agent = [p for p in (ROOT / "tritonfleet" / "agent").rglob("*.py")]
    allowed = {_name(r) for r in wheelhouse.REQUIREMENTS + wheelhouse.QA_REQUIREMENTS
               + wheelhouse.LIVE_REQUIREMENTS + wheelhouse.QA_HTTP_REQUIREMENTS}
    allowed |= {"protobuf", "grpcio", "numpy"}  # what tritonclient[grpc] brings, which the QA runner uses as such
    missing = {top: sorted(files)[:2] for top, files in _imports(agent).items() if not (_distributions(top) & allowed)}
    assert not missing, f"the agent imports what its wheel does not require: {missing}"


def test_the_controller_resolves_the_tritonclient_minor_the_hosts_get():
    """The controller's tritonclient (status, the QA runner on the controller) is the minor the hosts' agent
    wheelhouse pins and the sandbox's Triton serves: pyproject pins it, and what is installed is that minor."""
    def minors(requirements):
        return {m.group(1) for r in requirements if _name(r) == "tritonclient"
                for m in [re.search(r"==\s*(\d+\.\d+)\.\*", r)] if m}
    hosts = minors(wheelhouse.QA_REQUIREMENTS + wheelhouse.LIVE_REQUIREMENTS + wheelhouse.QA_HTTP_REQUIREMENTS)
    assert len(hosts) == 1, f"the hosts' wheelhouse pins tritonclient to one minor, not {hosts}"
    controller = minors(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    assert controller == hosts, f"pyproject pins tritonclient to {controller or 'no minor'}, the hosts get {hosts}"
    installed = md.version("tritonclient")
    assert installed.rsplit(".", 1)[0] in hosts, f"installed tritonclient {installed}, the hosts get {hosts}"
