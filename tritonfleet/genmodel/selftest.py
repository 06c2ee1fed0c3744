"""The QA self-test's model repository (controller side): add_sub in upstream's 8 configurations.

``python -m tritonfleet.genmodel.selftest DEST --target cpu|inf1|inf2|trn1|trn2 [--neuron-cores N]
[--compiled-model FILE]`` writes

- ``DEST/models/<config>/``: ``config.pbtxt``, ``1/model.py`` (``tritonfleet gen-model`` with upstream's
  options, see :meth:`tritonfleet.agent.qa.selftest.Config.gen_model_args`) and ``model.pt``;
- ``DEST/qa/``: the same suites ``tritonfleet-agent qa run --selftest`` has built in (so
  ``--suites DEST/qa`` runs them too).

``model.pt`` is add_sub (``(torch.sub(a, b, alpha=-1), torch.sub(a, b, alpha=1))``) traced with an
int64 ``[8, 4]`` example: on ``cpu`` with ``torch.jit.trace``; on inf1 with
``torch.neuron.trace(..., dynamic_batch_size=True)``; on inf2/trn1/trn2 with ``torch_neuronx.trace`` and
``torch_neuronx.dynamic_batch``. The Neuron traces need the Neuron SDK (run this inside the Neuron
image), or pass a model compiled there with ``--compiled-model``. Configurations that need more than
``--neuron-cores`` cores are left out of ``models/`` (their suites stay: the runner skips them given the
same ``--neuron-cores``). The host agent cannot import this module: it is not shipped to hosts.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tritonfleet.agent.qa.selftest import CONFIGS, Config, write_suites
from tritonfleet.genmodel.cli import UsageError, build_parser, spec_from_args
from tritonfleet.genmodel.spec import TARGETS, SpecError
from tritonfleet.genmodel.writer import generate, write


@dataclass
class SelfTestRepo:
    models: Path  # the Triton model repository
    suites: Path
    configs: list[Config] = field(default_factory=list)  # generated
    skipped: list[Config] = field(default_factory=list)  # needing more cores than given
    warnings: list[str] = field(default_factory=list)


def trace_add_sub(target: str, dest: Path) -> Path:
    """Trace add_sub for ``target`` and save it to ``dest`` (TorchScript)."""
    import torch

    class AddSub(torch.nn.Module):
        def forward(self, a, b):
            return torch.sub(a, b, alpha=-1), torch.sub(a, b, alpha=1)

    example = (torch.zeros(8, 4, dtype=torch.int64), torch.zeros(8, 4, dtype=torch.int64))
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; Neuron still compiles to it
        warnings.simplefilter("ignore", DeprecationWarning)
        if target == "cpu":
            traced = torch.jit.trace(AddSub(), example)
        elif target == "inf1":
            import torch_neuron  # noqa: F401 - registers torch.neuron

            # torch.neuron exists once torch_neuron is imported, which torch's types cannot know
            traced = torch.neuron.trace(AddSub(), example_inputs=example, dynamic_batch_size=True)  # type: ignore[attr-defined]
        else:
            import torch_neuronx

            traced = torch_neuronx.dynamic_batch(torch_neuronx.trace(AddSub(), example))
        torch.jit.save(traced, str(dest))
    return dest


def write_repository(dest: Path, target: str, neuron_cores: int | None = None,
                     compiled_model: Path | None = None, only: list[str] | None = None) -> SelfTestRepo:
    """Write ``dest/models`` and ``dest/qa`` (``only``: just these configurations' models); SpecError if
    gen-model rejects a configuration."""
    if target not in TARGETS:
        raise SpecError(f"unknown target {target!r} (one of {', '.join(TARGETS)})")
    unknown = set(only or ()) - {c.name for c in CONFIGS}
    if unknown:
        raise SpecError(f"no self-test configuration {sorted(unknown)[0]!r}")
    repo = SelfTestRepo(dest / "models", dest / "qa")
    repo.models.mkdir(parents=True, exist_ok=True)
    limit = None if target == "cpu" else neuron_cores
    for cfg in CONFIGS:
        if only is not None and cfg.name not in only:
            continue
        (repo.skipped if limit is not None and cfg.neuron_cores > limit else repo.configs).append(cfg)
    model = compiled_model
    for cfg in repo.configs:
        if model is None:  # traced once, for the first model that needs it
            model = trace_add_sub(target, dest / ".add_sub.pt")
        model_dir = repo.models / cfg.name
        model_dir.mkdir(exist_ok=True)
        shutil.copy2(model, model_dir / "model.pt")
        argv = [*cfg.gen_model_args(), "--target", target, "--triton_model_dir", str(model_dir)]
        try:
            spec = spec_from_args(build_parser().parse_args(argv))
        except UsageError as exc:  # a bug in gen_model_args, not the user's doing
            raise SpecError(str(exc)) from None
        gen = generate(spec, command="tritonfleet.genmodel.selftest " + " ".join(argv))
        repo.warnings += [f"{cfg.name}: {w}" for w in gen.report.warnings]
        write(gen)
    if compiled_model is None and (dest / ".add_sub.pt").exists():
        (dest / ".add_sub.pt").unlink()
    write_suites(repo.suites)
    return repo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonfleet.genmodel.selftest",
                                     description="Write the QA self-test model repository and suites.")
    parser.add_argument("dest", metavar="DEST", type=Path, help="writes DEST/models and DEST/qa")
    parser.add_argument("--target", choices=TARGETS, required=True, help="cpu: TorchScript on CPU (smoke test)")
    parser.add_argument("--neuron-cores", type=int, metavar="N", help="the host's NeuronCores (leave out bigger "
                        "configurations); ignored for --target cpu")
    parser.add_argument("--compiled-model", type=Path, metavar="FILE", help="add_sub already compiled for the "
                        "target (skips tracing)")
    args = parser.parse_args(argv)
    if args.neuron_cores is not None and args.neuron_cores < 1:
        parser.error("--neuron-cores must be >= 1")
    if args.compiled_model is not None and not args.compiled_model.is_file():
        parser.error(f"--compiled-model {args.compiled_model}: no such file")
    try:
        repo = write_repository(args.dest, args.target, args.neuron_cores, args.compiled_model)
    except (SpecError, ImportError, OSError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    for line in repo.warnings:
        print(f"warning: {line}", file=sys.stderr)
    print(f"wrote {len(repo.configs)} models to {repo.models} and {len(CONFIGS)} suites to {repo.suites}"
          + (f"; left out (need 8 NeuronCores): {', '.join(c.name for c in repo.skipped)}" if repo.skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
