"""QA suites: loading and checking against a model's metadata (no server: ModelInfo is plain data).

Every bad suite gives ONE line naming the file and the field path, before any request."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tritonfleet.agent.qa.bind import ModelInfo, TensorMeta, bind_suite
from tritonfleet.agent.qa.suites import SuiteError, discover, load_all, load_suite

I64 = "INT64"


def add_sub(max_batch: int = 8, dtype: str = I64, names: tuple[str, str] = ("INPUT0", "INPUT1"),
            outs: tuple[str, str] = ("OUTPUT0", "OUTPUT1"), name: str = "add_sub") -> ModelInfo:
    shape = (-1, 4)  # batched: [-1] + dims [4]; unbatched: dims [-1, 4]
    return ModelInfo(name, ("1",), max_batch, tuple(TensorMeta(n, dtype, shape) for n in names),
                     tuple(TensorMeta(n, dtype, shape) for n in outs))


CLASSIFIER = ModelInfo("classifier", ("1",), 0, (TensorMeta("X", "FP32", (-1, 10)),),
                       (TensorMeta("SCORES", "FP32", (-1, 10)), TensorMeta("LABEL", "BYTES", (-1,))))


def write(tmp: Path, text: str, files: dict[str, object] | None = None, name: str = "add_sub.yaml") -> Path:
    qa = tmp / "qa"
    qa.mkdir(exist_ok=True)
    for rel, content in (files or {}).items():
        path = qa / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, np.ndarray):
            np.save(path, content)
        else:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
    path = qa / name
    path.write_text(text)
    return path


def load(tmp: Path, text: str, files: dict[str, object] | None = None, name: str = "add_sub.yaml"):
    path = write(tmp, text, files, name)
    return load_suite(path, f"qa/{name}")


def error_of(tmp: Path, text: str, files: dict[str, object] | None = None, info: ModelInfo | None = None,
             name: str = "add_sub.yaml") -> str:
    with pytest.raises(SuiteError) as exc:
        bind_suite(load(tmp, text, files, name), info or add_sub())
    line = str(exc.value)
    assert "\n" not in line
    assert line.startswith(f"qa/{name}: "), line
    return line


GOOD_CASE = """
  - name: small
    inputs:
      INPUT0: {dtype: INT64, values: [1, 2, 3, 4]}
      INPUT1: {dtype: INT64, values: [1, 1, 1, 1]}
    outputs:
      OUTPUT0: {values: [2, 3, 4, 5]}
"""

PA_DATA = {"data": [{"INPUT__0": {"content": [1, 2, 3, 4] * 6, "shape": [6, 4]},
                     "INPUT__1": {"content": [1, 1, 1, 1] * 6, "shape": [6, 4]}}],
           "validation_data": [{"OUTPUT__0": {"content": [2, 3, 4, 5] * 6, "shape": [6, 4]},
                                "OUTPUT__1": {"content": [0, 0, 0, 0] * 5 + [0, 1, 2], "shape": [6, 4]}}]}

BAD_SUITES = [
    # (id, suite text, files, model, expected line (after "qa/add_sub.yaml: "))
    ("yaml-syntax", "cases: [\n  - name: x\n  bad", None, None,
     "line 2 column 3: expected the node content, but found '-'"),
    ("not-a-mapping", "- a\n- b\n", None, None, "a suite is a mapping with model and cases"),
    ("unknown-field", "cases:\n  - name: a\n    batchsize: 3\n    inputs: {INPUT0: {dtype: INT64, values: [1]}}",
     None, None, "cases[0].batchsize: unknown field"),
    ("no-cases", "model: add_sub\n", None, None, "cases: required field missing"),
    ("duplicate-key", "cases: []\ncases: []\n", None, None, "line 2 column 1: duplicate key 'cases'"),
    ("duplicate-case", "cases:" + GOOD_CASE + GOOD_CASE, None, None, "cases: two cases are named 'small'"),
    ("unknown-comparison", "compare: fuzzy\ncases:" + GOOD_CASE, None, None,
     "compare: unknown comparison 'fuzzy' (use exact, {atol: X, rtol: Y} or {topk: K})"),
    ("tolerance-not-number", "cases:" + GOOD_CASE + "    compare: {atol: lots}\n", None, None,
     "cases[0].compare: atol must be a finite number >= 0, got 'lots'"),
    ("concurrency-range", "concurrency: [1, 5, 900]\ncases:" + GOOD_CASE, None, None,
     "concurrency[2]: Input should be less than or equal to 256"),
    ("inline-needs-dtype", "cases:\n  - name: a\n    inputs: {INPUT0: {values: [1, 2, 3, 4]}}", None, None,
     "cases[0].inputs.INPUT0: inline values need a dtype"),
    ("reason-without-expect", "cases:" + GOOD_CASE + "    reason: boom\n", None, None,
     "cases[0]: reason is for expect: fail or expect: error"),
    ("missing-npy", "cases:\n  - name: a\n    inputs: {INPUT0: {npy: data/missing.npy}}", None, None,
     "cases[0].inputs.INPUT0.npy: no such file: qa/data/missing.npy"),
    ("missing-data-file", "cases:\n  - name: a\n    data: nothere.json\n", None, None,
     "cases[0].data: qa/nothere.json: no such file"),
    ("unknown-output", "cases:" + GOOD_CASE.replace("OUTPUT0:", "OUTPUT9:"), None, None,
     "cases[0].outputs.OUTPUT9: the model has no output OUTPUT9 (has OUTPUT0, OUTPUT1)"),
    ("unknown-input", "cases:" + GOOD_CASE.replace("INPUT1:", "INPUT7:"), None, None,
     "cases[0].inputs.INPUT7: the model has no input INPUT7 (has INPUT0, INPUT1)"),
    ("missing-input", "cases:\n  - name: a\n    inputs: {INPUT0: {dtype: INT64, values: [1, 2, 3, 4]}}", None, None,
     "cases[0].inputs: no value for input INPUT1 (the model needs INPUT0, INPUT1)"),
    ("wrong-dtype", "cases:" + GOOD_CASE.replace("INPUT1: {dtype: INT64", "INPUT1: {dtype: fp32"), None, None,
     "cases[0].inputs.INPUT1.dtype: FP32, but the model's tensor is INT64"),
    ("wrong-npy-dtype", "cases:\n  - name: a\n    inputs:\n      INPUT0: {npy: a.npy}\n"
     "      INPUT1: {dtype: INT64, values: [1, 1, 1, 1]}", {"a.npy": np.ones(4)}, None,
     "cases[0].inputs.INPUT0: the .npy file holds float64, the model's tensor is INT64 (int64)"),
    ("wrong-shape", "cases:" + GOOD_CASE.replace("values: [1, 1, 1, 1]", "values: [1, 1, 1]"), None, None,
     "cases[0].inputs.INPUT1: shape [3] does not fit: the model's input INPUT1 has dims [4] per batch element "
     "(max_batch_size 8)"),
    ("not-whole-number", "cases:" + GOOD_CASE.replace("values: [1, 2, 3, 4]", "values: [1, 2.5, 3, 4]"), None,
     None, "cases[0].inputs.INPUT0: 2.5 is not a whole number (INT64)"),
    ("batch-on-unbatched", "batch_size: 6\ncases:" + GOOD_CASE, None, add_sub(max_batch=0),
     "batch_size: 6, but add_sub does not batch (max_batch_size 0)"),
    ("upstream-23-values", "cases:\n  - name: wrong\n    data: data/wrong_no_batch.json\n",
     {"data/wrong_no_batch.json": PA_DATA}, add_sub(0, names=("INPUT__0", "INPUT__1"), outs=("OUTPUT__0", "OUTPUT__1")),
     "cases[0].data: qa/data/wrong_no_batch.json: validation_data[0].OUTPUT__1: has 23 values, shape [6, 4] needs 24"),
    ("data-not-json", "cases:\n  - name: a\n    data: d.json\n", {"d.json": "{nope"}, None,
     "cases[0].data: qa/d.json: line 1 column 2: Expecting property name enclosed in double quotes"),
    ("data-streams", "cases:\n  - name: a\n    data: d.json\n", {"d.json": {"data": [[{"INPUT0": [1]}]]}}, None,
     "cases[0].data: qa/d.json: data[0]: a list of lists (one per stream) is for sequence models; not supported"),
    ("topk-too-many", "cases:\n  - name: a\n    inputs: {X: {dtype: FP32, values: [[0,1,2,3,4,5,6,7,8,9]]}}\n"
     "    outputs: {SCORES: {values: [[0,1,2,3,4,5,6,7,8,9]], compare: {topk: 11}}}", None, CLASSIFIER,
     "cases[0].outputs.SCORES.compare: top-11 of 10 classes"),
    ("tolerance-on-bytes", "cases:\n  - name: a\n    inputs: {X: {dtype: FP32, values: [[0,1,2,3,4,5,6,7,8,9]]}}\n"
     "    outputs: {LABEL: {values: [cat], compare: {atol: 0.1}}}", None, CLASSIFIER,
     "cases[0].outputs.LABEL.compare: atol=0.1, rtol=0 needs a numeric output; LABEL is BYTES"),
    ("too-few-requests", "requests: 1\nbatch_size: 2\ncases:\n  - name: a\n    data: d.json\n",
     {"d.json": {"data": [{"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 2, 3, 4]}] * 5}}, None,
     "requests: 1 requests cannot send all 5 data entries (needs 3)"),
    ("out-of-range", "cases:\n  - name: a\n    data: d.json\n",
     {"d.json": {"data": [{"INPUT0": [1, 2, 3, 300], "INPUT1": [1, 2, 3, 4]}]}}, add_sub(dtype="UINT8"),
     "cases[0].data: qa/d.json: data[0].INPUT0: 300 is out of range for UINT8"),
    ("model-name", "cases:" + GOOD_CASE, None, None, "model: the file name 'add sub' is not a model name; set model"),
]


@pytest.mark.parametrize("suite_id,text,files,info,expected", BAD_SUITES, ids=[b[0] for b in BAD_SUITES])
def test_a_bad_suite_is_one_line_naming_file_and_field(tmp_path, suite_id, text, files, info, expected):
    name = "add sub.yaml" if suite_id == "model-name" else "add_sub.yaml"
    line = error_of(tmp_path, text, files, info, name)
    assert line == f"qa/{name}: {expected}", line


def test_there_are_at_least_ten_bad_suite_cases():
    assert len(BAD_SUITES) >= 10
    assert len({b[4].split(":")[0] for b in BAD_SUITES}) >= 10  # different fields


def test_scientific_notation_is_a_float_in_yaml(tmp_path):
    ls = load(tmp_path, "compare: {atol: 1e-4, rtol: 2E-3}\ncases:" + GOOD_CASE)
    assert (ls.suite.compare.atol, ls.suite.compare.rtol) == (1e-4, 2e-3)


def test_model_defaults_to_the_file_name_and_json_suites_load(tmp_path):
    ls = load(tmp_path, json.dumps({"version": 2, "cases": [{"name": "a", "data": "d.json"}]}),
              {"d.json": {"data": [{"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}]}}, name="adder.json")
    assert (ls.model, ls.version, ls.display) == ("adder", "2", "qa/adder.json")


def test_discover_takes_suites_and_leaves_perf_analyzer_data_alone(tmp_path):
    write(tmp_path, "cases:" + GOOD_CASE, {"data.json": PA_DATA, "sub/other.yaml": "x: 1"}, name="a.yaml")
    write(tmp_path, json.dumps({"cases": [{"name": "x", "data": "data.json"}]}), name="b.json")
    found = discover([str(tmp_path / "qa")])
    assert [d for _, d in found] == [f"{tmp_path}/qa/a.yaml", f"{tmp_path}/qa/b.json"]
    with pytest.raises(SuiteError, match="no such file or directory"):
        discover([str(tmp_path / "nothing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SuiteError, match="no suite files"):
        discover([str(tmp_path / "empty")])


def test_one_bad_suite_does_not_hide_the_others(tmp_path):
    write(tmp_path, "cases:" + GOOD_CASE, name="good.yaml")
    write(tmp_path, "cases: 3", name="bad.yaml")
    write(tmp_path, "nope: 1\ncases:" + GOOD_CASE, name="worse.yaml")
    suites, errors = load_all([str(tmp_path / "qa")])
    assert [s.model for s in suites] == ["good"]
    assert [str(e).split(": ")[1] for e in errors] == ["cases", "nope"]


# ----------------------------------------------------------------------------- what a good suite becomes


def test_a_batched_request_takes_consecutive_entries_and_each_row_its_own_expectation(tmp_path):
    data = {"data": [{"INPUT0": [i, 0, 0, 0], "INPUT1": [0, i, 0, 0]} for i in range(4)],
            "validation_data": [{"OUTPUT0": [i, i, 0, 0]} for i in range(4)]}
    ls = load(tmp_path, "batch_size: 6\ncases:\n  - name: c\n    data: d.json\n", {"d.json": data})
    plan = bind_suite(ls, add_sub(max_batch=1000))[0]
    assert len(plan.samples) == 2  # requests start at entries 0, 6 % 4 = 2, then repeat
    first, second = plan.samples
    assert first.inputs["INPUT0"][:, 0].tolist() == [0, 1, 2, 3, 0, 1]
    assert second.inputs["INPUT0"][:, 0].tolist() == [2, 3, 0, 1, 2, 3]
    assert second.expected["OUTPUT0"][:, 0].tolist() == [2, 3, 0, 1, 2, 3]
    assert first.batch == 6 and plan.outputs == ["OUTPUT0"] and plan.requests_at(5) == 20


def test_one_inline_element_is_repeated_to_the_batch_and_a_given_batch_is_kept(tmp_path):
    ls = load(tmp_path, "batch_size: 3\ncases:" + GOOD_CASE)
    (sample,) = bind_suite(ls, add_sub())[0].samples
    assert sample.inputs["INPUT0"].tolist() == [[1, 2, 3, 4]] * 3
    assert sample.expected["OUTPUT0"].tolist() == [[2, 3, 4, 5]] * 3
    ls = load(tmp_path, "cases:" + GOOD_CASE.replace("values: [1, 2, 3, 4]", "values: [[1, 2, 3, 4], [5, 6, 7, 8]]")
              .replace("values: [1, 1, 1, 1]", "values: [[1, 1, 1, 1], [1, 1, 1, 1]]")
              .replace("values: [2, 3, 4, 5]", "values: [[2, 3, 4, 5], [6, 7, 8, 9]]"))
    (sample,) = bind_suite(ls, add_sub())[0].samples
    assert sample.batch == 2 and sample.expected["OUTPUT0"].shape == (2, 4)


def test_misaligned_validation_data_is_a_data_error_not_a_bad_suite(tmp_path):
    data = {"data": [{"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}] * 4,
            "validation_data": [{"OUTPUT0": [2, 3, 4, 5]}] * 3}
    ls = load(tmp_path, "cases:\n  - name: m\n    data: d.json\n    expect: error\n", {"d.json": data})
    plan = bind_suite(ls, add_sub())[0]
    assert plan.data_error and "doesn't align" in plan.data_error and "3 validation_data" in plan.data_error
    # its entries are still checked against the model
    data["validation_data"][2] = {"OUTPUT0": [2, 3, 4]}
    line = error_of(tmp_path, "cases:\n  - name: m\n    data: d.json\n", {"d.json": data})
    assert line.endswith("cases[0].data: qa/d.json: validation_data[2].OUTPUT0: has 3 values, shape [4] needs 4")


def test_perf_analyzer_b64_content_and_model_dims(tmp_path):
    a = np.array([1, -2, 3, -4], dtype=np.int64)
    import base64
    data = {"data": [{"INPUT0": {"b64": base64.b64encode(a.tobytes()).decode()}, "INPUT1": [0, 0, 0, 0]}]}
    ls = load(tmp_path, "cases:\n  - name: b\n    data: d.json\n", {"d.json": data})
    (sample,) = bind_suite(ls, add_sub())[0].samples
    assert sample.inputs["INPUT0"].tolist() == [[1, -2, 3, -4]]
    # an unbatched model with a variable dim needs the shape
    line = error_of(tmp_path, "cases:\n  - name: b\n    data: d.json\n", {"d.json": data}, add_sub(max_batch=0))
    assert line.endswith("data[0].INPUT0: needs a shape: the model's dims [-1, 4] are not fixed")
