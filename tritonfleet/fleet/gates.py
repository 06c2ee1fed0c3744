"""Metric gates of a traffic canary: after the bake, Prometheus compares the canary hosts' Triton servers with the
other hosts' over the bake window, with the counters and labels the dashboards use (``dashboards/``: job
``triton``, one series per ``host`` / ``server`` / ``model``):

- error ratio: ``increase(nv_inference_request_failure[w]) / (increase(nv_inference_request_success[w]) +
  increase(nv_inference_request_failure[w]))``, summed over each group; a breach when the canary's exceeds
  ``max_error_ratio`` (an absolute ratio: 0.01 is 1 % of its requests);
- latency per request: ``increase(nv_inference_request_duration_us[w]) / increase(nv_inference_request_success[w])``
  (the dashboards' "latency per request", from the duration and count counters); a breach when the canary's
  exceeds ``max_latency_ratio`` times the others'.

No request in the window on either side is a breach with that reason (nothing was compared), never a pass.
:func:`evaluate` returns a :class:`Verdict` naming the metric, both values, the limit and the window.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field

from tritonfleet import promql

logger = logging.getLogger(__name__)

JOB = "triton"


class GateError(Exception):
    """Prometheus could not be asked (one line)."""


@dataclass(frozen=True)
class Measure:
    metric: str  # "requests", "error ratio", "latency per request (ms)"
    canary: float | None
    rest: float | None
    limit: float | None  # the canary's limit (absolute for the error ratio, max_latency_ratio x rest for latency)
    breach: bool
    why: str  # one line


@dataclass(frozen=True)
class Verdict:
    ok: bool
    window: str  # "120s ending 2026-11-27T03:40:00Z"
    measures: list[Measure] = field(default_factory=list)

    @property
    def breach(self) -> Measure | None:
        return next((m for m in self.measures if m.breach), None)

    def line(self) -> str:
        """One line: the breach (metric, values, window), or every measure on a pass."""
        if self.breach:
            return f"{self.breach.why} over {self.window}"
        return "passed: " + "; ".join(m.why for m in self.measures) + f" over {self.window}"

    def to_dict(self) -> dict:
        return {"ok": self.ok, "window": self.window, "line": self.line(), "measures": [asdict(m) for m in self.measures]}


def host_matcher(hosts: list[str]) -> str:
    """The body of a PromQL ``"..."`` string whose regex matches exactly these ``host`` label values."""
    return promql.alternation(hosts)


class Prometheus:
    def __init__(self, url: str, timeout: float = 10) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout

    def scalar(self, expr: str, at: float) -> float | None:
        """The value of an instant query that yields one series (``sum(...)``); None when it yields none."""
        query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=self.timeout) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:  # Prometheus says why in a JSON body (bad_data: a query it refused)
            try:
                body = json.loads(exc.read())
            except ValueError:
                raise GateError(f"prometheus {self.url}: HTTP {exc.code} {exc.reason}") from None
        except Exception as exc:  # noqa: BLE001 - any failure to ask is one line
            raise GateError(f"prometheus {self.url}: {type(exc).__name__}: {exc}") from None
        if body.get("status") != "success":
            raise GateError(f"prometheus {self.url}: {body.get('errorType')}: {body.get('error')}")
        result = body.get("data", {}).get("result", [])
        logger.debug("prometheus: %s -> %s", expr, result)
        return float(result[0]["value"][1]) if result else None


def _sum(metric: str, hosts: str, window: int) -> str:
    return f'sum(increase({metric}{{job="{JOB}", host=~"{hosts}"}}[{window}s]))'


def evaluate(url: str, canary: list[str], rest: list[str], window: float, *, max_error_ratio: float,
             max_latency_ratio: float, end: float | None = None, timeout: float = 10) -> Verdict:
    """Compare the canary hosts' Triton servers with the rest's over ``window`` seconds ending at ``end`` (now)."""
    prom = Prometheus(url, timeout)
    at = time.time() if end is None else end
    w = max(1, int(round(window)))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    label = f"{w}s ending {stamp}"
    counts: dict[str, dict[str, float]] = {}
    for side, hosts in (("canary", canary), ("rest", rest)):
        m = host_matcher(hosts)
        counts[side] = {k: prom.scalar(_sum(f"nv_inference_request_{k}", m, w), at) or 0.0
                        for k in ("success", "failure", "duration_us")}
    c, r = counts["canary"], counts["rest"]
    creq, rreq = c["success"] + c["failure"], r["success"] + r["failure"]
    measures = []
    if creq <= 0 or rreq <= 0:
        who = " and ".join(x for x, n in (("canary", creq), ("other hosts", rreq)) if n <= 0)
        measures.append(Measure("requests", creq, rreq, None, True,
                                f"requests: none on the {who} (canary {creq:g}, others {rreq:g}): nothing to compare"))
        return Verdict(False, label, measures)
    measures.append(Measure("requests", creq, rreq, None, False, f"requests: canary {creq:g}, others {rreq:g}"))
    cerr, rerr = c["failure"] / creq, r["failure"] / rreq
    bad = cerr > max_error_ratio
    measures.append(Measure("error ratio", cerr, rerr, max_error_ratio, bad,
                            f"error ratio: canary {cerr:.4g} {'>' if bad else '<='} max {max_error_ratio:g} "
                            f"(others {rerr:.4g})"))
    if c["success"] <= 0 or r["success"] <= 0:
        who = "canary" if c["success"] <= 0 else "other hosts"
        measures.append(Measure("latency per request (ms)", None, None, None, True,
                                f"latency per request: no successful request on the {who}: nothing to compare"))
    else:
        clat, rlat = c["duration_us"] / c["success"] / 1000, r["duration_us"] / r["success"] / 1000
        limit = max_latency_ratio * rlat
        bad = clat > limit
        measures.append(Measure("latency per request (ms)", clat, rlat, limit, bad,
                                f"latency per request: canary {clat:.4g} ms {'>' if bad else '<='} "
                                f"{max_latency_ratio:g} x others {rlat:.4g} ms = {limit:.4g} ms"))
    return Verdict(not any(m.breach for m in measures), label, measures)
