"""Fixtures for the gen-model tests.

The expensive part (TorchScript models, the Triton server layout, one server with every served
model) is session-scoped and shared by test_triton_cpu.py and test_neuron_standins.py.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # genmodel_harness, served_models

from genmodel_harness import TritonServer, layout_triton, pytriton_dist  # noqa: E402

from tests.unit.test_agent_sync import bucket, endpoint, s3  # noqa: E402, F401 (moto: the live-reload tests' S3)
from tritonfleet.genmodel.cli import gen_model  # noqa: E402

STANDINS = HERE / "standins"


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]

    @property
    def warning_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("warning:")]


def invoke(*args: str) -> CliResult:
    """Run `tritonfleet gen-model ARGS` in-process through the click command."""
    result = CliRunner().invoke(gen_model, [str(a) for a in args], catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def cli():
    return invoke


# ----------------------------------------------------------------------------- TorchScript models


@pytest.fixture(scope="session")
def torchscript_models(tmp_path_factory) -> dict[str, Path]:
    """add_sub.pt: (a+b, a-b) for any dtype; add.pt: a single output a+b."""
    torch = pytest.importorskip("torch")

    class AddSub(torch.nn.Module):
        def forward(self, a, b):
            return a + b, a - b

    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    out = tmp_path_factory.mktemp("torchscript")
    paths = {"add_sub": out / "add_sub.pt", "add": out / "add.pt"}
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; Neuron still compiles to it
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(AddSub()).save(str(paths["add_sub"]))
        torch.jit.script(Add()).save(str(paths["add"]))
    return paths


# ----------------------------------------------------------------------------- the Triton server


@pytest.fixture(scope="session")
def triton_layout(tmp_path_factory):
    if pytriton_dist() is None:
        pytest.skip("nvidia-pytriton==0.7.0 (the Triton 2.51 server binary) is not installed")
    return layout_triton(tmp_path_factory.mktemp("tritonserver"))


@pytest.fixture(scope="session")
def served(tmp_path_factory, triton_layout, torchscript_models):
    """One server loading every model of served_models.MODELS (CPU matrix and Neuron stand-ins)."""
    from served_models import build_repository

    root = tmp_path_factory.mktemp("served")
    repo = root / "repo"
    repo.mkdir()
    models = build_repository(repo, torchscript_models, STANDINS)
    server = TritonServer(triton_layout, repo, root / "tritonserver.log")
    server.start()
    try:
        yield server, models
    finally:
        server.stop()
        # keep the log for a failing run; the repository copies are disposable
        shutil.rmtree(repo, ignore_errors=True)
