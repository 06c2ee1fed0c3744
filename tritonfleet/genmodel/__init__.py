"""`tritonfleet gen-model`: Triton Python-backend model directories for Neuron-compiled models.

A validated, tested replacement for python_backend's `inferentia/scripts/gen_triton_model.py`:
:mod:`.spec` parses and validates, :mod:`.config` builds config.pbtxt as Triton's protobuf,
:mod:`.writer` renders model.py (``templates/genmodel/model.py.j2``) and writes atomically,
:mod:`.cli` is the command.
"""

from tritonfleet.genmodel.config import build_config, parse_text, to_text
from tritonfleet.genmodel.spec import GenModelSpec, Report, SpecError, TensorSpec, TnxOptions
from tritonfleet.genmodel.validation import validate
from tritonfleet.genmodel.writer import Generated, generate, render_model_py, write

__all__ = [
    "GenModelSpec",
    "Generated",
    "Report",
    "SpecError",
    "TensorSpec",
    "TnxOptions",
    "build_config",
    "generate",
    "parse_text",
    "render_model_py",
    "to_text",
    "validate",
    "write",
]
