"""The built-in Neuron self-test (``qa run --selftest``): upstream's L0_inferentia_perf_analyzer, fixed.

The model is add_sub: int64 ``INPUT__0``, ``INPUT__1`` of 4 -> ``OUTPUT__0 = a + b``, ``OUTPUT__1 = a - b``.
Eight configurations, one model each (:data:`CONFIGS`): {1 instance on core 0; 3 instances over cores 0-7}
x {unbatched (``max_batch_size 0``, dims ``-1x4``), requests of 6 rows; dynamic batching (max 1000,
preferred 8, 100 us queue delay), requests of batch 6 made of consecutive data entries} x {the batch goes
to the model as one; each request alone
(``--disable_batch_requests_to_neuron``)}. Each is run at concurrency 1, 5 and 9 with three
perf_analyzer-format data files (values include negatives, as upstream's):

- ``misaligned``: 4 ``data``, 3 ``validation_data`` entries: must be reported as a data error;
- ``wrong``: well-formed, with wrong expected values in OUTPUT__1: the mismatch must be detected
  (upstream's wrong no-batch file also had 23 values for a [6, 4] shape, so it failed for the wrong reason);
- ``correct``: must pass, with a non-zero request count.

A configuration that needs more NeuronCores than the host has (``--neuron-cores``) is skipped. The model
repository itself is written on the controller (``tritonfleet.genmodel.selftest``): the host only runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

A = [[1, 2, 3, 4], [0, 0, 0, 0], [-1, -2, -3, -4], [-4, -3, -2, -1]]
B = [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [-1, -1, -1, -1]]
ROWS = 6  # unbatched requests carry 6 rows; batched ones are batches of 6 (perf_analyzer -b 6)
CONCURRENCY = [1, 5, 9]


@dataclass(frozen=True)
class Config:
    name: str
    instances: int  # 1 on core 0, or 3 over cores 0-7
    batching: bool  # dynamic batching, max_batch_size 1000; else max_batch_size 0 and dims -1x4
    to_model: bool  # the batch goes to the model as one; else --disable_batch_requests_to_neuron

    @property
    def core_range(self) -> str:
        return "0:7" if self.instances == 3 else "0:0"

    @property
    def neuron_cores(self) -> int:
        return 8 if self.instances == 3 else 1

    def gen_model_args(self) -> list[str]:
        """``tritonfleet gen-model`` options of this configuration, as upstream's test passed them."""
        dims = "4" if self.batching else "-1x4"
        args = ["--model_type", "pytorch", "--compiled_model", "model.pt", "--neuron_core_range", self.core_range,
                "--triton_input", f"INPUT__0,INT64,{dims}", f"INPUT__1,INT64,{dims}",
                "--triton_output", f"OUTPUT__0,INT64,{dims}", f"OUTPUT__1,INT64,{dims}"]
        if self.instances > 1:
            args += ["--triton_model_instance_count", str(self.instances)]
        if self.batching:
            args += ["--enable_dynamic_batching", "--max_batch_size", "1000", "--preferred_batch_size", "8",
                     "--max_queue_delay_microseconds", "100"]
        if not self.to_model:
            args.append("--disable_batch_requests_to_neuron")
        return args


CONFIGS = [Config(f"add_sub_{'multiple' if n == 3 else 'single'}_{'batched' if b else 'unbatched'}_"
                  f"{'default_batch' if m else 'no_batch'}", n, b, m)
           for n in (1, 3) for b in (False, True) for m in (True, False)]


def _tensor(row: list[int], batched: bool) -> dict:
    if batched:
        return {"content": row, "shape": [4]}
    return {"content": row * ROWS, "shape": [ROWS, 4]}


def _outputs(a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
    return [x + y for x, y in zip(a, b)], [x - y for x, y in zip(a, b)]  # noqa: B905 - 3.9


def data_file(kind: str, batched: bool) -> dict:
    """One perf_analyzer input-data file: ``kind`` is correct, wrong or misaligned."""
    data = [{"INPUT__0": _tensor(a, batched), "INPUT__1": _tensor(b, batched)} for a, b in zip(A, B)]  # noqa: B905
    validation = []
    for i, (a, b) in enumerate(zip(A, B)):  # noqa: B905 - equal lengths; 3.9
        add, sub = _outputs(a, b)
        if kind == "wrong" and i in (1, 3):  # one element off, in different places
            sub = list(sub)
            sub[i] = sub[i] + (1 if i == 1 else -7)
        out = {"OUTPUT__0": _tensor(add, batched), "OUTPUT__1": _tensor(sub, batched)}
        if kind == "wrong" and not batched and i == 3:  # unbatched: only the last of the 6 rows is off
            out["OUTPUT__1"] = {"content": _outputs(a, b)[1] * (ROWS - 1) + sub, "shape": [ROWS, 4]}
        validation.append(out)
    if kind == "misaligned":
        validation = validation[:3]
    return {"data": data, "validation_data": validation}


def data_name(kind: str, batched: bool) -> str:
    return f"{kind}_{'batched' if batched else 'no_batch'}.json"


def suite(cfg: Config) -> dict:
    """The suite of one configuration (paths relative to the suite file)."""
    doc: dict = {
        "description": f"self-test: add_sub, {cfg.instances} instance(s) on cores {cfg.core_range}, "
                       f"{'dynamic batching, batches of 6' if cfg.batching else 'unbatched, 6 rows'}, "
                       f"{'batch to the model' if cfg.to_model else 'requests one by one'}",
        "model": cfg.name,
        "neuron_cores": cfg.neuron_cores,
        "concurrency": list(CONCURRENCY),
    }
    if cfg.batching:
        doc["batch_size"] = ROWS
    doc["cases"] = [
        {"name": "misaligned", "data": f"data/{data_name('misaligned', cfg.batching)}", "expect": "error",
         "reason": "doesn't align"},
        {"name": "wrong", "data": f"data/{data_name('wrong', cfg.batching)}", "expect": "fail", "reason": "OUTPUT__1"},
        {"name": "correct", "data": f"data/{data_name('correct', cfg.batching)}"},
    ]
    return doc


def write_suites(dest: Path, configs: list[Config] | None = None) -> list[Path]:
    """Write ``dest/<model>.yaml`` for each configuration and ``dest/data/*.json``; return the suite files."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "data").mkdir(exist_ok=True)
    for kind in ("correct", "wrong", "misaligned"):
        for batched in (False, True):
            text = json.dumps(data_file(kind, batched), indent=1)
            (dest / "data" / data_name(kind, batched)).write_text(text + "\n", encoding="utf-8")
    paths = []
    for cfg in configs or CONFIGS:
        path = dest / f"{cfg.name}.yaml"
        path.write_text(f"# {PROG_NOTE}\n" + yaml.safe_dump(suite(cfg), sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


PROG_NOTE = "written by tritonfleet's QA self-test (tritonfleet/agent/qa/selftest.py); do not edit"
