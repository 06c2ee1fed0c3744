"""A Prometheus ``query_range`` result as a small SVG line chart (for the README), standard library only.

One line per series, a legend, a time axis (UTC) and a value axis with round ticks. Gaps (no sample,
NaN, Inf) break a line rather than being drawn as zero. ::

    python -m tritonfleet.face.promsvg --prometheus http://127.0.0.1:9090 \\
        --dashboard dashboards/tritonfleet-overview.json --panel "Requests per second by model" \\
        --minutes 30 --out docs/monitoring-overview.svg

renders the panel's queries (Grafana variables filled in by :func:`dashboards.instantiate`, "All" by
default) over the last 30 minutes; several ``--panel`` make a grid (``--columns``), ``--expr`` draws one
PromQL expression instead.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from tritonfleet.face import dashboards

Series = tuple[str, list[tuple[float, float]]]  # (legend, [(unix time, value), ...])

# Grafana's classic palette: the chart looks like the panel it stands for
PALETTE = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0",
           "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477"]
_LEGEND_VAR = re.compile(r"\{\{\s*(\w+)\s*\}\}")
FONT = "font-family:DejaVu Sans,Helvetica,Arial,sans-serif"


def _result(result: Any) -> list[dict[str, Any]]:
    """The list of series in a query_range answer: the whole response, its ``data`` or the list."""
    if isinstance(result, Mapping):
        if "data" in result:
            result = result["data"]
        if isinstance(result, Mapping):
            result = result.get("result", [])
    return list(result or [])


def legend(metric: Mapping[str, str], legend_format: str | None = None) -> str:
    """A series' name: ``legend_format`` with ``{{label}}`` filled in (Grafana's legend syntax), else
    ``name{label="value", ...}``."""
    if legend_format and legend_format != "__auto":
        return _LEGEND_VAR.sub(lambda m: metric.get(m.group(1), ""), legend_format).strip()
    labels = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    name = metric.get("__name__", "")
    return f"{name}{{{labels}}}" if labels else (name or "value")


def series(result: Any, legend_format: str | None = None) -> list[Series]:
    """``(legend, points)`` for every series of a query_range (matrix) result; values as floats
    (NaN where Prometheus says NaN)."""
    out = []
    for item in _result(result):
        values = item.get("values")
        if values is None and "value" in item:  # an instant vector: one point
            values = [item["value"]]
        points = [(float(t), _float(v)) for t, v in values or []]
        out.append((legend(item.get("metric", {}), legend_format), points))
    return out


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 times a power of ten) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(low / step) * step
    ticks: list[float] = []
    t = first
    while t < high + step * 0.5 and len(ticks) < 50:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def format_value(v: float) -> str:
    """A tick label: SI suffix for large values, few digits for small ones."""
    if v == 0:
        return "0"
    a = abs(v)
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:g}{suffix}"
    if a >= 1:
        return f"{v:.4g}"
    return f"{v:.3g}"


def _time_ticks(start: float, end: float, count: int = 6) -> list[float]:
    span = max(end - start, 1.0)
    steps = [15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]
    step = next((s for s in steps if span / s <= count), 86400 * math.ceil(span / count / 86400))
    first = math.ceil(start / step) * step
    return [first + i * step for i in range(int((end - first) // step) + 1)]


def _time_label(t: float, span: float) -> str:
    when = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    return when.strftime("%m-%d %H:%M" if span > 86400 else "%H:%M:%S" if span < 300 else "%H:%M")


def render(data: Sequence[Series], *, title: str = "", y_label: str = "", width: int = 800, height: int = 360,
           y_min: float | None = None) -> str:
    """The SVG text of a line chart of ``data`` (``(legend, [(time, value), ...])`` per series)."""
    finite = [(t, v) for _, pts in data for t, v in pts if math.isfinite(v)]
    times = [t for _, pts in data for t, _ in pts]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    if t1 <= t0:
        t1 = t0 + 1.0
    lo = min((v for _, v in finite), default=0.0)
    hi = max((v for _, v in finite), default=1.0)
    if y_min is not None:
        lo = min(lo, y_min)
    elif lo >= 0:
        lo = 0.0  # rates, bytes, ratios: start at zero
    yticks = nice_ticks(lo, hi)
    ylo, yhi = yticks[0], yticks[-1]

    legend_cols = 2 if width >= 640 else 1
    legend_rows = math.ceil(len(data) / legend_cols) if data else 1
    left, right, top = 70, 20, 40 if title else 16
    bottom = 48 + 18 * legend_rows
    pw, ph = width - left - right, height - top - bottom
    if ph < 40:  # many series: grow the picture rather than squash the plot
        height += 40 - ph
        ph = 40

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * pw

    def y(v: float) -> float:
        return top + ph - (v - ylo) / ((yhi - ylo) or 1.0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title or y_label, {chr(34): "&quot;"})}">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<g style="{FONT}" font-size="11" fill="#333333">']
    if title:
        out.append(f'<text x="{width / 2:.1f}" y="22" text-anchor="middle" font-size="14" '
                   f'font-weight="bold">{escape(title)}</text>')
    # grid and value axis
    for v in yticks:
        yy = y(v)
        out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{escape(format_value(v))}</text>')
    span = t1 - t0
    for t in _time_ticks(t0, t1):
        xx = x(t)
        out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{top + ph}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{xx:.1f}" y="{top + ph + 16}" text-anchor="middle">{_time_label(t, span)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999999"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph + 32}" text-anchor="middle">time (UTC)</text>')
    if y_label:
        out.append(f'<text transform="translate(16 {top + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
                   f'{escape(y_label)}</text>')
    # the lines: a gap wherever a sample is missing or not finite
    for i, (_, pts) in enumerate(data):
        color = PALETTE[i % len(PALETTE)]
        runs, run = [], []
        for t, v in sorted(pts):
            if math.isfinite(v):
                run.append(f"{x(t):.1f},{y(v):.1f}")
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        for r in runs:
            if len(r) == 1:
                cx, cy = r[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="1.5" fill="{color}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                           f'stroke-linejoin="round" points="{" ".join(r)}"/>')
    # legend
    col_w = (width - left - right) / legend_cols
    for i, (name, _) in enumerate(data):
        row, col = divmod(i, legend_cols)
        lx, ly = left + col * col_w, top + ph + 46 + row * 18
        out.append(f'<rect x="{lx:.1f}" y="{ly - 8}" width="14" height="3" fill="{PALETTE[i % len(PALETTE)]}"/>')
        label = name if len(name) <= 60 else name[:57] + "..."
        out.append(f'<text x="{lx + 20:.1f}" y="{ly - 3}">{escape(label)}</text>')
    if not data:
        out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph / 2:.1f}" text-anchor="middle">no data</text>')
    out.append("</g></svg>")
    return "\n".join(out) + "\n"


def _attribute(head: str, name: str) -> int:
    """The integer ``name="..."`` attribute of an SVG element's opening tag (``render`` always writes it)."""
    found = re.search(rf'{name}="(\d+)"', head)
    if found is None:
        raise ValueError(f"not a picture from render(): no {name} in {head[:80]!r}")
    return int(found.group(1))


def compose(charts: Sequence[str], columns: int = 2, gap: int = 8) -> str:
    """Several :func:`render` pictures in one SVG, ``columns`` per row (e.g. a README overview)."""
    sizes = []
    for chart in charts:
        head = chart[:chart.index(">")]
        sizes.append((_attribute(head, "width"), _attribute(head, "height")))
    rows = [list(range(i, min(i + columns, len(charts)))) for i in range(0, len(charts), columns)]
    width = max((sum(sizes[i][0] for i in row) + gap * (len(row) - 1) for row in rows), default=1)
    height = sum(max(sizes[i][1] for i in row) for row in rows) + gap * max(len(rows) - 1, 0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">', f'<rect width="{width}" height="{height}" fill="#ffffff"/>']
    y = 0
    for row in rows:
        x = 0
        for i in row:
            # a nested <svg> is placed by x/y; its own viewBox keeps its drawing intact
            out.append(charts[i].strip().replace("<svg ", f'<svg x="{x}" y="{y}" ', 1))
            x += sizes[i][0] + gap
        y += max(sizes[i][1] for i in row) + gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_result(result: Any, *, legend_format: str | None = None, **kwargs: Any) -> str:
    """:func:`render` of a Prometheus query_range answer (the response, its ``data`` or its ``result``)."""
    return render(series(result, legend_format), **kwargs)


def panel_series(prom_url: str, dashboard: Mapping[str, Any], title: str, start: float, end: float, step: float,
                 variables: Mapping[str, Any] | None = None) -> list[Series]:
    """Every target of the panel called ``title``, queried over [start, end], legends from its
    ``legendFormat``."""
    panel = next((p for p in dashboards.panels(dashboard) if p.get("title") == title), None)
    if panel is None:
        raise KeyError(f"no panel {title!r}")
    values = {**dashboards.all_values(dashboard), **(variables or {})}
    out: list[Series] = []
    for target in panel.get("targets") or []:
        if not target.get("expr"):
            continue
        data = dashboards.query_range(prom_url, dashboards.instantiate(target["expr"], values), start, end, step)
        out += series(data, target.get("legendFormat"))
    return out


UNIT_LABELS = {"reqps": "requests / s", "ms": "milliseconds", "s": "seconds", "bytes": "bytes",
               "percentunit": "ratio", "percent": "percent", "Bps": "bytes / s", "ops": "per second"}


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tritonfleet.face.promsvg",
                                     description="Draw a Prometheus range query (or a dashboard panel) as SVG.")
    parser.add_argument("--prometheus", required=True, metavar="URL")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--expr", help="a PromQL expression (Grafana variables allowed)")
    what.add_argument("--panel", action="append", help="a panel title in --dashboard (repeat for a grid)")
    parser.add_argument("--dashboard", help="dashboard JSON (with --panel)")
    parser.add_argument("--legend", help="legend format for --expr, e.g. '{{model}}'")
    parser.add_argument("--minutes", type=float, default=30.0, help="range ending now (default 30)")
    parser.add_argument("--step", type=float, default=0, help="seconds between points (default: range/120)")
    parser.add_argument("--rate-interval", default="1m", help="value for $__rate_interval")
    parser.add_argument("--title")
    parser.add_argument("--y-label")
    parser.add_argument("--columns", type=int, default=2, help="panels per row with several --panel")
    parser.add_argument("--width", type=int, default=800, help="width of one chart")
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--out", required=True, help="SVG file to write")
    args = parser.parse_args(argv)
    end = time.time()
    start = end - args.minutes * 60
    step = args.step or max(1.0, round((end - start) / 120))
    variables = {"__rate_interval": args.rate_interval, "__range": f"{int(args.minutes)}m"}
    if args.panel:
        if not args.dashboard:
            parser.error("--panel needs --dashboard")
        board = dashboards.load(args.dashboard)
        charts, count = [], 0
        for title in args.panel:
            data = panel_series(args.prometheus, board, title, start, end, step, variables)
            panel = next(p for p in dashboards.panels(board) if p.get("title") == title)
            unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit", "")
            charts.append(render(data, title=args.title if args.title and len(args.panel) == 1 else title,
                                 y_label=args.y_label or UNIT_LABELS.get(unit, unit), width=args.width,
                                 height=args.height))
            count += len(data)
        text = charts[0] if len(charts) == 1 else compose(charts, args.columns)
    else:
        expr = dashboards.instantiate(args.expr, {"fleet": None, "host": None, **variables}, strict=False)
        data = series(dashboards.query_range(args.prometheus, expr, start, end, step), args.legend)
        count = len(data)
        text = render(data, title=args.title or "", y_label=args.y_label or "", width=args.width, height=args.height)
    Path(args.out).write_text(text)
    print(f"{args.out}: {count} series")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
