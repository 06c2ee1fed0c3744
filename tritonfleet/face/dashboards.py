"""The Grafana dashboards in ``dashboards/`` as data: their PromQL, made runnable on a plain Prometheus.

* :func:`load` reads a dashboard JSON file; :func:`panels` walks its panels, the ones nested in
  collapsed rows included; :func:`expressions` lists ``(panel title, refId, expr)`` for every query.
* :func:`instantiate` replaces the Grafana variables in an expression the way Grafana's Prometheus
  data source does (``$fleet``/``${host}``/``[[host]]`` as an escaped regex alternation for ``=~``,
  "All" as ``.*``, ``$__rate_interval``, ``$__interval``, ``$__range`` ...), so the result can go to
  Prometheus' ``/api/v1/query`` as is.
* :func:`check` sends every expression (and every variable's ``label_values`` query) of the given
  dashboards to a Prometheus and returns one line per expression that errors or returns nothing,
  naming the file and the panel.

Standard library only.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonfleet.promql import regex_escape

ALL = "$__all"  # Grafana's value for "All"; also what None means in a variables mapping
ALL_VALUE = ".*"  # the dashboards' allValue: "All" matches every label value

# Built-in variables, as Grafana would set them for a 1 hour range at a 15s scrape interval. A caller
# overrides any of them (e.g. {"__rate_interval": "10s"} against a Prometheus scraping every second).
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}

# $name | [[name]] | [[name:format]] | ${name} | ${name:format} (Grafana's own variable syntax)
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?::([^}]+))?\}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<expr>.*\S)\s*,\s*)?(?P<label>\w+)\s*\)\s*$", re.S)


class PrometheusError(RuntimeError):
    """Prometheus refused a query (bad PromQL, timeout) or could not be reached."""


# ----------------------------------------------------------------------------------------- dashboards


def load(path: str | Path) -> dict[str, Any]:
    """The dashboard in a JSON file (Grafana's export format, as in ``dashboards/``)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("panels"), list):
        raise ValueError(f"{path}: not a Grafana dashboard (no panels list)")
    return data


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, depth first: rows, then the panels a (collapsed) row holds in its own ``panels``."""

    def walk(items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from walk(panel.get("panels") or [])

    yield from walk(dashboard.get("panels") or [])


def expressions(dashboard: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(panel title, refId, expr)`` of every query of every panel, nested ones included."""
    out = []
    for panel in panels(dashboard):
        for target in panel.get("targets") or []:
            expr = target.get("expr")
            if isinstance(expr, str) and expr.strip():
                out.append((panel.get("title", ""), target.get("refId", ""), expr))
    return out


def variables(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's template variables (``templating.list``)."""
    return list((dashboard.get("templating") or {}).get("list") or [])


def variable_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(variable name, PromQL)`` for every ``label_values(...)`` query variable: the PromQL returns
    one series per value the variable offers (``group by (label) (expr)``)."""
    out = []
    for var in variables(dashboard):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        text = query.get("query", "") if isinstance(query, dict) else (query or var.get("definition", ""))
        match = _LABEL_VALUES.match(text or "")
        if not match:
            continue
        label = match["label"]
        expr = match["expr"] or "{" + label + '!=""}'
        out.append((var["name"], f"group by ({label}) ({expr})"))
    return out


# ----------------------------------------------------------------------------------------- variables


def _seconds(duration: str) -> float:
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _builtins(given: Mapping[str, Any]) -> dict[str, str]:
    values = {**BUILTINS, **{k: str(v) for k, v in given.items() if k in BUILTINS}}
    out = dict(values)
    rng, interval = _seconds(values["__range"]), _seconds(values["__interval"])
    out["__range_s"] = str(int(rng))
    out["__range_ms"] = str(int(rng * 1000))
    out["__interval_ms"] = str(int(interval * 1000))
    return out


def _format(name: str, value: Any, fmt: str | None) -> str:
    is_all = value is None or value == ALL or (isinstance(value, (list, tuple)) and ALL in value)
    values = [value] if isinstance(value, str) else list(value or [])
    fmt = (fmt or "regex").lower()
    if fmt == "regex":
        if is_all:
            return ALL_VALUE
        if not values:
            raise ValueError(f"variable {name!r} has no value")
        escaped = [regex_escape(str(v)) for v in values]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
    if is_all:
        return "All" if fmt == "text" else ALL_VALUE
    if fmt == "pipe":
        return "|".join(str(v) for v in values)
    if fmt in ("csv", "raw"):
        return ",".join(str(v) for v in values)
    if fmt == "text":
        return " + ".join(str(v) for v in values)
    raise ValueError(f"variable {name!r}: unsupported format {fmt!r}")


def instantiate(expr: str, variables: Mapping[str, Any] | None = None, *, strict: bool = True) -> str:
    """``expr`` with its Grafana variables replaced, ready for a plain Prometheus.

    ``variables`` maps a name to a value: a string (one value), a list of strings (several values of
    a multi-value variable) or ``None``/``"$__all"`` ("All"). Values are meant for ``=~``: each is
    regex-escaped and several become ``(a|b)``; "All" becomes ``.*``. ``${name:pipe}``, ``:csv``,
    ``:raw`` and ``:text`` change that as in Grafana. Built-ins (``$__rate_interval``, ``$__interval``,
    ``$__interval_ms``, ``$__range``, ``$__range_s``, ``$__range_ms``) come from :data:`BUILTINS`
    unless ``variables`` sets them (``__range_s``/``_ms`` and ``__interval_ms`` follow ``__range``
    and ``__interval``).

    A variable that is neither given nor built in raises ``KeyError`` when ``strict`` (numeric ones
    such as label_replace's ``$1`` are never variables); otherwise it is left as it is, as Grafana
    does."""
    given = dict(variables or {})
    builtins = _builtins(given)

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        fmt = match.group(3) or match.group(5)
        if name.isdigit():
            return match.group(0)
        if name in builtins:
            return builtins[name]
        if name in given:
            return _format(name, given[name], fmt)
        if strict:
            raise KeyError(f"no value for the variable ${name} in {expr!r}")
        return match.group(0)

    return _VARIABLE.sub(replace, expr)


def used_variables(expr: str) -> set[str]:
    """The names of the Grafana variables ``expr`` refers to (built-ins included, ``$1`` and the like not)."""
    return {n for m in _VARIABLE.finditer(expr) if not (n := m.group(1) or m.group(2) or m.group(4)).isdigit()}


def all_values(dashboard: Mapping[str, Any]) -> dict[str, Any]:
    """Every query/custom variable of the dashboard set to "All" (``None``)."""
    return {v["name"]: None for v in variables(dashboard) if v.get("type") in ("query", "custom", "textbox")}


# ----------------------------------------------------------------------------------------- Prometheus


def _get(prom_url: str, api: str, params: Mapping[str, Any], timeout: float) -> Any:
    url = prom_url.rstrip("/") + api + "?" + urllib.parse.urlencode(
        {k: v for k, v in params.items() if v is not None})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 400/422/503 carry Prometheus' own error
        try:
            body = json.loads(exc.read())
        except ValueError:
            raise PrometheusError(f"HTTP {exc.code} from {api}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PrometheusError(f"cannot query {prom_url}: {exc}") from exc
    if body.get("status") != "success":
        raise PrometheusError(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
    return body["data"]


def query(prom_url: str, expr: str, at: float | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """``/api/v1/query``: the ``data`` object (``resultType``, ``result``)."""
    return _get(prom_url, "/api/v1/query", {"query": expr, "time": at, "timeout": f"{timeout:g}s"}, timeout + 5)


def query_range(prom_url: str, expr: str, start: float, end: float, step: float,
                timeout: float = 20.0) -> dict[str, Any]:
    """``/api/v1/query_range``: the ``data`` object (``resultType`` matrix, ``result``)."""
    return _get(prom_url, "/api/v1/query_range",
                {"query": expr, "start": start, "end": end, "step": f"{step:g}", "timeout": f"{timeout:g}s"},
                timeout + 5)


def _emptiness(data: Mapping[str, Any]) -> str | None:
    """Why a query result shows nothing on a panel (``None``: it shows something)."""
    kind = data.get("resultType")
    result: Any = data.get("result")
    if kind in ("scalar", "string"):
        return None if kind == "string" or _finite(result[1]) else "a NaN scalar"
    if not result:
        return "empty result"
    values = [s["value"][1] for s in result] if kind == "vector" else [v[1] for s in result for v in s["values"]]
    if not any(_finite(v) for v in values):
        return f"only NaN/Inf values ({len(result)} series)"
    return None


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def check(prom_url: str, paths: Sequence[str | Path], variables: Mapping[str, Any] | None = None, *,
          at: float | None = None, timeout: float = 10.0, nan_is_empty: bool = True,
          allow_empty: Collection[str] = ()) -> list[str]:
    """Problems with the dashboards in ``paths`` on the Prometheus at ``prom_url``: one line per
    expression (and per ``label_values`` variable query) that errors or returns nothing, naming the
    dashboard file, the panel title and refId. An empty list: every panel has data.

    ``variables`` overrides the defaults: every template variable "All", built-ins from
    :data:`BUILTINS` (pass ``{"__rate_interval": "10s"}`` for a fast scrape interval, ``{"host":
    ["a", "b"]}`` to look at some hosts only). ``at`` is the evaluation time (default: now). A result
    whose values are all NaN (0/0 on an idle fleet) counts as empty unless ``nan_is_empty`` is
    false. ``allow_empty``: panel titles whose queries may return nothing where this Prometheus scrapes
    (e.g. a metric a stand-in exporter never sets); their errors are still problems."""
    problems = []
    for path in paths:
        try:
            dashboard = load(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: cannot load: {exc}")
            continue
        values = {**all_values(dashboard), **(variables or {})}
        queries = [(f"variable {name!r}", "", expr) for name, expr in variable_queries(dashboard)]
        queries += [(f"panel {title!r} ({ref})", title, expr) for title, ref, expr in expressions(dashboard)]
        for where, title, expr in queries:
            try:
                promql = instantiate(expr, values)
            except (KeyError, ValueError) as exc:
                problems.append(f"{path}: {where}: {exc}")
                continue
            try:
                data = query(prom_url, promql, at=at, timeout=timeout)
            except PrometheusError as exc:
                problems.append(f"{path}: {where}: {exc}: {promql}")
                continue
            why = _emptiness(data)
            if why and (nan_is_empty or why == "empty result") and not (title and title in allow_empty):
                problems.append(f"{path}: {where}: {why}: {promql}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tritonfleet.face.dashboards --prometheus URL [DASHBOARD.json ...]``: print the
    problems :func:`check` finds, exit 1 if there are any."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tritonfleet.face.dashboards", description=main.__doc__)
    parser.add_argument("--prometheus", required=True, metavar="URL", help="e.g. http://127.0.0.1:9090")
    parser.add_argument("--rate-interval", default=BUILTINS["__rate_interval"],
                        help="value for $__rate_interval (at least 4 scrape intervals)")
    parser.add_argument("--range", default=BUILTINS["__range"], help="value for $__range")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=V1[,V2]",
                        help="a template variable's value(s) (default: All)")
    parser.add_argument("--allow-empty", action="append", default=[], metavar="PANEL TITLE",
                        help="a panel that may have no data here (repeatable)")
    parser.add_argument("paths", nargs="*", help="dashboard files (default: dashboards/*.json)")
    args = parser.parse_args(argv)
    given: dict[str, Any] = {"__rate_interval": args.rate_interval, "__range": args.range}
    for item in args.var:
        name, _, value = item.partition("=")
        given[name] = value.split(",") if value else None
    paths = args.paths or sorted(str(p) for p in Path("dashboards").glob("*.json"))
    problems = check(args.prometheus, paths, given, allow_empty=args.allow_empty)
    for line in problems:
        print(line)
    print(f"{len(problems)} problem(s) in {len(paths)} dashboard(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
