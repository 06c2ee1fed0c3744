"""tritonfleet.agent.qa.compare: missing and misshapen outputs, BYTES against numbers, NaN and infinity under
``exact`` and ``close``, the passing worst element, top-k edges (k equal to the classes, 1-D outputs, NaN
rows, ties among many classes, equal integers) and how check_response ranks failures. Written for the
mutants ``make mutate`` found surviving that tests/unit/test_mut_compare.py left open
(docs/mutation-survivors.md)."""

from __future__ import annotations

import numpy as np
import pytest

from tritonfleet.agent.qa.compare import Worst, check_output, check_response
from tritonfleet.agent.qa.schema import EXACT, Compare

CLOSE = Compare("close", atol=0.1)
TOP1 = Compare("topk", k=1)


def test_a_missing_or_misshapen_output_fails():
    want = np.zeros((2, 3), np.float32)
    missing = check_output("O", None, want, EXACT)
    assert (missing.ok, missing.worst, missing.message) == (False, None, "O: not in the response")
    shape = check_output("O", np.zeros((3, 2), np.float32), want, EXACT)
    assert (shape.ok, shape.worst, shape.message) == (False, None, "O: shape [3, 2], expected [2, 3]")


def test_an_absolute_error_against_zero_has_no_rel_in_the_message():
    c = check_output("O", np.array([1.0, 0.5]), np.array([0.0, 0.5]), CLOSE)
    assert not c.ok and (c.worst.abs, c.worst.rel) == (1.0, None)
    assert c.message == "O[0]: got 1, expected 0 (abs 1) beyond atol=0.1, rtol=0"


def test_numbers_against_bytes_compare_as_bytes():
    c = check_output("O", np.array([1, 2]), np.array([b"a", b"b"], dtype=np.object_), EXACT)
    assert not c.ok and c.message == "O[0]: got 1, expected b'a'"
    assert (c.worst.index, c.worst.abs, c.worst.rel, c.worst.failed) == ([0], None, None, True)


def test_two_dimensional_bytes_compare_element_by_element():
    want = np.array([[b"a", b"b"], [b"c", b"d"]], dtype=np.object_)
    ok = check_output("T", want.copy(), want, EXACT)
    assert ok.ok and ok.message is None and ok.worst.index == [0, 0]
    got = np.array([[b"a", b"b"], [b"x", b"d"]], dtype=np.object_)
    bad = check_output("T", got, want, EXACT)
    assert not bad.ok and bad.message == "T[1, 0]: got b'x', expected b'c'"
    assert (bad.worst.index, bad.worst.got, bad.worst.expected) == ([1, 0], b"x", b"c")


def test_exact_nan_against_a_number_fails():
    c = check_output("O", np.array([1.0, np.nan]), np.array([1.0, 1.0]), EXACT)
    assert not c.ok and c.message == "O[1]: got nan, expected 1"
    assert (c.worst.index, c.worst.failed) == ([1], True)
    both = check_output("O", np.array([1.0, np.nan]), np.array([1.0, np.nan]), EXACT)
    assert both.ok


def test_close_against_infinity_with_a_large_rtol_still_fails():
    c = check_output("O", np.array([5.0, 1.0]), np.array([np.inf, 1.0]), Compare("close", rtol=2))
    assert not c.ok and c.message == "O[0]: got 5, expected inf beyond atol=0, rtol=2"
    same = check_output("O", np.array([np.inf, 1.0]), np.array([np.inf, 1.0]), Compare("close", rtol=2))
    assert same.ok


def test_a_failing_close_check_marks_its_worst_failed():
    c = check_output("O", np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5, 3.05]), CLOSE)
    assert not c.ok and c.worst.index == [1] and c.worst.failed is True
    assert c.worst.score == pytest.approx(0.4)
    assert c.worst.key() == (True, c.worst.score)


def test_a_passing_close_check_reports_the_largest_error():
    c = check_output("O", np.array([1.0, 2.05, 3.01]), np.array([1.0, 2.0, 3.0]), CLOSE)
    assert c.ok and c.worst.index == [1] and c.worst.failed is False
    assert (c.worst.abs, c.worst.score) == (pytest.approx(0.05), pytest.approx(0.05))


@pytest.mark.parametrize("got", [np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(6, dtype=np.uint8).reshape(2, 3)])
def test_equal_integers_of_another_type_give_the_zero_worst_of_the_byte_equal_path(got):
    # drive's fast path answers byte-equal responses with Worst(first output, [0] * ndim, 0.0, 0.0); equal values
    # in another integer type (bytes differ) report the same, without element values
    c = check_output("I", got, np.arange(6, dtype=np.int32).reshape(2, 3), EXACT)
    assert c.ok and c.message is None and c.worst == Worst("I", [0, 0], 0.0, 0.0)
    flags = np.array([True, False])
    assert check_output("B", flags.copy(), flags, EXACT).worst == Worst("B", [0], 0.0, 0.0)


def test_close_on_equal_integers_reports_the_element():
    a = np.array([[1, 2], [4, 3]], np.int32)
    c = check_output("S", a, a.copy(), Compare("close", atol=0.5))
    assert c.ok and (c.worst.index, c.worst.abs, c.worst.rel, c.worst.got, c.worst.expected) == ([0, 0], 0.0, 0.0, 1, 1)


def test_top_k_of_a_one_dimensional_output_with_k_equal_to_the_classes():
    c = check_output("S", np.array([0.1, 0.9]), np.array([0.2, 0.8]), Compare("topk", k=2))
    assert c.ok and c.message is None


def test_top_k_of_equal_integers_still_checks_the_classes():
    a = np.array([[1, 2], [4, 3]], np.int32)
    c = check_output("S", a, a.copy(), Compare("topk", k=3))
    assert (c.ok, c.worst, c.message) == (False, None, "S: top-3 of an output with 2 classes")
    ok = check_output("S", a, a.copy(), Compare("topk", k=1))
    assert ok.ok and ok.message is None and ok.worst.failed is False


def test_a_passing_top_k_reports_the_largest_error_with_its_score():
    c = check_output("S", np.array([[0.1, 0.2, 0.7], [0.0, 0.1, 0.9]]), np.array([[0.1, 0.2, 0.7], [0.1, 0.3, 0.6]]),
                     TOP1)
    assert c.ok and c.worst.index == [1, 2] and c.worst.failed is False
    assert c.worst.abs == pytest.approx(0.3) and c.worst.score == pytest.approx(0.3)
    assert isinstance(c.worst.score, float)


def test_top_k_fails_on_the_row_with_a_nan():
    got = np.array([[0.1, 0.9], [np.nan, 0.8]])
    c = check_output("S", got, np.array([[0.2, 0.8], [0.3, 0.7]]), TOP1)
    assert not c.ok
    assert c.message == "S[1]: top-1 labels [1], expected [1] (label 1: got 0.8, expected 0.7)"
    assert (c.worst.index, c.worst.failed, c.worst.score) == ([1, 1], True, float("inf"))
    assert c.worst.abs == pytest.approx(0.1) and c.worst.rel == pytest.approx(0.1 / 0.7)


def test_top_k_names_the_label_that_is_not_expected():
    # top-2 of got is {0, 1}; label 0 is among the expected top 2, label 1 is not
    c = check_output("S", np.array([0.5, 0.4, 0.1]), np.array([0.5, 0.1, 0.4]), Compare("topk", k=2))
    assert not c.ok
    assert c.message == "S[]: top-2 labels [0, 1], expected [0, 2] (label 1: got 0.4, expected 0.1)"
    assert c.worst.index == [1]


# Ties among more than 16 classes: numpy's default argsort is not stable there; the lowest label wins.
TIES = [1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0, 2.0, 2.0, 1.0, 2.0, 0.0, 1.0, 2.0]


def test_ties_in_the_got_top_k_take_the_lowest_label():
    got = np.array([TIES])
    want = np.zeros((1, len(TIES)))
    want[0, 2] = 1.0
    c = check_output("S", got, want, TOP1)
    assert c.ok and c.message is None


def test_ties_in_the_expected_top_k_name_the_lowest_label():
    got = np.zeros(len(TIES))
    got[14] = 1.0
    c = check_output("S", got, np.array(TIES), TOP1)
    assert not c.ok and c.message == "S[]: top-1 labels [14], expected [2] (label 14: got 1, expected 0)"


def test_check_response_keeps_the_worst_failure_message():
    want = {"A": np.array([1.0, 2.0]), "B": np.array([1.0, 2.0])}
    cmp = {"A": CLOSE, "B": CLOSE}
    r = check_response({"A": np.array([1.0, 3.0]), "B": np.array([1.0, 2.5])}, want, cmp)
    assert not r.ok and r.message.startswith("A[1]: got 3") and r.worst.output == "A"
    # a missing output outranks any mismatch
    r = check_response({"A": np.array([1.0, 3.0])}, want, cmp)
    assert not r.ok and r.message == "B: not in the response" and r.worst.output == "A"
    # equal ranks: the first one stays
    r = check_response({}, want, cmp)
    assert r.message == "A: not in the response" and r.worst is None


def test_check_response_keeps_the_first_of_equally_good_worsts():
    want = {"A": np.array([1, 2], np.int32), "B": np.array([3, 4], np.int32)}
    r = check_response({"A": want["A"].copy(), "B": want["B"].copy()}, want, {"A": EXACT, "B": EXACT})
    assert r.ok and r.worst.output == "A"


@pytest.mark.parametrize("cmp", [Compare(kind="close", atol=0.1), Compare(kind="exact")], ids=["close", "exact"])
def test_a_scalar_output_is_compared_not_a_crash(cmp):
    """A 0-d output (an unbatched model's scalar, shape []): numpy's abs() gives a scalar there, which
    `_diff` could not mask (TypeError: item assignment) before it kept an array (found by mutation review)."""
    bad = check_output("S", np.array(0.5), np.array(0.3), cmp)
    assert bad.ok is False and bad.message.startswith("S[]: got 0.5, expected 0.3 (abs 0.2, rel 0.667)")
    assert check_output("S", np.array(0.3), np.array(0.3), cmp).ok is True
    assert check_output("S", np.array(np.nan), np.array(np.nan), cmp).ok is True
    assert check_output("S", np.array(np.nan), np.array(1.0), cmp).ok is False


def test_top_k_of_a_scalar_output_fails_saying_it_has_no_classes():
    """Reachable since scalar outputs no longer crash `_diff` (the two `_topk` survivors that were open)."""
    check = check_output("S", np.array(0.5), np.array(0.5), Compare(kind="topk", k=1))
    assert (check.ok, check.worst, check.message) == (False, None, "S: top-1 of an output with 0 classes")
