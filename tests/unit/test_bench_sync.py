"""The pure helpers of bench/sync.py: medians, ratios, moto's request log, the verdicts, the tables."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("bench_sync", Path(__file__).resolve().parents[2] / "bench" / "sync.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

LOG = """\
127.0.0.1 - - [26/Nov/2026 08:05:43] "HEAD /bench-models HTTP/1.1" 200 -
127.0.0.1 - - [26/Nov/2026 08:05:43] "GET /bench-models?list-type=2&prefix=repo%2F&encoding-type=url HTTP/1.1" 200 -
127.0.0.1 - - [26/Nov/2026 08:05:43] "GET /bench-models/?list-type=2&prefix=repo/ HTTP/1.1" 200 -
127.0.0.1 - - [26/Nov/2026 08:05:43] "HEAD /bench-models/repo/a.bin HTTP/1.1" 200 -
127.0.0.1 - - [26/Nov/2026 08:05:43] "\x1b[35m\x1b[1mGET /bench-models/repo/a.bin HTTP/1.1\x1b[0m" 206 -
127.0.0.1 - - [26/Nov/2026 08:05:43] "GET /bench-models/repo/b.bin?partNumber=1 HTTP/1.1" 200 -
127.0.0.1 - - [26/Nov/2026 08:05:43] "GET /other-bucket/repo/a.bin HTTP/1.1" 200 -
 * Running on http://127.0.0.1:5000
"""


def row(full: float, noop: float, gets: int = 0, agent_gets: int = 0) -> dict:
    return {"full": full, "noop": noop, "agent_noop_gets": agent_gets,
            "noop_requests": {"GET": gets, "HEAD": 0, "LIST": 1, "other": 0}}


def test_median_and_ratio() -> None:
    assert bench.median([3.0, 1.0, 2.0]) == 2.0
    assert bench.median([1.0, 2.0]) == 1.5
    with pytest.raises(ValueError):
        bench.median([])
    assert bench.ratio(3.0, 2.0) == 1.5
    assert bench.ratio(1.0, 0.0) is None
    assert bench.fmt_ratio(None) == "-"
    assert bench.fmt_ratio(1.0 / 3) == "0.33x"


def test_object_requests_reads_werkzeug_lines_coloured_or_not() -> None:
    # the coloured (206) GET counts; a GET on another bucket and the bucket HEAD are "other"
    assert bench.object_requests(LOG) == {"GET": 2, "HEAD": 1, "LIST": 2, "other": 2}
    assert bench.object_requests("") == {"GET": 0, "HEAD": 0, "LIST": 0, "other": 0}


def test_verdicts_pass_and_fail_at_the_bounds() -> None:
    ok = bench.verdicts({"tritonfleet": row(10.0, 1.2), "awscli": row(20.0, 2.0), "s5cmd": row(10.0, 1.0)})
    assert [passed for _, passed in ok] == [True, True, True]
    bad = bench.verdicts({"tritonfleet": row(10.1, 1.21, gets=1), "awscli": row(20.0, 2.0),
                          "s5cmd": row(10.0, 1.0)})
    assert [passed for _, passed in bad] == [False, False, False]
    only_agent = bench.verdicts({"tritonfleet": row(1.0, 1.0, agent_gets=2), "s5cmd": row(1.0, 1.0)})
    assert only_agent[2][1] is False and "agent --json: 2" in only_agent[2][0]


def test_tables_have_one_aligned_line_per_tool() -> None:
    rows = {"tritonfleet": row(21.0, 0.4), "awscli": row(19.5, 0.5), "s5cmd": row(4.8, 0.1)}
    text = bench.table(rows).splitlines()
    assert len(text) == 4 and len({len(line) for line in text}) == 1
    assert text[1].split()[:5] == ["tritonfleet", "21.00", "0.40", "4.38x", "4.00x"]
    md = bench.table(rows, markdown=True).splitlines()
    assert md[0].startswith("| tool |") and md[1].startswith("|---|---:")
    assert md[4] == "| s5cmd | 4.80 | 0.10 | 1.00x | 1.00x | 0.25x | 0.20x | 0 | 0 | 1 |"


def test_check_tree_wants_the_exact_paths_sizes_and_sampled_md5(tmp_path: Path) -> None:
    import hashlib

    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.pt").write_bytes(b"abc")
    (tmp_path / bench.MANIFEST).write_text("{}")
    expected = {"m/1/model.pt": (3, hashlib.md5(b"abc").hexdigest())}
    bench.check_tree("tritonfleet", tmp_path, expected)  # the manifest is the agent's own
    with pytest.raises(bench.BenchError, match="tree differs"):
        bench.check_tree("s5cmd", tmp_path, expected)
    (tmp_path / bench.MANIFEST).unlink()
    (tmp_path / "m" / "1" / "model.pt").write_bytes(b"abd")
    with pytest.raises(bench.BenchError, match="md5"):
        bench.check_tree("s5cmd", tmp_path, expected)
