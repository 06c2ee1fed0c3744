"""Render model.py and write a model directory atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tritonfleet import __version__
from tritonfleet.genmodel.config import build_config, to_text
from tritonfleet.genmodel.spec import GenModelSpec, Report, SpecError
from tritonfleet.genmodel.validation import validate
from tritonfleet.templating import render

MODEL_TEMPLATE = "genmodel/model.py.j2"


def neuron_modules(spec: GenModelSpec) -> tuple[str, ...]:
    """Framework module(s) model.py imports first (alternatives, first found wins); none on cpu."""
    if spec.target == "cpu":
        return ()
    if spec.model_type == "transformers-neuronx":
        return ("transformers_neuronx",)
    if spec.model_type == "tensorflow":
        return ("tensorflow.neuron",) if spec.target == "inf1" else ("tensorflow_neuronx",)
    # torch-neuron (inf1) provides torch_neuron, which registers torch.neuron.
    return ("torch_neuron", "torch.neuron") if spec.target == "inf1" else ("torch_neuronx",)


def render_model_py(spec: GenModelSpec) -> str:
    framework = {
        "pytorch": "a TorchScript model",
        "tensorflow": "a TensorFlow SavedModel",
        "transformers-neuronx": "a transformers-neuronx causal LM (sample())",
    }[spec.model_type]
    where = "on CPU, without any Neuron import" if spec.target == "cpu" else f"on {spec.target} NeuronCores"
    return render(
        MODEL_TEMPLATE,
        version=__version__,
        target=spec.target,
        model_type=spec.model_type,
        description=f"{framework} {where}",
        neuron_modules=repr(neuron_modules(spec)),
        core_variable="NEURON_RT_NUM_CORES" if spec.model_type == "tensorflow" else "NEURON_RT_VISIBLE_CORES",
    )


@dataclass
class Generated:
    """What :func:`generate` produced (in memory; :func:`write` puts it on disk)."""

    spec: GenModelSpec
    report: Report
    config_text: str
    model_py: str

    @property
    def config_path(self) -> Path:
        return self.spec.model_dir / "config.pbtxt"

    @property
    def model_py_path(self) -> Path:
        return self.spec.model_dir / str(self.spec.model_version) / "model.py"


def generate(spec: GenModelSpec, *, command: str | None = None, check_files: bool = True) -> Generated:
    """Validate ``spec`` and render both files; raise SpecError (all errors) if it is invalid."""
    report = validate(spec, check_files=check_files)
    if report.errors:
        raise SpecError(report.errors)
    cfg = build_config(spec, report.compiled_model_value)
    return Generated(spec, report, to_text(cfg, command), render_model_py(spec))


def write(gen: Generated) -> list[Path]:
    """Write config.pbtxt and <version>/model.py so that a failure leaves no partial output.

    Both files are first written to a staging directory next to the model directory (same
    filesystem). A new model directory is then renamed into place in one step; into an existing
    one (it may already hold the compiled model) each file is moved with an atomic rename,
    model.py first and config.pbtxt last.
    """
    model_dir = gen.spec.model_dir
    version = str(gen.spec.model_version)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}.gen-", dir=model_dir.parent))
    try:
        (staging / version).mkdir()
        (staging / version / "model.py").write_text(gen.model_py)
        (staging / "config.pbtxt").write_text(gen.config_text)
        for path in (staging, staging / version):
            os.chmod(path, 0o755)
        if not model_dir.exists():
            os.rename(staging, model_dir)
        else:
            version_dir = model_dir / version
            if not version_dir.exists():
                os.rename(staging / version, version_dir)
            else:
                os.replace(staging / version / "model.py", version_dir / "model.py")
            os.replace(staging / "config.pbtxt", model_dir / "config.pbtxt")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return [gen.config_path, gen.model_py_path]
