"""The models one shared Triton server loads, each generated with `tritonfleet gen-model`.

CPU target (TorchScript on CPU, no Neuron import): {1, 3 instances} x {batched (max_batch_size 8,
dynamic batching), unbatched (-1x4)} x {batch-to-model, per-request}, INT64 and FP32 alternating
so that each dtype meets every instance/batching pair; plus a single-output model served as
version 2. Neuron targets: inf1 and inf2 PyTorch, transformers-neuronx and TensorFlow (inf2),
each with its stand-in framework modules copied into the model directory (the python-backend
stub puts the model directory on sys.path; it ignores PYTHONPATH).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tritonfleet.genmodel.cli import run


@dataclass(frozen=True)
class ServedModel:
    name: str
    target: str
    model_type: str = "pytorch"
    dtype: str = "INT64"
    out_dtype: str | None = None  # default: dtype
    batched: bool = True  # max_batch_size 8 + dynamic batching, dims [4]; else dims [-1, 4]
    instances: int = 1
    core_range: str = "0:0"
    batch_to_model: bool = True
    kind: str = "add_sub"  # add_sub | add | tnx
    version: int = 1
    standins: tuple[str, ...] = ()
    extra: tuple[str, ...] = field(default=())

    @property
    def output_dtype(self) -> str:
        return self.out_dtype or self.dtype

    @property
    def input_names(self) -> tuple[str, ...]:
        if self.model_type == "tensorflow":
            return ("INPUT0", "INPUT1")
        if self.kind == "tnx":
            return ("input_ids",)
        return ("INPUT__0", "INPUT__1")

    @property
    def output_names(self) -> tuple[str, ...]:
        if self.model_type == "tensorflow":
            return ("OUTPUT0", "OUTPUT1")
        if self.kind == "tnx":
            return ("output_ids",)
        if self.kind == "add":
            return ("OUTPUT__0",)
        return ("OUTPUT__0", "OUTPUT__1")


_CPU = [
    # name, instances, batched, batch_to_model, dtype
    ("cpu_i64_b1_batch", 1, True, True, "INT64"),
    ("cpu_f32_b1_req", 1, True, False, "FP32"),
    ("cpu_f32_u1_batch", 1, False, True, "FP32"),
    ("cpu_i64_u1_req", 1, False, False, "INT64"),
    ("cpu_f32_b3_batch", 3, True, True, "FP32"),
    ("cpu_i64_b3_req", 3, True, False, "INT64"),
    ("cpu_i64_u3_batch", 3, False, True, "INT64"),
    ("cpu_f32_u3_req", 3, False, False, "FP32"),
]

CPU_MATRIX = [
    ServedModel(
        name=name,
        target="cpu",
        dtype=dtype,
        batched=batched,
        instances=instances,
        core_range="0:7" if instances == 3 else "0:0",
        batch_to_model=to_model,
    )
    for name, instances, batched, to_model, dtype in _CPU
]
SINGLE_OUTPUT = ServedModel(
    name="cpu_add_v2", target="cpu", kind="add", dtype="FP32", out_dtype="FP64", version=2
)
INF1 = ServedModel(
    name="inf1_i64_b3",
    target="inf1",
    dtype="INT64",
    instances=3,
    core_range="0:7",
    standins=("torch_neuron.py",),
)
INF2 = ServedModel(
    name="inf2_f32_u2",
    target="inf2",
    dtype="FP32",
    batched=False,
    instances=2,
    core_range="0:3",
    standins=("torch_neuronx.py",),
)
TNX = ServedModel(
    name="inf2_tnx",
    target="inf2",
    model_type="transformers-neuronx",
    kind="tnx",
    batched=False,
    core_range="0:1",
    standins=("transformers_neuronx",),
    extra=("--n_positions", "16", "--amp", "f16", "--batch_size", "2"),
)
TF = ServedModel(
    name="inf2_tf_b2",
    target="inf2",
    model_type="tensorflow",
    dtype="INT64",
    instances=2,
    core_range="0:3",
    standins=("tensorflow_neuronx.py", "tensorflow"),
    extra=("--threads_per_core", "2"),
)
MODELS = [*CPU_MATRIX, SINGLE_OUTPUT, INF1, INF2, TNX, TF]
TNX_N_POSITIONS = 16
TNX_BATCH_SIZE = 2


def gen_args(m: ServedModel, model_dir: Path, compiled: str) -> list[str]:
    dims = "4" if m.batched else "-1x4"
    args = ["--model_type", m.model_type, "--triton_model_dir", str(model_dir), "--compiled_model", compiled]
    args += ["--neuron_core_range", m.core_range, "--triton_model_instance_count", str(m.instances)]
    args += ["--model_version", str(m.version)]
    if m.target == "inf2":
        args.append("--inf2")  # upstream spelling
    else:
        args += ["--target", m.target]
    if m.kind == "tnx":
        args += ["--triton_input", "input_ids,INT64,-1x-1", "--triton_output", "output_ids,INT64,-1x-1"]
    else:
        args.append("--triton_input")
        args += [f"{n},{m.dtype},{dims}" for n in m.input_names]
        args.append("--triton_output")
        args += [f"{n},{m.output_dtype},{dims}" for n in m.output_names]
    if m.batched:
        args += ["--max_batch_size", "8", "--enable_dynamic_batching", "--preferred_batch_size", "4", "8"]
        args += ["--max_queue_delay_microseconds", "5000"]
    if not m.batch_to_model:
        args.append("--disable_batch_requests_to_neuron")
    return args + list(m.extra)


def build_repository(repo: Path, torchscript: dict[str, Path], standins: Path) -> dict[str, ServedModel]:
    shared = repo.parent / "compiled"  # outside the repository: stored as an absolute path
    shared.mkdir(exist_ok=True)
    for m in MODELS:
        model_dir = repo / m.name
        model_dir.mkdir()
        if m.kind == "tnx":
            (model_dir / "opt-split").mkdir()
            (model_dir / "opt-split" / "config.json").write_text("{}")
            compiled = "opt-split"
        elif m.model_type == "tensorflow":
            saved = model_dir / "saved_model"
            saved.mkdir()
            (saved / "standin_model.json").write_text(
                '{"inputs": ["INPUT0", "INPUT1"], "outputs": {"OUTPUT0": "add", "OUTPUT1": "sub"}}'
            )
            compiled = "saved_model"
        elif m.name == "cpu_f32_b1_req":
            target = shared / "add_sub.pt"
            if not target.exists():
                shutil.copy2(torchscript["add_sub"], target)
            compiled = str(target)
        else:
            shutil.copy2(torchscript[m.kind], model_dir / "model.pt")
            # absolute inside the model directory for inf1 (upstream's inf1 habit): stored relative
            compiled = str(model_dir / "model.pt") if m.target == "inf1" else "model.pt"
        for name in m.standins:
            src = standins / name
            if src.is_dir():
                shutil.copytree(src, model_dir / name)
            else:
                shutil.copy2(src, model_dir / name)
        if m.standins:
            shutil.copy2(standins / "standin_common.py", model_dir / "standin_common.py")
        code = run(gen_args(m, model_dir, compiled))
        if code != 0:
            raise RuntimeError(f"gen-model failed for {m.name} (exit {code})")
    return {m.name: m for m in MODELS}
