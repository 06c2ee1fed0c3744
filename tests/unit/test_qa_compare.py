"""QA comparisons: exact, numpy-allclose tolerances and top-k label agreement, and the worst element."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from tritonfleet.agent.qa.compare import check_output, check_response
from tritonfleet.agent.qa.schema import EXACT, Compare, Suite, parse_compare


def close(atol: float = 0.0, rtol: float = 0.0) -> Compare:
    return Compare("close", atol=atol, rtol=rtol)


def test_exact_names_the_element_got_and_expected():
    want = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.int64)
    got = want.copy()
    got[1, 2] = 10
    c = check_output("OUT", got, want, EXACT)
    assert not c.ok
    assert (c.worst.output, c.worst.index, c.worst.abs, c.worst.rel) == ("OUT", [1, 2], 3.0, pytest.approx(3 / 7))
    assert c.message == "OUT[1, 2]: got 10, expected 7 (abs 3, rel 0.429)"
    ok = check_output("OUT", want.copy(), want, EXACT)
    assert ok.ok and ok.worst.abs == 0.0


def test_exact_on_huge_int64_values_float64_cannot_tell_apart():
    want = np.array([2**62, 2**62], dtype=np.int64)
    got = want + np.array([0, 1], dtype=np.int64)
    c = check_output("OUT", got, want, EXACT)
    assert not c.ok and c.worst.index == [1]


def test_fp32_perturbed_by_1e_3_fails_atol_1e_4_and_passes_atol_1e_2():
    rng = np.random.default_rng(0)
    want = rng.standard_normal((3, 8)).astype(np.float32)
    got = (want + np.float32(1e-3)).astype(np.float32)
    tight = check_output("Y", got, want, close(atol=1e-4))
    assert not tight.ok and "beyond atol=0.0001, rtol=0" in tight.message
    assert tight.worst.abs == pytest.approx(1e-3, rel=0.05)
    loose = check_output("Y", got, want, close(atol=1e-2))
    assert loose.ok and loose.worst.abs == pytest.approx(1e-3, rel=0.05) and not loose.worst.failed


def test_rtol_follows_numpy_allclose():
    rng = np.random.default_rng(1)
    for _ in range(50):
        want = rng.standard_normal(16) * 10.0 ** rng.integers(-3, 3)
        got = want * (1 + rng.standard_normal(16) * 1e-3)
        atol, rtol = float(rng.choice([0, 1e-6, 1e-3])), float(rng.choice([0, 1e-4, 1e-3, 1e-2]))
        assert check_output("Y", got, want, close(atol, rtol)).ok == np.allclose(got, want, rtol=rtol, atol=atol)


def test_the_worst_element_is_the_one_beyond_the_tolerance_by_most():
    want = np.array([1000.0, 0.001, 1.0])
    got = np.array([1000.5, 0.011, 1.0])  # abs errors 0.5 and 0.01; rtol 1e-3 allows 1.0 and 1e-6
    c = check_output("Y", got, want, close(rtol=1e-3))
    assert not c.ok and c.worst.index == [1] and c.worst.rel == pytest.approx(10.0)


def test_nan_matches_nan_only_and_zero_expected_has_no_relative_error():
    want = np.array([np.nan, 0.0, 1.0], dtype=np.float32)
    assert check_output("Y", want.copy(), want, EXACT).ok
    assert check_output("Y", want.copy(), want, close(atol=1e-3)).ok
    got = np.array([np.nan, 0.5, 1.0], dtype=np.float32)
    c = check_output("Y", got, want, EXACT)
    assert not c.ok and c.worst.index == [1] and c.worst.rel is None and c.worst.abs == 0.5
    c = check_output("Y", np.array([1.0, 0.0, 1.0], dtype=np.float32), want, close(atol=10))
    assert not c.ok and c.worst.index == [0] and c.worst.abs is None  # NaN expected, a number came


def test_shape_and_missing_outputs_fail():
    want = np.zeros((2, 4), dtype=np.int64)
    assert check_output("O", np.zeros((2, 3), dtype=np.int64), want, EXACT).message == \
        "O: shape [2, 3], expected [2, 4]"
    assert check_output("O", None, want, EXACT).message == "O: not in the response"


def test_bytes_outputs_compare_exactly():
    want = np.array([b"cat", b"dog"], dtype=np.object_)
    assert check_output("L", np.array([b"cat", b"dog"], dtype=np.object_), want, EXACT).ok
    c = check_output("L", np.array([b"cat", b"cow"], dtype=np.object_), want, EXACT)
    assert not c.ok and c.worst.index == [1] and "got b'cow', expected b'dog'" in c.message


SCORES = np.array([[0, 1, 9, 2, 3, 8, 4, 5, 6, 7],
                   [0, 9, 7, 1, 2, 8, 3, 4, 5, 6]], dtype=np.float32)


def swapped(scores: np.ndarray, a: int = 2, b: int = 5) -> np.ndarray:
    out = scores.copy()
    out[:, [a, b]] = out[:, [b, a]]
    return out


def test_topk_catches_a_swapped_label():
    c = check_output("S", swapped(SCORES), SCORES, Compare("topk", k=1))
    assert not c.ok
    assert c.message.startswith("S[0]: top-1 labels [5], expected [2] (label 5: got 9, expected 8)")
    assert c.worst.index == [0, 5]


def test_topk_ignores_order_within_the_top_k_and_scores_outside_it():
    assert check_output("S", swapped(SCORES), SCORES, Compare("topk", k=3)).ok  # {2, 5, 9} either way
    noisy = SCORES + np.float32(0.25)
    assert check_output("S", noisy, SCORES, Compare("topk", k=2)).ok
    assert not check_output("S", noisy, SCORES, EXACT).ok


def test_topk_accepts_either_label_of_a_tie_in_the_expected_scores():
    want = np.array([[1.0, 5.0, 5.0, 0.0]])
    assert check_output("S", np.array([[1.0, 4.0, 6.0, 0.0]]), want, Compare("topk", k=1)).ok
    assert check_output("S", np.array([[1.0, 6.0, 4.0, 0.0]]), want, Compare("topk", k=1)).ok
    assert not check_output("S", np.array([[7.0, 6.0, 4.0, 0.0]]), want, Compare("topk", k=1)).ok


def test_a_response_reports_the_worst_failing_output():
    want = {"A": np.array([1.0, 2.0]), "B": np.array([1.0, 2.0])}
    got = {"A": np.array([1.0, 2.5]), "B": np.array([1.0, 7.0])}
    c = check_response(got, want, {"A": EXACT, "B": EXACT})
    assert not c.ok and c.worst.output == "B" and c.message.startswith("B[1]: got 7")


@pytest.mark.parametrize("value,expected", [
    ("exact", EXACT), ({"atol": 1e-4}, close(atol=1e-4)), ({"rtol": 0.01, "atol": 0}, close(rtol=0.01)),
    ({"topk": 5}, Compare("topk", k=5)),
])
def test_comparison_spellings(value, expected):
    assert parse_compare(value) == expected


@pytest.mark.parametrize("value", ["close", {"atol": -1}, {"atol": float("nan")}, {"topk": 0}, {"topk": 1, "atol": 1},
                                   {}, {"atol": True}, 3])
def test_unknown_or_bad_comparisons_are_rejected(value):
    with pytest.raises(ValidationError):
        Suite.model_validate({"compare": value, "cases": [{"name": "a", "data": "x.json"}]})
