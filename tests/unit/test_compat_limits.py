"""``compat.model_limits``: check_model's decision for one image as the JSON the host agent applies
(``tritonfleet/agent/modelcheck.py``) without the table. For every release's runtime (and runtimes the table
does not know), every host architecture and a grid of artifacts, the agent's verdict, line and fix are
check_model's."""

from __future__ import annotations

import itertools
import json

import pytest

from tritonfleet import compat
from tritonfleet.agent import modelcheck
from tritonfleet.agent.artifacts import KIND_NEFF, KIND_NEURON, KIND_NEURONX, KIND_UNKNOWN, ArtifactInfo
from tritonfleet.compat import FAIL, NEURON_CC, NEURONX_CC, OK, WARN, check_model, model_limits

ROWS = compat.chain_releases()
# every release's runtime, its series and another build of it, and runtimes the table does not have
RUNTIMES = sorted({r.runtime for r in ROWS} | {".".join(r.runtime.split(".")[:2]) for r in ROWS}) + [
    "2.34.99.0", "2.35.1.0", "3.0.0.0", "2.20.1.0", "2.21.1.0", "2.29.0.0", "2.1", "1:2.34.10.0-1", "2.34.*",
    None, "", "not-a-version"]
ARCHS = [None, "inf1", "inf2", "trn1", "trn2"]
NEURONX_VERSIONS = sorted({r.compilers[NEURONX_CC] for r in ROWS}) + [
    "2.16.372.0",  # a later build of a row's series
    "2.22.12471.0", "2.17.1.0",  # between rows
    "2.10.1.0", "1.99.0.0",  # older than the table
    "2.28.1.0", "3.0.0.0",  # newer than the table
    "2.27", "2", "2.27.5334.0+58f8de22", "garbage",
]
NEURON_VERSIONS = ["1.24.0.0", "1.24.1.0", "1.24", "1", "1.19.0.0", "1.25.0.0", "x.y"]
NEFFS = [None, "2.0", "2", "1.0", "0.6", "3.0", "2.1", "garbage"]
COMPILERS = [(NEURONX_CC, KIND_NEURONX, NEURONX_VERSIONS), (NEURON_CC, KIND_NEURON, NEURON_VERSIONS),
             (None, KIND_NEFF, [None]), (None, KIND_UNKNOWN, [None]), ("tvm", KIND_NEFF, ["0.9"]),
             (NEURONX_CC, KIND_NEURONX, [None])]


def infos():
    for compiler, kind, versions in COMPILERS:
        for version, neff in itertools.product(versions, NEFFS):
            yield ArtifactInfo("1/model.pt", kind, compiler, version, neff, "torchscript data.pkl: NEFF header",
                               "header")


def agent_limits(runtime, arch):
    """The limits as the agent reads them: through JSON, as the role writes them."""
    return modelcheck.limits_from_dict(json.loads(json.dumps(model_limits(runtime, arch))))


@pytest.mark.parametrize("runtime", RUNTIMES, ids=repr)
def test_the_agent_decides_what_check_model_decides(runtime):
    seen = set()
    for arch in ARCHS:
        limits = agent_limits(runtime, arch)
        for info in infos():
            expected = check_model("bert", info, runtime, neuron_arch=arch)
            got = modelcheck.judge("bert", info, limits)
            assert (got.verdict, got.line, got.fix) == (expected.verdict, expected.line, expected.fix), (info, arch)
            assert str(got) == str(expected) and got.artifact == "1/model.pt"
            seen.add(got.verdict)
    assert WARN in seen  # every runtime's grid reaches the warnings; the known runtimes also ok and fail
    if runtime and compat.chain_for_runtime(runtime):
        assert seen == {OK, WARN, FAIL}


def test_the_grid_covers_every_branch_of_check_model():
    """Every kind of line check_model writes occurs in the grid above (so the comparison covers them all)."""
    lines = set()
    for runtime, arch in itertools.product(RUNTIMES, ARCHS):
        for info in infos():
            line = check_model("bert", info, runtime, neuron_arch=arch).line
            lines.add(next((k for k in KINDS if k in line), line))
    assert lines == set(KINDS)


KINDS = ["the host is", "no compiler version found", "cannot judge", "an Inf1 model", "which is not in the "
         "compatibility table", "the Inf1 compiler of the table's releases", "version is unknown",
         "needs runtime >=", "needs a runtime newer than", "(between Neuron SDK", "(newer than Neuron SDK",
         "(older than Neuron SDK"]


def test_the_limits_of_sdk_2_32_on_inf2():
    limits = model_limits("2.34.10.0", "inf2")
    assert json.loads(json.dumps(limits)) == limits  # JSON-able as it is
    assert {k: limits[k] for k in ("format", "runtime", "neuron_arch", "sdk_release", "runtime_known",
                                   "neff_versions")} == {
        "format": 1, "runtime": "2.34.10.0", "neuron_arch": "inf2", "sdk_release": "2.32.0", "runtime_known": True,
        "neff_versions": ["0.6", "1.0", "2.0"]}
    assert limits["neuron_cc"] == {"inf1_support": False, "builds": [[1, 24]], "newest": "1.24.0.0"}
    assert limits["neuronx_cc"]["image_compiler"] == "2.27.5334.0"
    releases = limits["neuronx_cc"]["releases"]
    assert [r["sdk"] for r in releases] == [r.sdk for r in ROWS]  # oldest first
    assert releases[-1] == {"sdk": "2.32.0", "compiler": "2.27.5334.0", "runtime": "2.34", "loads": True,
                            "newer": False}
    older = model_limits("2.33.10.0", "inf2")["neuronx_cc"]["releases"]
    assert [(r["loads"], r["newer"]) for r in older[-2:]] == [(True, False), (False, False)]


def test_an_unknown_runtime_loads_no_release_and_keeps_inf1():
    limits = model_limits(None, "inf1")
    assert limits["runtime_known"] is False and limits["sdk_release"] is None
    assert not any(r["loads"] or r["newer"] for r in limits["neuronx_cc"]["releases"])
    assert limits["neuron_cc"]["inf1_support"] is True and limits["neuronx_cc"]["image_compiler"] is None
    assert model_limits("9.9.9.9")["neff_versions"] == ["0.6", "1.0", "2.0"]  # any release's


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(format=2), "format 2, this agent reads format 1"),
    (lambda d: d.update(format=True), "format True, this agent reads format 1"),
    (lambda d: d.pop("runtime_known"), "runtime_known: expected bool, got None"),
    (lambda d: d["neuronx_cc"]["releases"].append({"sdk": "x"}), "compiler: expected str, got None"),
    (lambda d: d["neuronx_cc"]["releases"][0].update(compiler="new"), "compiler 'new' is not a version"),
    (lambda d: d["neuron_cc"].update(builds=[["1", "24"]]), "neuron_cc.builds: expected lists of numbers"),
    (lambda d: d.update(neff_versions="2.0"), "neff_versions: expected a list of strings"),
    (lambda d: d.update(runtime=2.34), "runtime: expected str, got 2.34"),
])
def test_limits_of_another_shape_are_refused_in_one_line(change, message):
    data = model_limits("2.34.10.0", "inf2")
    change(data)
    with pytest.raises(modelcheck.LimitsError, match=message.replace("(", r"\(")):
        modelcheck.limits_from_dict(data)


def test_a_limits_file(tmp_path):
    path = tmp_path / "model-compat.json"
    path.write_text(json.dumps(model_limits("2.34.10.0", "trn1")))
    assert modelcheck.load_limits(path).runtime == "2.34.10.0"
    for text, message in [("{", "not JSON"), ("[]", "not a JSON object"), (" " * 70000, "larger than 65536 bytes")]:
        path.write_text(text)
        with pytest.raises(modelcheck.LimitsError, match=message):
            modelcheck.load_limits(path)
    with pytest.raises(modelcheck.LimitsError, match="cannot read: No such file or directory"):
        modelcheck.load_limits(tmp_path / "absent.json")
