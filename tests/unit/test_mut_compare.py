"""tritonfleet.agent.qa.compare: edge cases of the worst element and of top-k that the QA tests did not pin.
Written for the mutants ``make mutate`` found surviving (docs/mutation-survivors.md)."""

from __future__ import annotations

import numpy as np

from tritonfleet.agent.qa.compare import check_output, check_response
from tritonfleet.agent.qa.schema import EXACT, Compare


def test_an_empty_output_passes():
    c = check_output("O", np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), EXACT)
    assert c.ok is True and c.worst is None and c.message is None


def test_top_k_of_fewer_classes_than_k_fails():
    c = check_output("S", np.array([[0.1, 0.9]]), np.array([[0.1, 0.9]]), Compare("topk", k=3))
    assert c.ok is False and c.worst is None and c.message == "S: top-3 of an output with 2 classes"
    r = check_response({"S": np.array([[0.1, 0.9]])}, {"S": np.array([[0.1, 0.9]])}, {"S": Compare("topk", k=3)})
    assert r.ok is False and r.message == c.message


def test_zero_against_zero_is_rel_zero():
    c = check_output("O", np.zeros(3), np.zeros(3), Compare("close", atol=0.1))
    assert c.ok and (c.worst.abs, c.worst.rel) == (0.0, 0.0)


def test_a_non_finite_difference_has_no_rel_and_ranks_first():
    c = check_output("O", np.array([1.0, np.inf]), np.array([1.0, 2.0]), Compare("close", atol=0.1))
    assert not c.ok and c.worst.index == [1] and (c.worst.abs, c.worst.rel) == (None, None)
    assert c.message == "O[1]: got inf, expected 2 beyond atol=0.1, rtol=0"


def test_bytes_failure_names_the_element_without_numbers():
    got = np.array([b"a", b"x", b"c"], dtype=np.object_)
    want = np.array([b"a", b"b", b"c"], dtype=np.object_)
    c = check_output("T", got, want, EXACT)
    assert not c.ok and c.message == "T[1]: got b'x', expected b'b'"
    assert (c.worst.output, c.worst.index, c.worst.failed, c.worst.score) == ("T", [1], True, 1.0)
    ok = check_output("T", want, want, EXACT)
    assert ok.ok and (ok.worst.output, ok.worst.index, ok.worst.failed, ok.worst.score) == ("T", [0], False, 0.0)


def test_exact_integers_report_a_zero_worst_at_the_origin():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    c = check_output("I", a, a.copy(), EXACT)
    assert c.ok and c.worst.to_json() == {"output": "I", "index": [0, 0], "abs": 0.0, "rel": 0.0}
    assert (c.worst.failed, c.worst.score) == (False, 0.0)


def test_top_k_failure_names_row_labels_and_the_worst_label():
    want = np.array([[[0.1, 0.2, 0.7], [0.6, 0.3, 0.1]]])
    got = np.array([[[0.1, 0.2, 0.7], [0.1, 0.3, 0.6]]])
    c = check_output("S", got, want, Compare("topk", k=1))
    assert not c.ok
    assert c.message == "S[0, 1]: top-1 labels [2], expected [0] (label 2: got 0.6, expected 0.1)"
    assert (c.worst.output, c.worst.index, c.worst.failed, c.worst.score) == ("S", [0, 1, 2], True, float("inf"))
    passed = check_output("S", want, want, Compare("topk", k=1))
    assert passed.ok and (passed.worst.output, passed.worst.failed, passed.worst.abs) == ("S", False, 0.0)
