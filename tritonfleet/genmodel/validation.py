"""Validation of a gen-model spec (``validate``): every problem one line in ``Report.errors``, nothing written.
Split from spec.py, which holds the spec's types and the parsing of its options."""

from __future__ import annotations

import os
from pathlib import Path

from tritonfleet.genmodel.spec import (
    _PYTORCH_NAME,
    DEFAULT_TNX_MODEL_CLASS,
    FAMILY_MAX_CORES,
    INTEGER_DTYPES,
    NEURON_V2_TARGETS,
    TNX_AMP,
    GenModelSpec,
    Report,
    SpecError,
    TensorSpec,
    TnxOptions,
    instance_cores,
)


def validate(spec: GenModelSpec, *, check_files: bool = True) -> Report:
    """Check ``spec``; every problem is one line in ``Report.errors`` (nothing is written here)."""
    rep = Report()
    err = rep.errors.append

    # Where the model goes.
    if not spec.model_name:
        err(f"--triton_model_dir {str(spec.triton_model_dir)!r}: cannot derive a model name from it")
    if check_files and spec.model_dir.exists() and not spec.model_dir.is_dir():
        err(f"--triton_model_dir {str(spec.triton_model_dir)!r} exists and is not a directory")
    if spec.model_version < 1:
        err(f"--model_version {spec.model_version}: Triton versions are integers >= 1")

    # Framework / target combinations.
    if spec.model_type == "transformers-neuronx" and spec.target not in NEURON_V2_TARGETS:
        err(f"--model_type transformers-neuronx runs on inf2, trn1 or trn2, not on --target {spec.target}")
    if spec.model_type != "transformers-neuronx" and spec.tnx is not None:
        err(
            "--tp_degree/--n_positions/--amp/--batch_size/--tnx_model_class need --model_type transformers-neuronx"
        )

    _validate_cores(spec, rep)
    _validate_batching(spec, rep)
    _validate_tensors(spec, rep)
    if spec.model_type == "transformers-neuronx":
        _validate_tnx(spec, rep)
    _resolve_compiled_model(spec, rep, check_files=check_files)
    return rep


def _validate_cores(spec: GenModelSpec, rep: Report) -> None:
    err, warn = rep.errors.append, rep.warnings.append
    start, end = spec.core_start, spec.core_end
    rng = f"--neuron_core_range {start}:{end}"
    range_ok = True
    if start < 0 or end < 0:
        err(f"{rng}: core indices cannot be negative")
        range_ok = False
    elif start > end:
        err(f"{rng}: START must be <= END (the range is inclusive)")
        range_ok = False

    limit: int | None = None
    limit_src = ""
    if spec.instance_type:
        try:
            cores, arch = instance_cores(spec.instance_type)
        except SpecError as exc:
            rep.errors.extend(exc.errors)
        else:
            if arch is None:
                if spec.target != "cpu":
                    err(
                        f"--instance-type {spec.instance_type} has no NeuronCores; use a Neuron instance or --target cpu"
                    )
            else:
                if spec.target != "cpu" and arch != spec.target:
                    err(
                        f"--instance-type {spec.instance_type} belongs to the {arch} family but --target is {spec.target}"
                    )
                limit, limit_src = cores, f"{spec.instance_type} has {cores} NeuronCores (0-{cores - 1})"
    elif spec.target in FAMILY_MAX_CORES:
        limit = FAMILY_MAX_CORES[spec.target]
        limit_src = f"no {spec.target} instance has more than {limit} NeuronCores"
    rep.core_limit = limit
    if range_ok and limit is not None and end >= limit:
        err(f"{rng} does not fit: {limit_src}")

    if spec.threads_per_core < 1:
        err(f"--threads_per_core {spec.threads_per_core}: must be >= 1")
    if spec.instance_count < 1:
        err(f"--triton_model_instance_count {spec.instance_count}: must be >= 1")
        return
    if not range_ok:
        return
    total = end - start + 1
    if spec.instance_count > total:
        err(
            f"--triton_model_instance_count {spec.instance_count} exceeds the {total} core(s) of "
            f"{rng}; each instance needs at least one core"
        )
        return
    left = total % spec.instance_count
    if left:
        per = total // spec.instance_count
        first_idle = start + per * spec.instance_count
        warn(
            f"{total} cores over {spec.instance_count} instances gives {per} each; "
            f"cores {first_idle}-{end} stay idle (use {per * spec.instance_count} cores or "
            f"{_divisors_hint(total)} instances)"
        )


def _divisors_hint(total: int) -> str:
    divs = [d for d in range(1, total + 1) if total % d == 0]
    return "/".join(str(d) for d in divs)


def _validate_batching(spec: GenModelSpec, rep: Report) -> None:
    err = rep.errors.append
    mbs = spec.max_batch_size
    if mbs < 0:
        err(f"--max_batch_size {mbs}: must be >= 0 (0 disables batching)")
    if spec.dynamic_batching and mbs <= 0:
        err(
            "--enable_dynamic_batching needs --max_batch_size > 0 (Triton rejects dynamic batching without it)"
        )
    if spec.preferred_batch_sizes and not spec.dynamic_batching:
        err("--preferred_batch_size needs --enable_dynamic_batching")
    if spec.max_queue_delay_microseconds is not None and not spec.dynamic_batching:
        err("--max_queue_delay_microseconds needs --enable_dynamic_batching")
    if spec.max_queue_delay_microseconds is not None and spec.max_queue_delay_microseconds < 0:
        err(f"--max_queue_delay_microseconds {spec.max_queue_delay_microseconds}: must be >= 0")
    for size in spec.preferred_batch_sizes:
        if size < 1:
            err(f"--preferred_batch_size {size}: must be >= 1")
        elif mbs > 0 and size > mbs:
            err(f"--preferred_batch_size {size} exceeds --max_batch_size {mbs}")
    if len(set(spec.preferred_batch_sizes)) != len(spec.preferred_batch_sizes):
        err(f"--preferred_batch_size {list(spec.preferred_batch_sizes)}: values repeat")


def _validate_tensors(spec: GenModelSpec, rep: Report) -> None:
    err, warn = rep.errors.append, rep.warnings.append
    ins, outs = spec.inputs, spec.outputs
    if spec.model_type == "tensorflow":
        if bool(ins) != bool(outs):
            err(
                "--model_type tensorflow: give both --triton_input and --triton_output, or neither (read from the SavedModel)"
            )
    else:
        if not ins:
            err(f"--model_type {spec.model_type} needs at least one --triton_input")
        if not outs:
            err(f"--model_type {spec.model_type} needs at least one --triton_output")

    for option, tensors in (("--triton_input", ins), ("--triton_output", outs)):
        seen: set[str] = set()
        duplicate = False
        for t in tensors:
            if t.name in seen:
                err(f"{option} {t.name}: the name is given twice")
                duplicate = True
            seen.add(t.name)
            if t.dtype == "BF16":
                err(
                    f"{option} {t.name}: BF16 cannot pass through numpy in the Python backend; use FP32 or FP16"
                )
            if t.dtype == "STRING" and spec.model_type != "tensorflow":
                err(f"{option} {t.name}: STRING tensors are not supported for --model_type {spec.model_type}")
            if spec.max_batch_size > 0 and t.dims and t.dims[0] == -1:
                warn(
                    f"{option} {t.name} dims {list(t.dims)} start with -1 but --max_batch_size "
                    f"{spec.max_batch_size} already adds the batch dimension; clients will send "
                    f"[-1, {', '.join(str(d) for d in t.dims)}]"
                )
        if spec.model_type == "pytorch" and not duplicate:
            _check_pytorch_names(option, tensors, rep)

    if spec.model_type == "transformers-neuronx":
        if len(ins) != 1 or len(outs) != 1:
            err(
                "--model_type transformers-neuronx takes exactly one --triton_input (token ids) and one --triton_output"
            )
        elif ins[0].dtype not in INTEGER_DTYPES:
            err(f"--triton_input {ins[0].name}: token ids must be an integer type, not {ins[0].dtype}")


def _check_pytorch_names(option: str, tensors: tuple[TensorSpec, ...], rep: Report) -> None:
    indices: list[int] = []
    for t in tensors:
        m = _PYTORCH_NAME.match(t.name)
        if not m:
            rep.errors.append(
                f"{option} {t.name}: pytorch tensor names must be <name>__<index> (e.g. INPUT__0), "
                "the index being the position in forward() / the output tuple"
            )
            return
        indices.append(int(m.group("index")))
    if len(set(indices)) != len(indices):
        rep.errors.append(f"{option}: the index {_first_dup(indices)} is used twice")
        return
    expected = list(range(len(indices)))
    if sorted(indices) != expected:
        missing = sorted(set(expected) - set(indices))
        rep.errors.append(
            f"{option}: indices must be contiguous from 0, got {sorted(indices)} (missing {missing[0] if missing else 0})"
        )


def _first_dup(values: list[int]) -> int:
    seen: set[int] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return values[0]


def _validate_tnx(spec: GenModelSpec, rep: Report) -> None:
    err, warn = rep.errors.append, rep.warnings.append
    tnx = spec.tnx or TnxOptions()
    if "." not in tnx.model_class or any(not p.isidentifier() for p in tnx.model_class.split(".")):
        err(f"--tnx_model_class {tnx.model_class!r}: expected a dotted path like {DEFAULT_TNX_MODEL_CLASS}")
    if tnx.amp not in TNX_AMP:
        err(f"--amp {tnx.amp!r}: must be one of {', '.join(TNX_AMP)}")
    if tnx.n_positions < 1:
        err(f"--n_positions {tnx.n_positions}: must be >= 1")
    if tnx.batch_size < 1:
        err(f"--batch_size {tnx.batch_size}: must be >= 1")
    if spec.max_batch_size > tnx.batch_size:
        warn(
            f"--max_batch_size {spec.max_batch_size} exceeds the compiled --batch_size {tnx.batch_size}; "
            "larger requests will be rejected by the model"
        )
    per = spec.cores_per_instance
    if tnx.tp_degree is not None:
        if tnx.tp_degree < 1:
            err(f"--tp_degree {tnx.tp_degree}: must be >= 1")
        elif per >= 1 and tnx.tp_degree > per:
            err(f"--tp_degree {tnx.tp_degree} exceeds the {per} core(s) each instance gets")
        elif per >= 1 and tnx.tp_degree < per:
            warn(f"--tp_degree {tnx.tp_degree} uses {tnx.tp_degree} of the {per} cores each instance gets")


def _resolve_compiled_model(spec: GenModelSpec, rep: Report, *, check_files: bool) -> None:
    """Store the compiled model relative to the model directory whenever possible.

    Relative values are relative to the model directory (upstream's --inf2 meaning). An absolute
    path inside the model directory is stored relative; one outside it is kept absolute, with a
    warning that the repository is then not relocatable (S3, copies).
    """
    raw = spec.compiled_model.strip()
    if not raw:
        rep.errors.append("--compiled_model is empty")
        return
    model_dir = spec.model_dir
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        in_model_dir = model_dir / path
        from_cwd = Path(os.path.abspath(path))
        if check_files and not in_model_dir.exists() and from_cwd.exists() and from_cwd != in_model_dir:
            rep.warnings.append(
                f"--compiled_model {raw}: not found under the model directory; using {from_cwd} "
                "(relative paths are relative to --triton_model_dir)"
            )
            path = from_cwd
        else:
            rep.compiled_model_value = os.path.normpath(raw)
            if check_files and not in_model_dir.exists():
                rep.warnings.append(
                    f"--compiled_model {raw}: {in_model_dir} does not exist yet; it must be there when Triton loads the model"
                )
            return
    path = Path(os.path.normpath(path))
    try:
        rel = path.relative_to(model_dir)
    except ValueError:
        rep.compiled_model_value = str(path)
        missing = " (and it does not exist yet)" if check_files and not path.exists() else ""
        rep.warnings.append(
            f"--compiled_model {path} is outside {model_dir}; stored as an absolute path, so the "
            f"repository only works on this filesystem, not from S3 or a copy{missing}"
        )
        return
    if str(rel) in ("", "."):
        rep.errors.append(f"--compiled_model {raw}: is the model directory itself")
        return
    rep.compiled_model_value = str(rel)
    if check_files and not path.exists():
        rep.warnings.append(
            f"--compiled_model {path} does not exist yet; it must be there when Triton loads the model"
        )
