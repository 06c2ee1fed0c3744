"""`tritonfleet gen-model`: a drop-in for python_backend's inferentia/scripts/gen_triton_model.py.

The upstream option names and value syntax are kept (argparse, including multi-valued
`--triton_input A B` and `--preferred_batch_size 4 8`), so existing scripts keep working; the
click command only hands its arguments over. Every failure is one line on stderr, with exit
status 2 (usage) or 1 (invalid model), and then nothing has been written.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from tritonfleet.genmodel.spec import (
    DEFAULT_TNX_MODEL_CLASS,
    MODEL_TYPES,
    TARGETS,
    TNX_AMP,
    GenModelSpec,
    SpecError,
    Target,
    TensorSpec,
    TnxOptions,
    parse_core_range,
    parse_tensor_spec,
    target_for_instance_type,
)
from tritonfleet.genmodel.writer import generate, write

PROG = "tritonfleet gen-model"
EXIT_USAGE = 2
EXIT_INVALID = 1


class UsageError(Exception):
    """argparse-level problem (unknown option, missing value, bad integer)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        raise UsageError(message.replace("\n", " "))


def _opt(*names: str) -> list[str]:
    """Upstream spelling first, plus the hyphenated alias (`--model_type` / `--model-type`)."""
    out: list[str] = []
    for name in names:
        out.append(name)
        alias = "--" + name[2:].replace("_", "-")
        if alias != name:
            out.append(alias)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        allow_abbrev=False,
        description=(
            "Generate a Triton Python-backend model directory (config.pbtxt + <version>/model.py) "
            "serving a Neuron-compiled model. Accepts gen_triton_model.py's options unchanged."
        ),
    )
    up = p.add_argument_group("gen_triton_model.py options")
    up.add_argument(
        *_opt("--model_type"), required=True, choices=MODEL_TYPES, help="framework of the compiled model"
    )
    up.add_argument("--inf2", action="store_true", help="NeuronCore-v2 code path (same as --target inf2)")
    up.add_argument(
        *_opt("--compiled_model"),
        required=True,
        help="compiled model, relative to --triton_model_dir (absolute accepted)",
    )
    up.add_argument(
        *_opt("--triton_input"),
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME,DTYPE,DIMS",
        help="input spec, e.g. INPUT__0,INT64,-1x4; repeatable and multi-valued",
    )
    up.add_argument(
        *_opt("--triton_output"),
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME,DTYPE,DIMS",
        help="output spec, e.g. OUTPUT__0,FP32,-1x4; repeatable and multi-valued",
    )
    up.add_argument(
        *_opt("--neuron_core_range"),
        required=True,
        metavar="START:END",
        help="inclusive core range, e.g. 0:7",
    )
    up.add_argument(
        *_opt("--triton_model_instance_count"),
        type=int,
        default=1,
        metavar="N",
        help="instances (cores split evenly)",
    )
    up.add_argument(
        *_opt("--threads_per_core"),
        type=int,
        default=1,
        metavar="N",
        help="threads per NeuronCore (default 1)",
    )
    up.add_argument(
        *_opt("--triton_model_dir"),
        required=True,
        metavar="DIR",
        help="model directory; its name is the model name",
    )
    up.add_argument(
        *_opt("--model_version"), type=int, default=1, metavar="N", help="version directory (default 1)"
    )
    up.add_argument(*_opt("--enable_dynamic_batching"), action="store_true", help="add dynamic_batching {}")
    up.add_argument(
        *_opt("--max_batch_size"), type=int, default=0, metavar="N", help="0 disables batching (default)"
    )
    up.add_argument(
        *_opt("--preferred_batch_size"),
        type=int,
        action="extend",
        nargs="+",
        default=[],
        metavar="N",
        help="preferred batch size(s); several values allowed",
    )
    up.add_argument(
        *_opt("--max_queue_delay_microseconds"), type=int, metavar="US", help="dynamic batching queue delay"
    )
    up.add_argument(
        *_opt("--disable_batch_requests_to_neuron"),
        action="store_true",
        help="run each request alone instead of one concatenated batch",
    )
    up.add_argument(*_opt("--tag_set"), default=None, help="TensorFlow SavedModel tag set (default serve)")
    up.add_argument(
        *_opt("--signature_def_key"), default=None, help="TensorFlow signature (default serving_default)"
    )

    tf = p.add_argument_group("tritonfleet options")
    tf.add_argument(
        "--target",
        choices=TARGETS,
        default=None,
        help="inf1 (default), inf2, trn1, trn2, or cpu (smoke test)",
    )
    tf.add_argument(
        "--instance-type",
        "--instance_type",
        dest="instance_type",
        metavar="TYPE",
        help="check cores against e.g. inf2.xlarge",
    )
    tf.add_argument("--dry-run", action="store_true", help="validate and print config.pbtxt; write nothing")

    tnx = p.add_argument_group("--model_type transformers-neuronx (stored as config.pbtxt parameters)")
    tnx.add_argument(
        *_opt("--tp_degree"),
        type=int,
        default=None,
        metavar="N",
        help="tensor parallel degree (default: the instance's cores)",
    )
    tnx.add_argument(
        *_opt("--n_positions"), type=int, default=None, metavar="N", help="context length (default 2048)"
    )
    tnx.add_argument(*_opt("--amp"), default=None, metavar="|".join(TNX_AMP), help="precision (default bf16)")
    tnx.add_argument(
        *_opt("--batch_size"), type=int, default=None, metavar="N", help="compiled batch size (default 1)"
    )
    tnx.add_argument(
        *_opt("--tnx_model_class"), default=None, metavar="DOTTED", help=f"default {DEFAULT_TNX_MODEL_CLASS}"
    )
    return p


def _resolve_target(ns: argparse.Namespace) -> Target:
    if ns.target is not None:
        if ns.inf2 and ns.target == "inf1":
            raise UsageError("--inf2 contradicts --target inf1")
        return ns.target
    if ns.inf2:
        return "inf2"
    if ns.instance_type:
        return target_for_instance_type(ns.instance_type) or "inf1"
    return "inf1"


def spec_from_args(ns: argparse.Namespace) -> GenModelSpec:
    """Turn parsed options into a spec; raise SpecError listing every malformed value."""
    errors: list[str] = []
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    for option, texts, sink in (
        ("--triton_input", ns.triton_input, inputs),
        ("--triton_output", ns.triton_output, outputs),
    ):
        for text in texts:
            try:
                sink.append(parse_tensor_spec(text, option))
            except SpecError as exc:
                errors.extend(exc.errors)
    try:
        start, end = parse_core_range(ns.neuron_core_range)
    except SpecError as exc:
        errors.extend(exc.errors)
        start = end = 0
    if errors:
        raise SpecError(errors)

    tnx_values = {
        "tp_degree": ns.tp_degree,
        "n_positions": ns.n_positions,
        "amp": ns.amp,
        "batch_size": ns.batch_size,
        "model_class": ns.tnx_model_class,
    }
    given = {k: v for k, v in tnx_values.items() if v is not None}
    tnx: TnxOptions | None = None
    if ns.model_type == "transformers-neuronx" or given:
        tnx = TnxOptions(**given)
    return GenModelSpec(
        model_type=ns.model_type,
        target=_resolve_target(ns),
        instance_type=ns.instance_type,
        triton_model_dir=ns.triton_model_dir,
        model_version=ns.model_version,
        compiled_model=ns.compiled_model,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        core_start=start,
        core_end=end,
        instance_count=ns.triton_model_instance_count,
        threads_per_core=ns.threads_per_core,
        max_batch_size=ns.max_batch_size,
        dynamic_batching=ns.enable_dynamic_batching,
        preferred_batch_sizes=tuple(ns.preferred_batch_size),
        max_queue_delay_microseconds=ns.max_queue_delay_microseconds,
        batch_requests_to_neuron=not ns.disable_batch_requests_to_neuron,
        tag_set=ns.tag_set or "serve",
        signature_def_key=ns.signature_def_key or "serving_default",
        tnx=tnx,
    )


def _tf_signature(spec: GenModelSpec) -> GenModelSpec:
    """Read inputs/outputs from the SavedModel signature, as upstream does (needs tensorflow)."""
    from tritonfleet.genmodel.tfsig import read_signature

    model_path = spec.compiled_model
    if not model_path.startswith("/"):
        model_path = str(spec.model_dir / model_path)
    inputs, outputs = read_signature(model_path, spec.tag_set, spec.signature_def_key)
    return spec.model_copy(update={"inputs": inputs, "outputs": outputs})


def _err(line: str) -> None:
    click.echo(f"error: {line}", err=True)


def run(argv: Sequence[str]) -> int:
    """The whole command; returns the exit status."""
    argv = list(argv)
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except UsageError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)

    try:
        spec = spec_from_args(ns)
        if ns.model_type != "tensorflow" and (ns.tag_set or ns.signature_def_key):
            click.echo(
                "warning: --tag_set/--signature_def_key only apply to --model_type tensorflow; ignored",
                err=True,
            )
        if spec.model_type == "tensorflow" and not spec.inputs and not spec.outputs:
            spec = _tf_signature(spec)
        gen = generate(spec, command=f"{PROG} {shlex.join(argv)}".replace("\n", " "))
    except UsageError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except SpecError as exc:
        for line in exc.errors:
            _err(line)
        return EXIT_INVALID
    except ValueError as exc:  # pydantic ValidationError is a ValueError
        _err(str(exc).splitlines()[0])
        return EXIT_INVALID

    for line in gen.report.warnings:
        click.echo(f"warning: {line}", err=True)
    if ns.dry_run:
        click.echo(gen.config_text, nl=False)
        return 0
    try:
        paths = write(gen)
    except OSError as exc:
        _err(f"writing {gen.spec.model_dir}: {exc.strerror or exc}")
        return EXIT_INVALID
    for path in paths:
        click.echo(f"wrote {path}")
    cores = ", ".join(f"{i}: {a}-{b}" for i, (a, b) in enumerate(gen.spec.instance_cores()))
    click.echo(
        f"{gen.spec.model_name}: target {gen.spec.target}, {gen.spec.instance_count} instance(s), cores {cores}"
    )
    return 0


@click.command(
    "gen-model",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def gen_model(argv: tuple[str, ...]) -> None:
    """Generate a Triton model directory for a Neuron-compiled model (gen_triton_model.py options; -h for help)."""
    code = run(argv)
    if code:
        sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
