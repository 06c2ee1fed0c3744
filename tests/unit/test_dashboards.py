"""The Grafana dashboards in dashboards/: their JSON, the PromQL in them, and every expression run on a
real Prometheus (2.42, /usr/bin/prometheus) that scrapes realistic triton, node, neuron and dcgm
metrics from a loopback server, with the labels the fleet's scrape targets carry."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tritonfleet.agent.publish import textfile
from tritonfleet.agent.watchdog import textfile as watchdog_textfile
from tritonfleet.face import dashboards, promsvg

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "dashboards").glob("*.json"))
NAMES = [p.name for p in FILES]
DS = {"type": "prometheus", "uid": "${datasource}"}
JOBS = {"triton", "node", "neuron", "dcgm"}
BUILTIN = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms"}


def test_the_three_dashboards_are_there():
    assert NAMES == ["tritonfleet-hosts.json", "tritonfleet-neuron.json", "tritonfleet-overview.json"]


# ----------------------------------------------------------------------------------------- JSON structure


@pytest.fixture(params=FILES, ids=NAMES)
def board(request):
    return request.param, dashboards.load(request.param)


def test_dashboard_header(board):
    path, d = board
    assert 36 <= d["schemaVersion"] <= 41 and d["uid"] == path.stem and d["title"].startswith("tritonfleet / ")
    assert d["id"] is None and "tritonfleet" in d["tags"]
    assert json.loads(path.read_text()) == d


def test_uids_are_unique_across_files():
    uids = [dashboards.load(p)["uid"] for p in FILES]
    assert len(set(uids)) == len(uids)


def test_template_variables(board):
    _, d = board
    by_name = {v["name"]: v for v in dashboards.variables(d)}
    assert list(by_name) == ["datasource", "fleet", "host"]
    assert by_name["datasource"]["type"] == "datasource" and by_name["datasource"]["query"] == "prometheus"
    for name in ("fleet", "host"):
        var = by_name[name]
        assert var["type"] == "query" and var["multi"] and var["includeAll"] and var["allValue"] == ".*"
        assert var["datasource"] == DS and var["query"]["query"] == var["definition"]
        assert var["definition"].startswith("label_values(")
    assert "$fleet" in by_name["host"]["definition"]  # the host list follows the fleet choice


def test_every_panel_has_a_datasource_targets_and_a_place(board):
    _, d = board
    ids = []
    for panel in dashboards.panels(d):
        ids.append(panel["id"])
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
        if panel["type"] == "row":
            assert "targets" not in panel
            if not panel["collapsed"]:
                assert panel["panels"] == [], f"an open row keeps no panels of its own: {panel['title']}"
            continue
        assert panel["type"] in ("timeseries", "stat", "table"), panel["title"]
        assert panel["datasource"] == DS, panel["title"]
        assert panel["title"] and panel["description"], panel
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DS and target["expr"].strip(), panel["title"]
    assert len(set(ids)) == len(ids), f"duplicate panel ids: {sorted(ids)}"


def test_panels_do_not_overlap(board):
    """Panels placed in the same grid region (the top level, or one collapsed row) never overlap."""
    _, d = board

    def cells(items):
        seen = {}
        for p in items:
            g = p["gridPos"]
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in seen, f"{p['title']} overlaps {seen[(x, y)]}"
                    seen[(x, y)] = p["title"]

    cells(d["panels"])
    for row in d["panels"]:
        if row["type"] == "row" and row["collapsed"]:
            cells(row["panels"])


SELECTOR = re.compile(r"\{([^{}]*)\}")


def test_every_selector_is_scoped_to_a_job_the_fleet_and_the_host(board):
    _, d = board
    defined = {v["name"] for v in dashboards.variables(d)} | BUILTIN
    for title, ref, expr in dashboards.expressions(d):
        used = dashboards.used_variables(expr)
        assert used <= defined, f"{title} {ref}: undefined {used - defined}"
        selectors = [s for s in SELECTOR.findall(expr) if not s.strip().startswith("{")]
        assert selectors, f"{title} {ref}: no selector"
        for s in selectors:
            job = re.search(r'job="(\w+)"', s)
            assert job and job.group(1) in JOBS, f"{title} {ref}: {s}"
            assert 'fleet=~"$fleet"' in s and 'host=~"$host"' in s, f"{title} {ref}: {s}"
        assert "[$__rate_interval]" in expr or "rate(" not in expr, f"{title} {ref}: rate() window"


def test_the_latency_percentiles_say_what_they_are():
    d = dashboards.load(ROOT / "dashboards" / "tritonfleet-overview.json")
    (panel,) = [p for p in dashboards.panels(d) if p["title"].startswith("Request latency p50 / p99")]
    assert "approximation" in panel["title"]
    assert "no latency histograms" in panel["description"] and "quantile()" in panel["description"]
    exprs = [t["expr"] for t in panel["targets"]]
    assert exprs[0].startswith("quantile(0.5,") and exprs[1].startswith("quantile(0.99,")
    assert all("nv_inference_request_duration_us" in e and "nv_inference_request_success" in e for e in exprs)


def test_the_dashboards_use_the_exporters_metric_names():
    text = " ".join(e for p in FILES for _, _, e in dashboards.expressions(dashboards.load(p)))
    for name in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_request_duration_us",
                 "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_inference_count", "nv_inference_exec_count", "nv_inference_pending_request_count",
                 "tritonfleet_qa_failures", "tritonfleet_qa_last_run_timestamp_seconds",
                 "tritonfleet_watchdog_actions_total", "tritonfleet_watchdog_last_run_timestamp_seconds",
                 "neuroncore_utilization_ratio", "neuron_runtime_memory_used_bytes", "neuroncore_memory_usage_tensors",
                 "execution_errors_total", "execution_status_total", "hardware_ecc_events_total",
                 "neuron_hardware_info", "node_cpu_seconds_total", "node_memory_MemAvailable_bytes",
                 "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
        assert name in text, name


# ----------------------------------------------------------------------------------------- expressions()


def _target(ref, expr):
    return {"refId": ref, "expr": expr, "datasource": DS}


NESTED = {
    "panels": [
        {"id": 1, "type": "row", "title": "open", "collapsed": False, "panels": []},
        {"id": 2, "type": "timeseries", "title": "top", "targets": [_target("A", "up"), _target("B", "sum(up)")]},
        {"id": 3, "type": "text", "title": "notes"},  # no targets at all
        {"id": 4, "type": "row", "title": "closed", "collapsed": True, "panels": [
            {"id": 5, "type": "stat", "title": "inner", "targets": [_target("A", "count(up)")]},
            {"id": 6, "type": "timeseries", "title": "blank", "targets": [_target("A", "  "), {"refId": "B"}]},
            {"id": 7, "type": "row", "title": "deeper", "panels": [
                {"id": 8, "type": "table", "title": "deepest", "targets": [_target("C", "max(up)")]}]},
        ]},
    ]
}


def test_expressions_walk_rows_and_skip_queryless_targets():
    assert dashboards.expressions(NESTED) == [
        ("top", "A", "up"), ("top", "B", "sum(up)"), ("inner", "A", "count(up)"), ("deepest", "C", "max(up)")]
    assert [p["id"] for p in dashboards.panels(NESTED)] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_expressions_of_the_real_dashboards_include_collapsed_rows():
    d = dashboards.load(ROOT / "dashboards" / "tritonfleet-hosts.json")
    titles = {t for t, _, _ in dashboards.expressions(d)}
    assert "GPU utilization" in titles  # inside the collapsed "NVIDIA GPUs (DCGM)" row
    assert "GPU utilization" not in {p["title"] for p in d["panels"]}


def test_load_refuses_what_is_not_a_dashboard(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"title": "no panels"}')
    with pytest.raises(ValueError, match="not a Grafana dashboard"):
        dashboards.load(bad)


def test_variable_queries_become_promql():
    d = {"templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus"},
        {"name": "fleet", "type": "query", "query": {"query": "label_values(up, fleet)"}},
        {"name": "host", "type": "query", "query": 'label_values(up{fleet=~"$fleet"}, host)'},
        {"name": "job", "type": "query", "query": {"query": "label_values(job)"}},
        {"name": "other", "type": "query", "query": {"query": "query_result(up)"}},
    ]}}
    assert dashboards.variable_queries(d) == [
        ("fleet", "group by (fleet) (up)"), ("host", 'group by (host) (up{fleet=~"$fleet"})'),
        ("job", 'group by (job) ({job!=""})')]


# ----------------------------------------------------------------------------------------- instantiate()

S = 'up{fleet=~"$fleet", host=~"$host"}'


@pytest.mark.parametrize("expr, variables, expected", [
    # one value, several, All (None, "$__all", or $__all among the values)
    (S, {"fleet": "prod", "host": "inf2-1"}, 'up{fleet=~"prod", host=~"inf2-1"}'),
    (S, {"fleet": ["prod"], "host": ["a", "b"]}, 'up{fleet=~"prod", host=~"(a|b)"}'),
    (S, {"fleet": None, "host": "$__all"}, 'up{fleet=~".*", host=~".*"}'),
    (S, {"fleet": ["$__all", "x"], "host": None}, 'up{fleet=~".*", host=~".*"}'),
    # regex metacharacters are escaped for a PromQL string (the backslash doubled)
    (S, {"fleet": "a.b", "host": ["ip-10-0-0-1.ec2.internal", "h(1)"]},
     r'up{fleet=~"a\\.b", host=~"(ip-10-0-0-1\\.ec2\\.internal|h\\(1\\))"}'),
    ('x{host=~"$host"}', {"host": 'q"uote'}, r'x{host=~"q\"uote"}'),
    # the other spellings and formats
    ('x{a=~"${fleet}", b=~"[[host]]"}', {"fleet": "f", "host": ["h1", "h2"]}, 'x{a=~"f", b=~"(h1|h2)"}'),
    ('x{a=~"${host:pipe}", b="${host:csv}", c="[[host:raw]]"}', {"host": ["h.1", "h2"]},
     'x{a=~"h.1|h2", b="h.1,h2", c="h.1,h2"}'),
    ('x{a=~"${host:pipe}"}', {"host": None}, 'x{a=~".*"}'),
    # built-ins: defaults, overrides, derived forms; $__rate_interval is not $__interval + "rate_..."
    ("rate(x[$__rate_interval]) + rate(x[$__interval])", {}, "rate(x[1m]) + rate(x[15s])"),
    ("rate(x[$__rate_interval])", {"__rate_interval": "10s"}, "rate(x[10s])"),
    ("increase(x[$__range]) / $__range_s / $__range_ms", {}, "increase(x[1h]) / 3600 / 3600000"),
    ("increase(x[$__range]) / $__range_s", {"__range": "90s"}, "increase(x[90s]) / 90"),
    ("x / $__interval_ms", {"__interval": "1m30s"}, "x / 90000"),
    ("increase(x[${__range}])", {"__range": "2h"}, "increase(x[2h])"),
    # label_replace's $1 is not a variable
    ('label_replace(x, "k", "$1", "__name__", "(.+)")', {}, 'label_replace(x, "k", "$1", "__name__", "(.+)")'),
    # no variables at all
    ("sum(rate(x[5m]))", None, "sum(rate(x[5m]))"),
])
def test_instantiate(expr, variables, expected):
    assert dashboards.instantiate(expr, variables) == expected


def test_used_variables():
    expr = 'label_replace(rate(x{a=~"$fleet", b=~"${host:pipe}", c="[[server]]"}[$__rate_interval]), "k", "$1", "l", "(.*)")'
    assert dashboards.used_variables(expr) == {"fleet", "host", "server", "__rate_interval"}


def test_instantiate_unknown_variables():
    with pytest.raises(KeyError, match=r"\$server"):
        dashboards.instantiate('x{server=~"$server"}', {})
    assert dashboards.instantiate('x{server=~"$server"}', {}, strict=False) == 'x{server=~"$server"}'
    with pytest.raises(ValueError, match="unsupported format"):
        dashboards.instantiate('x{a="${host:json}"}', {"host": "h"})
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        dashboards.instantiate("x", {"__range": "an hour"})
    with pytest.raises(ValueError, match="no value"):
        dashboards.instantiate('x{a=~"$host"}', {"host": []})


def test_every_real_expression_instantiates_to_plain_promql():
    for path in FILES:
        d = dashboards.load(path)
        for _, _, expr in dashboards.expressions(d):
            out = dashboards.instantiate(expr, dashboards.all_values(d))
            assert "$" not in out and "[[" not in out, out


# ----------------------------------------------------------------------------------------- promsvg


def _svg(text):
    return ET.fromstring(text)


NS = "{http://www.w3.org/2000/svg}"


def test_render_draws_one_line_per_series_with_a_legend_and_axes():
    result = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"model": "add_sub", "host": "a"}, "values": [[1000 + 15 * i, str(i * 1.5)] for i in range(20)]},
        {"metric": {"model": "<resnet&>", "host": "a"}, "values": [[1000 + 15 * i, "2"] for i in range(20)]},
    ]}}
    svg = promsvg.render_result(result, legend_format="{{model}}", title="Requests", y_label="requests / s")
    root = _svg(svg)
    assert len(root.findall(f".//{NS}polyline")) == 2
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "Requests" in texts and "requests / s" in texts and "time (UTC)" in texts
    assert "add_sub" in texts and "<resnet&>" in texts  # escaped in the file, intact once parsed
    assert "0" in texts  # the value axis starts at zero for non-negative data


def test_render_breaks_lines_at_gaps_and_nan():
    pts = [(0.0, 1.0), (15.0, 2.0), (30.0, math.nan), (45.0, 3.0), (60.0, 4.0), (75.0, math.inf), (90.0, 5.0)]
    root = _svg(promsvg.render([("s", pts)]))
    assert len(root.findall(f".//{NS}polyline")) == 2 and len(root.findall(f".//{NS}circle")) == 1


def test_render_without_data_says_so():
    root = _svg(promsvg.render([], title="nothing"))
    assert "no data" in [t.text for t in root.iter(f"{NS}text")]


def test_compose_puts_charts_in_a_grid():
    charts = [promsvg.render([(f"s{i}", [(0.0, 1.0), (1.0, 2.0)])], title=f"c{i}", width=300, height=200)
              for i in range(3)]
    root = _svg(promsvg.compose(charts, columns=2, gap=10))
    assert (root.get("width"), root.get("height")) == ("610", "410")
    inner = root.findall(f"{NS}svg")
    assert [(c.get("x"), c.get("y")) for c in inner] == [("0", "0"), ("310", "0"), ("0", "210")]
    assert len(root.findall(f".//{NS}polyline")) == 3


@pytest.mark.parametrize("metric, fmt, expected", [
    ({"__name__": "up", "job": "node"}, None, 'up{job="node"}'),
    ({"host": "a", "server": "main"}, "{{host}} {{ server }}", "a main"),
    ({"host": "a"}, "{{host}} {{missing}}", "a"),
    ({}, "__auto", "value"),
])
def test_legend(metric, fmt, expected):
    assert promsvg.legend(metric, fmt) == expected


@pytest.mark.parametrize("low, high", [(0, 1), (0, 7.3), (0, 12345), (-3, 3), (0.001, 0.0042), (5, 5)])
def test_nice_ticks_cover_the_range(low, high):
    ticks = promsvg.nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high and len(ticks) <= 12
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1


# ----------------------------------------------------------------------------------------- a real Prometheus

FLEET = "test"
# host -> (family, instance type, Triton servers, NeuronCores, GPUs)
HOSTS = {
    "inf2-1.test.internal": ("inf2", "inf2.xlarge", ["main", "canary"], 2, 0),
    "trn1-1.test.internal": ("trn1", "trn1.2xlarge", ["main"], 2, 0),
    "g5-1.test.internal": ("g5", "g5.xlarge", ["main"], 0, 1),
}
MODELS = ["add_sub", "resnet50"]


def _lines(name, kind, help_text, samples):
    out = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        body = ",".join(f'{k}="{v}"' for k, v in labels.items())
        out.append(f"{name}{{{body}}} {float(value)!r}" if body else f"{name} {float(value)!r}")
    return out


def _seed(*parts) -> float:
    """A stable number in [1, 2) per (host, server, ...), so series differ from each other."""
    return 1 + (sum(ord(c) for c in "/".join(map(str, parts))) % 97) / 97


def triton_metrics(host, server, elapsed):
    """What Triton 2.51's :8002/metrics says (names, types and labels as a real CPU server prints them)."""
    out = []
    per_model = {}
    for m in MODELS:
        k = _seed(host, server, m)
        ok = 20 * k * elapsed + 1000
        per_model[m] = {"ok": ok, "fail": 0.05 * k * elapsed + 3, "count": ok * 4, "exec": ok * 2,
                        "req_us": ok * 1800 * k, "queue_us": ok * 120 * k, "in_us": ok * 40, "infer_us": ok * 1500 * k,
                        "out_us": ok * 60}

    def labels(m):
        return {"model": m, "version": "1"}

    out += _lines("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes",
                  [(labels(m), v["ok"]) for m, v in per_model.items()])
    out += _lines("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes",
                  [({"model": m, "reason": r, "version": "1"}, v["fail"] if r == "BACKEND" else 0)
                   for m, v in per_model.items() for r in ("OTHER", "BACKEND", "CANCELED", "REJECTED")])
    for name, key, help_text in (
            ("nv_inference_count", "count", "Number of inferences performed (does not include cached requests)"),
            ("nv_inference_exec_count", "exec", "Number of model executions performed"),
            ("nv_inference_request_duration_us", "req_us", "Cumulative inference request duration in microseconds"),
            ("nv_inference_queue_duration_us", "queue_us", "Cumulative inference queuing duration in microseconds"),
            ("nv_inference_compute_input_duration_us", "in_us", "Cumulative compute input duration in microseconds"),
            ("nv_inference_compute_infer_duration_us", "infer_us", "Cumulative compute inference duration"),
            ("nv_inference_compute_output_duration_us", "out_us", "Cumulative inference compute output duration")):
        out += _lines(name, "counter", help_text, [(labels(m), v[key]) for m, v in per_model.items()])
    out += _lines("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests",
                  [(labels(m), int(elapsed) % 3) for m in MODELS])
    out += _lines("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]", [({}, 0.4)])
    out += _lines("nv_cpu_memory_used_bytes", "gauge", "CPU memory used, bytes", [({}, 1.3e9)])
    return out


def node_metrics(host, elapsed, now):
    family = HOSTS[host][0]
    k = _seed(host)
    out = []
    cpu = []
    for c in range(2):
        for mode, share in (("idle", 0.6 / k), ("user", 0.3), ("system", 0.08), ("iowait", 0.02)):
            cpu.append(({"cpu": str(c), "mode": mode}, 100000 + share * elapsed))
    out += _lines("node_cpu_seconds_total", "counter", "Seconds the CPUs spent in each mode.", cpu)
    out += _lines("node_memory_MemTotal_bytes", "gauge", "Memory information field MemTotal_bytes.", [({}, 16e9)])
    out += _lines("node_memory_MemAvailable_bytes", "gauge", "Memory information field MemAvailable_bytes.",
                  [({}, 16e9 * (0.7 - 0.1 * k))])
    for n, v in (("1", 0.8 * k), ("5", 0.7 * k), ("15", 0.6 * k)):
        out += _lines(f"node_load{n}", "gauge", f"{n}m load average.", [({}, v)])
    fs = [({"device": "/dev/nvme0n1p1", "fstype": "ext4", "mountpoint": "/"}, 0),
          ({"device": "tmpfs", "fstype": "tmpfs", "mountpoint": "/run"}, 0)]
    out += _lines("node_filesystem_size_bytes", "gauge", "Filesystem size in bytes.", [(lb, 200e9) for lb, _ in fs])
    out += _lines("node_filesystem_avail_bytes", "gauge", "Filesystem space available to non-root users in bytes.",
                  [(lb, 200e9 * (0.9 - 0.3 * k + 0.3)) for lb, _ in fs])
    disk = {"device": "nvme0n1"}
    out += _lines("node_disk_read_bytes_total", "counter", "The total number of bytes read successfully.",
                  [(disk, 1e9 + 2e6 * k * elapsed)])
    out += _lines("node_disk_written_bytes_total", "counter", "The total number of bytes written successfully.",
                  [(disk, 1e9 + 5e6 * k * elapsed)])
    out += _lines("node_disk_io_time_seconds_total", "counter", "Total seconds spent doing I/Os.",
                  [(disk, 500 + 0.1 * k * elapsed)])
    nics = [({"device": "ens5"}, 1e7 * k), ({"device": "lo"}, 1e5)]
    out += _lines("node_network_receive_bytes_total", "counter", "Network device statistic receive_bytes.",
                  [(lb, 1e9 + r * elapsed) for lb, r in nics])
    out += _lines("node_network_transmit_bytes_total", "counter", "Network device statistic transmit_bytes.",
                  [(lb, 1e9 + 0.5 * r * elapsed) for lb, r in nics])
    out += _lines("node_boot_time_seconds", "gauge", "Node boot time, in unixtime.", [({}, now - 86400 * k)])
    out += _lines("node_textfile_scrape_error", "gauge", "1 if there was an error opening or reading a file, 0 otherwise",
                  [({}, 0)])
    # what the scheduled QA run leaves in the textfile directory, as the agent writes it
    failed = 1 if family == "trn1" else 0
    out += textfile({"summary": {"cases": 24, "failed": failed, "errors": 0}}, now - 3600 * k).splitlines()
    # and what the host watchdog leaves there (tritonfleet/agent/watchdog.py writes it): a restart now and then
    out += watchdog_textfile({("triton", "crash_loop", "restart"): 1 + int(elapsed // 10),
                              ("", "foreign_cores", "report"): 1}, now - 5 * k).splitlines()
    return out


INSTANCE = {"availability_zone": "us-east-1a", "instance_id": "i-0123456789abcdef0", "instance_name": "",
            "instance_type": "", "region": "us-east-1", "subnet_id": "subnet-0abc"}


def neuron_metrics(host, elapsed):
    """What neuron-monitor-prometheus.py serves while a runtime runs: its instance labels (instance_type
    among them; Prometheus keeps ours and renames that one exported_instance_type), runtime_tag, and
    memory_location="None" on the neuroncore_memory_usage_* gauges."""
    _, itype, _, cores, _ = HOSTS[host]
    inst = {**INSTANCE, "instance_type": itype}
    rt = {**inst, "runtime_tag": "4242"}
    k = _seed(host)
    out = []
    out += _lines("execution_errors_total", "counter", "Execution errors total",
                  [({**rt, "error_type": e}, (0.01 * k * elapsed if e == "transient" else 0))
                   for e in ("generic", "numerical", "transient", "model", "runtime", "hardware")])
    out += _lines("execution_status_total", "counter", "Execution status total",
                  [({**rt, "status_type": s}, (40 * k * elapsed if s == "completed" else 0))
                   for s in ("completed", "completed_with_err", "completed_with_num_err", "timed_out",
                             "incorrect_input", "failed_to_queue")])
    out += _lines("execution_latency_seconds", "gauge", "Execution latency in seconds",
                  [({**rt, "percentile": p}, v * k) for p, v in (("p0", 0.0031), ("p1", 0.0032), ("p25", 0.0033),
                                                                 ("p50", 0.0034), ("p75", 0.0035), ("p99", 0.0041),
                                                                 ("p100", 0.0052))])
    out += _lines("neuron_runtime_memory_used_bytes", "gauge", "Runtime memory used bytes",
                  [({**rt, "memory_location": "host"}, 1.1e9), ({**rt, "memory_location": "neuron_device"}, 6.3e8 * k)])
    out += _lines("neuron_runtime_vcpu_usage_ratio", "gauge", "Runtime vCPU utilization ratio",
                  [({**rt, "usage_type": "user"}, 0.04), ({**rt, "usage_type": "system"}, 0.02)])
    for kind, v in (("constants", 6.1e7), ("model_code", 1.0e8), ("model_shared_scratchpad", 0), ("runtime_memory", 4.3e4),
                    ("tensors", 9.9e6)):
        out += _lines(f"neuroncore_memory_usage_{kind}", "gauge", f"NeuronCore memory utilization for {kind}",
                      [({**rt, "memory_location": "None", "neuroncore": str(c)}, v) for c in range(cores)])
    out += _lines("neuroncore_utilization_ratio", "gauge", "NeuronCore utilization ratio",
                  [({**rt, "neuroncore": str(c)}, 0.8 / (c + 1) / k) for c in range(cores)])
    out += _lines("system_memory_total_bytes", "gauge", "System memory total_bytes bytes", [(inst, 3.2e10)])
    out += _lines("system_memory_used_bytes", "gauge", "System memory used_bytes bytes", [(inst, 1.1e10 * k)])
    out += _lines("hardware_ecc_events_total", "counter", "Hardware ecc events total",
                  [({**inst, "event_type": e, "neuron_device_index": "0"}, 0)
                   for e in ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")])
    out += _lines("system_vcpu_count", "gauge", "System vCPU count", [(inst, 4)])
    out += _lines("instance_info", "gauge", "EC2 instance information", [(inst, 1)])
    out += _lines("neuron_hardware_info", "gauge", "Neuron Hardware Information",
                  [({"neuron_device_count": "1", "neuroncore_per_device_count": str(cores), **inst}, 1)])
    return out


def dcgm_metrics(host, elapsed):
    """dcgm-exporter's default counters (FB in MiB), with its own labels."""
    gpus = HOSTS[host][4]
    out = []
    k = _seed(host)

    def lb(g):
        return {"gpu": str(g), "UUID": f"GPU-{g:08d}-aaaa", "device": f"nvidia{g}", "modelName": "NVIDIA A10G",
                "Hostname": host.split(".")[0], "DCGM_FI_DRIVER_VERSION": "550.127.05"}

    for name, help_text, value in (
            ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", 70 * k),
            ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", 9000 * k),
            ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", 22000 - 9000 * k),
            ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", 55),
            ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", 140 + (elapsed % 7))):
        out += _lines(name, "gauge", help_text, [(lb(g), value) for g in range(gpus)])
    return out


class _Exporters(BaseHTTPRequestHandler):
    """/<job>/<host>[/<server>]: that job's exposition for that host, generated at scrape time."""

    started = time.time()

    def do_GET(self):  # noqa: N802 (http.server's name)
        parts = self.path.strip("/").split("/")
        job, host = parts[0], parts[1] if len(parts) > 1 else ""
        now = time.time()
        elapsed = now - self.started
        if host not in HOSTS:
            self.send_error(404)
            return
        lines = {"triton": lambda: triton_metrics(host, parts[2] if len(parts) > 2 else "", elapsed),
                 "node": lambda: node_metrics(host, elapsed, now),
                 "neuron": lambda: neuron_metrics(host, elapsed),
                 "dcgm": lambda: dcgm_metrics(host, elapsed)}.get(job)
        if lines is None:
            self.send_error(404)
            return
        body = ("\n".join(lines()) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def scrape_config(port):
    """The fleet's scrape layout: one job per exporter, the inventory labels on every target."""
    jobs = {"triton": [], "node": [], "neuron": [], "dcgm": []}
    for host, (family, itype, servers, cores, gpus) in HOSTS.items():
        base = {"host": host, "instance_type": itype, "family": family, "fleet": FLEET}
        for server in servers:
            jobs["triton"].append({**base, "server": server, "__metrics_path__": f"/triton/{host}/{server}"})
        jobs["node"].append({**base, "__metrics_path__": f"/node/{host}"})
        if cores:
            jobs["neuron"].append({**base, "__metrics_path__": f"/neuron/{host}"})
        if gpus:
            jobs["dcgm"].append({**base, "__metrics_path__": f"/dcgm/{host}"})
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": job, "static_configs": [
                  {"targets": [f"127.0.0.1:{port}"], "labels": labels} for labels in targets]}
                  for job, targets in jobs.items()]}
    return config, sum(len(t) for t in jobs.values())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url, timeout=3.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A Prometheus on loopback scraping the fake exporters every second; yields its URL once every
    target has been scraped a few times. Both processes are stopped afterwards."""
    binary = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if binary is None:
        pytest.skip("prometheus is not installed (Debian: apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    exporters = ThreadingHTTPServer(("127.0.0.1", 0), _Exporters)
    thread = threading.Thread(target=exporters.serve_forever, daemon=True)
    thread.start()
    config, n_targets = scrape_config(exporters.server_address[1])
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn",
         f"--web.console.templates={tmp}", f"--web.console.libraries={tmp}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp)
    try:
        deadline = time.monotonic() + 60
        scraped = 0
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited {proc.returncode}: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            try:
                res = _get_json(f"{url}/api/v1/query?query=count(count_over_time(up[30s])%20>=%204)")["data"]["result"]
                scraped = int(float(res[0]["value"][1])) if res else 0
            except (OSError, ValueError, KeyError):
                scraped = 0
            if scraped == n_targets:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"only {scraped} of {n_targets} targets scraped 4 times within 60s: "
                        f"{(tmp / 'prometheus.log').read_text()[-2000:]}")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        exporters.shutdown()
        exporters.server_close()
        thread.join(timeout=5)


FAST = {"__rate_interval": "10s"}  # 10 scrapes at 1s; Grafana would pick at least 4 scrape intervals


def _check_until_clean(url, paths, variables, seconds=30.0):
    """check() again until it finds nothing (rates need a few scrapes) or the time is up."""
    deadline = time.monotonic() + seconds
    while True:
        problems = dashboards.check(url, paths, variables)
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(1)


@pytest.mark.slow
def test_every_expression_returns_data_on_a_real_prometheus(prometheus):
    problems = _check_until_clean(prometheus, FILES, FAST)
    assert problems == [], "\n".join(problems)


@pytest.mark.slow
def test_the_target_labels_are_there_and_the_exporters_own_instance_type_is_renamed(prometheus):
    data = dashboards.query(prometheus, 'neuroncore_utilization_ratio{job="neuron"}')
    labels = data["result"][0]["metric"]
    assert labels["instance_type"] in ("inf2.xlarge", "trn1.2xlarge") and labels["family"] in ("inf2", "trn1")
    assert labels["exported_instance_type"] == labels["instance_type"] and labels["fleet"] == FLEET
    servers = dashboards.query(prometheus, 'group by (host, server) (nv_inference_request_success{job="triton"})')
    assert len(servers["result"]) == sum(len(h[2]) for h in HOSTS.values())


@pytest.mark.slow
def test_chosen_hosts_and_fleet_select_by_regex_on_a_real_prometheus(prometheus):
    """Host names with dots, two of three chosen: every expression still has data (the Neuron panels
    from the inf2 host, the GPU ones from the g5 host), and only the chosen hosts show up."""
    chosen = ["inf2-1.test.internal", "g5-1.test.internal"]
    variables = {**FAST, "fleet": [FLEET], "host": chosen}
    problems = _check_until_clean(prometheus, FILES, variables)
    assert problems == [], "\n".join(problems)
    d = dashboards.load(ROOT / "dashboards" / "tritonfleet-overview.json")
    (expr,) = [e for t, _, e in dashboards.expressions(d) if t == "Requests per second by server"]
    result = dashboards.query(prometheus, dashboards.instantiate(expr, variables))["result"]
    assert {r["metric"]["host"] for r in result} == set(chosen)
    assert len(result) == 3  # inf2's two servers and g5's one
    nothing = {**FAST, "fleet": [FLEET], "host": ["inf2-1Xtest.internal"]}  # the dot is not "any character"
    assert dashboards.query(prometheus, dashboards.instantiate(expr, nothing))["result"] == []


@pytest.mark.slow
def test_latency_quantiles_on_a_real_prometheus(prometheus):
    """p50 <= p99 <= max, and they sit between the fastest and slowest per-server average latency."""
    d = dashboards.load(ROOT / "dashboards" / "tritonfleet-overview.json")
    (panel,) = [p for p in dashboards.panels(d) if p["title"].startswith("Request latency p50 / p99")]
    values = {**dashboards.all_values(d), **FAST}
    got = {}
    for target in panel["targets"]:
        (sample,) = dashboards.query(prometheus, dashboards.instantiate(target["expr"], values))["result"]
        got[target["legendFormat"]] = float(sample["value"][1])
    assert 0 < got["p50"] <= got["p99"] <= got["max"]
    # the fake servers answer in 1.8 ms times a per-server factor in [1, 2)
    assert 1.8 <= got["p50"] and got["max"] < 3.6


@pytest.mark.slow
def test_check_names_the_file_and_panel_of_each_broken_expression(prometheus, tmp_path):
    bad = {"title": "broken", "uid": "broken", "templating": {"list": [
        {"name": "host", "type": "query", "query": {"query": "label_values(no_such_metric, host)"}}]},
        "panels": [{"id": 1, "type": "row", "title": "r", "collapsed": True, "panels": [
            {"id": 2, "type": "stat", "title": "Missing metric", "targets": [
                {"refId": "A", "expr": 'sum(no_such_metric{host=~"$host"})'},
                {"refId": "B", "expr": 'sum(up{host=~"$host"})'}]},
            {"id": 3, "type": "stat", "title": "Bad PromQL", "targets": [{"refId": "A", "expr": "sum(rate(up))"}]},
            {"id": 4, "type": "stat", "title": "Unknown variable", "targets": [{"refId": "C", "expr": "up{a=~\"$nope\"}"}]},
            {"id": 5, "type": "stat", "title": "NaN", "targets": [{"refId": "A", "expr": "0/0"}]},
        ]}]}
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(bad))
    problems = dashboards.check(prometheus, [path, tmp_path / "absent.json"])
    assert len(problems) == 6, "\n".join(problems)
    text = "\n".join(problems)
    assert f"{path}: variable 'host': empty result" in text
    assert f"{path}: panel 'Missing metric' (A): empty result" in text
    assert "panel 'Missing metric' (B)" not in text
    assert f"{path}: panel 'Bad PromQL' (A): bad_data" in text
    assert f"{path}: panel 'Unknown variable' (C): " in text and "$nope" in text
    assert f"{path}: panel 'NaN' (A): a NaN scalar" in text
    assert f"{tmp_path / 'absent.json'}: cannot load" in text
    assert not [p for p in dashboards.check(prometheus, [path], nan_is_empty=False) if "'NaN'" in p]
    allowed = dashboards.check(prometheus, [path], allow_empty={"Missing metric", "Bad PromQL"})
    assert not [p for p in allowed if "'Missing metric'" in p]  # allowed to be empty ...
    assert [p for p in allowed if "'Bad PromQL'" in p]  # ... but not to be wrong


def test_check_reports_an_unreachable_prometheus(tmp_path):
    problems = dashboards.check(f"http://127.0.0.1:{_free_port()}", FILES[:1], timeout=2)
    assert problems and all("cannot query" in p for p in problems)


@pytest.mark.slow
def test_a_panel_rendered_as_svg_from_a_real_range_query(prometheus, tmp_path):
    d = dashboards.load(ROOT / "dashboards" / "tritonfleet-overview.json")
    end = time.time()
    data = promsvg.panel_series(prometheus, d, "Requests per second by model", end - 20, end, 1, FAST)
    assert sorted(name for name, _ in data) == MODELS
    assert all(any(math.isfinite(v) and v > 0 for _, v in pts) for _, pts in data)
    out = tmp_path / "overview.svg"
    rc = promsvg.main(["--prometheus", prometheus, "--dashboard", str(ROOT / "dashboards" / "tritonfleet-overview.json"),
                       "--panel", "Request latency p50 / p99 across servers (approximation)", "--minutes", "1",
                       "--step", "1", "--rate-interval", "10s", "--out", str(out)])
    root = _svg(out.read_text())
    assert rc == 0 and len(root.findall(f".//{NS}polyline")) == 4
    assert "milliseconds" in [t.text for t in root.iter(f"{NS}text")]
    grid = tmp_path / "grid.svg"
    rc = promsvg.main(["--prometheus", prometheus, "--dashboard", str(ROOT / "dashboards" / "tritonfleet-overview.json"),
                       "--panel", "Requests per second by server", "--panel", "Queue time per request by model",
                       "--minutes", "1", "--step", "1", "--rate-interval", "10s", "--width", "500", "--out", str(grid)])
    root = _svg(grid.read_text())
    assert rc == 0 and len(root.findall(f"{NS}svg")) == 2 and root.get("width") == "1008"
    assert len(root.findall(f".//{NS}polyline")) == 4 + 2  # four servers, two models
