"""The host watchdog's parsers of its probes' output (tritonfleet/agent/probes.py) on captured-style output
and on the sandbox stand-ins' own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tritonfleet.agent import probes
from tritonfleet.agent.watchdog import is_hw_error_counter
from tritonfleet.agent.watchpolicy import ProbeError

# In the shape of the neuron-monitor user guide's examples and of captured trn1/inf2 reports (values changed).
MONITOR_REPORT = {
    "neuron_runtime_data": [
        {"pid": 3141, "neuron_runtime_tag": "triton-0", "error": "",
         "report": {"execution_stats": {"period": 5.0, "error_summary": {
             "generic": 0, "numerical": 2, "transient": 0, "model": 0, "runtime": 0, "hardware": 1},
             "execution_summary": {"completed": 123, "completed_with_err": 1, "completed_with_num_err": 2,
                                   "timed_out": 0, "incorrect_input": 0, "failed_to_queue": 0},
             "latency_stats": {"total_latency": None, "device_latency": None}, "error": ""},
             "memory_used": {"period": 5.0, "loaded_models": [], "error": "",
                             "neuron_runtime_used_bytes": {"host": 1000000, "neuron_device": 2}}}},
        {"pid": 2718, "neuron_runtime_tag": "gone", "error": "runtime went away", "report": {
            "execution_stats": {"error_summary": {"hardware": 50}, "error": ""}}},
    ],
    "system_data": {
        "neuron_hw_counters": {"period": 5.000143, "neuron_devices": [
            {"neuron_device_index": 0, "mem_ecc_corrected": 3, "mem_ecc_uncorrected": 0,
             "sram_ecc_corrected": 0, "sram_ecc_uncorrected": 1},
            {"neuron_device_index": 1, "mem_ecc_corrected": 0, "mem_ecc_uncorrected": 2,
             "sram_ecc_corrected": 0, "sram_ecc_uncorrected": 0}], "error": ""},
        "memory_info": {"period": 5.0, "memory_total_bytes": 33117732864, "memory_used_bytes": 11233579008,
                        "swap_total_bytes": 0, "swap_used_bytes": 0, "error": ""},
    },
    "instance_info": {"instance_name": "", "instance_id": "i-0421ea5496c852415",
                      "instance_type": "trn1.2xlarge", "error": ""},
    "neuron_hardware_info": {"neuron_device_count": 2, "neuroncore_per_device_count": 2, "error": ""},
}
MONITOR_COUNTS = {
    "device0.mem_ecc_corrected": 3, "device0.mem_ecc_uncorrected": 0, "device0.sram_ecc_corrected": 0,
    "device0.sram_ecc_uncorrected": 1, "device1.mem_ecc_corrected": 0, "device1.mem_ecc_uncorrected": 2,
    "device1.sram_ecc_corrected": 0, "device1.sram_ecc_uncorrected": 0,
    "runtime.triton-0.generic": 0, "runtime.triton-0.numerical": 2, "runtime.triton-0.transient": 0,
    "runtime.triton-0.model": 0, "runtime.triton-0.runtime": 0, "runtime.triton-0.hardware": 1,
}


def test_parse_neuron_monitor_one_report_compact_or_pretty():
    compact = json.dumps(MONITOR_REPORT, separators=(",", ":")) + "\n"  # as the tool streams it
    for text in (compact, json.dumps(MONITOR_REPORT, indent=2)):
        assert probes.parse_neuron_monitor(text) == MONITOR_COUNTS


def test_parse_neuron_monitor_a_stream_sums_its_reports_and_skips_a_line_cut_short():
    line = json.dumps(MONITOR_REPORT, separators=(",", ":"))
    counts = probes.parse_neuron_monitor(line + "\n" + line + "\n" + line[:200])
    assert counts == {k: 2 * v for k, v in MONITOR_COUNTS.items()}
    totals = probes.accumulate(probes.accumulate({}, MONITOR_COUNTS), MONITOR_COUNTS)
    assert totals == counts


def test_parse_neuron_monitor_older_and_partial_reports():
    older = {"neuron_runtime_data": [{"pid": 1, "neuron_runtime_tag": "", "error": "", "report": {
        "inference_stats": {"error_summary": {"hardware": 4}, "error": ""}}}]}
    assert probes.parse_neuron_monitor(json.dumps(older)) == {"runtime.1.hardware": 4}  # no tag: the pid
    failed_group = {"system_data": {"neuron_hw_counters": {"neuron_devices": [
        {"neuron_device_index": 0, "mem_ecc_uncorrected": 9}], "error": "driver went away"}}}
    assert probes.parse_neuron_monitor(json.dumps(failed_group)) == {}
    nulls = {"neuron_runtime_data": None, "system_data": None, "neuron_hardware_info": {"error": "no driver"}}
    assert probes.parse_neuron_monitor(json.dumps(nulls)) == {}
    odd = {"system_data": {"neuron_hw_counters": {"neuron_devices": [
        {"neuron_device_index": "0", "mem_ecc_uncorrected": 1}, "junk",
        {"neuron_device_index": 1, "mem_ecc_uncorrected": -1, "sram_ecc_uncorrected": True,
         "mem_ecc_corrected": 2.5, "sram_ecc_corrected": 1}]}}}
    assert probes.parse_neuron_monitor(json.dumps(odd)) == {"device1.sram_ecc_corrected": 1}


@pytest.mark.parametrize("text", ["", "   \n", "not json", "ERRO[0000] Failed to load config file: x\n",
                                  "{\"a\": "])
def test_parse_neuron_monitor_refuses_output_without_json_in_one_line(text):
    with pytest.raises(ProbeError, match=r"^neuron-monitor: no JSON in its output \(") as exc:
        probes.parse_neuron_monitor(text)
    assert "\n" not in str(exc.value)


def load_standin(name: str, monkeypatch: pytest.MonkeyPatch, root: Path, **values: str) -> dict[str, Any]:
    """The sandbox stand-in's functions (rendered as the sandbox installs it), its root under ``root``."""
    from tritonfleet.sandbox import standins

    (root / "dev").mkdir()
    (root / "etc/tritonfleet-sandbox").mkdir(parents=True)
    hw = {"device_name": "Inferentia2", "device_count": 2, "cores_per_device": 2,
          "device_memory_bytes": 34359738368, "instance_type": "inf2.24xlarge", "instance_id": "i-0sandbox",
          "availability_zone": "us-east-1a"}
    (root / "etc/tritonfleet-sandbox/hardware.json").write_text(json.dumps(hw))
    for i in range(2):
        (root / f"dev/neuron{i}").touch()
    monkeypatch.setenv("TRITONFLEET_SANDBOX_ROOT", str(root))
    ns: dict[str, Any] = {"__name__": "standin"}
    source = standins._template(name, PACKAGE="aws-neuronx-tools", VERSION="2.32.28.0", **values)
    exec(compile(source, name, "exec"), ns)
    ns["hw"] = hw
    return ns


def test_parse_neuron_monitor_reads_the_sandbox_stand_ins_report(tmp_path, monkeypatch):
    ns = load_standin("neuron_monitor.py.in", monkeypatch, tmp_path)
    proc = {"pid": 4321, "tag": "triton-0", "cores": [0, 1], "start": 0, "ticks": 0, "utime": 0, "stime": 0,
            "rss": 123}
    ns["runtime_processes"] = lambda: [proc]  # no /proc scan: one made-up runtime
    line = json.dumps(ns["report"](ns["hw"], 5.0, ns["Sampler"](), None), separators=(",", ":"))
    counts = probes.parse_neuron_monitor(line + "\n")
    assert counts == {**{f"device{d}.{c}": 0 for d in (0, 1) for c in (
        "mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")},
        **{f"runtime.triton-0.{k}": 0
           for k in ("generic", "numerical", "transient", "model", "runtime", "hardware")}}
    assert sorted(k for k in counts if is_hw_error_counter(k)) == [
        "device0.mem_ecc_uncorrected", "device0.sram_ecc_uncorrected", "device1.mem_ecc_uncorrected",
        "device1.sram_ecc_uncorrected", "runtime.triton-0.hardware"]


# `neuron-ls -j` as the neuron-ls user guide shows it on a trn2 (two of its 16 devices) ...
NEURON_LS_TRN2 = """[
    {
        "neuron_device": 0,
        "bdf": "cc:00.0",
        "cpu_affinity": "48-95,144-191",
        "numa_node": "1",
        "connected_to": [12, 3, 4, 1],
        "nc_count": 4,
        "logical_neuroncore_config": 2,
        "memory_size": 103079215104,
        "neuroncore_ids": [0, 1, 2, 3],
        "neuron_processes": [
            {"pid": 113985, "command": "neuron-bench exec --run-as-cc-neff --...",
             "neuron_runtime_version": "2.0.0"}
        ]
    },
    {
        "neuron_device": 15,
        "bdf": "f7:00.0",
        "cpu_affinity": "48-95,144-191",
        "numa_node": "1",
        "connected_to": [11, 14, 3, 12],
        "nc_count": 4,
        "logical_neuroncore_config": 2,
        "memory_size": 103079215104,
        "neuroncore_ids": [60, 61, 62, 63],
        "neuron_processes": [
            {"pid": 113985, "command": "neuron-bench exec --run-as-cc-neff --...",
             "neuron_runtime_version": "2.0.0"},
            {"pid": 2001, "command": "", "neuron_runtime_version": "2.34.10"}
        ]
    }
]"""
# ... and as a trn1.2xlarge prints it with nothing running (no trailing newline)
NEURON_LS_IDLE = """[
    {
        "neuron_device": 0,
        "bdf": "0000:00:1e.0",
        "cpu_affinity": "0-7",
        "numa_node": "-1",
        "connected_to": null,
        "nc_count": 2,
        "memory_size": 34359738368,
        "neuroncore_ids": [
            0,
            1
        ],
        "neuron_processes": []
    }
]"""


def test_parse_neuron_ls_pids():
    assert probes.parse_neuron_ls_pids(NEURON_LS_TRN2) == {2001: [60, 61, 62, 63],
                                                           113985: [0, 1, 2, 3, 60, 61, 62, 63]}
    assert probes.parse_neuron_ls_pids(NEURON_LS_IDLE) == {}
    older = [{"neuron_device": 1, "nc_count": 2, "neuron_processes": [{"pid": 7, "command": "x"}]}]
    # no neuroncore_ids: device x nc_count
    assert probes.parse_neuron_ls_pids(json.dumps(older)) == {7: [2, 3]}
    wrapped = {"instance": {"instance_type": "trn2.3xlarge"}, "neuron_devices": json.loads(NEURON_LS_TRN2)}
    assert probes.parse_neuron_ls_pids(json.dumps(wrapped)) == probes.parse_neuron_ls_pids(NEURON_LS_TRN2)
    junk = [{"neuron_device": 0, "neuroncore_ids": [0], "neuron_processes": [
        {"pid": "12"}, {"pid": 0}, {"pid": True}, "x", {"pid": 9}]}, "junk"]
    assert probes.parse_neuron_ls_pids(json.dumps(junk)) == {9: [0]}
    assert probes.foreign(probes.parse_neuron_ls_pids(NEURON_LS_TRN2), ours={113985, 5}) == \
        {2001: [60, 61, 62, 63]}


@pytest.mark.parametrize(("text", "words"), [
    ("", "not JSON"), ("FATA[0000] Failed to discover neuron devices", "not JSON"),
    ('{"error": "x"}', "no device list"), ("42", "no device list")])
def test_parse_neuron_ls_refuses_what_it_cannot_read_in_one_line(text, words):
    with pytest.raises(ProbeError, match=f"^neuron-ls: {words}") as exc:
        probes.parse_neuron_ls_pids(text)
    assert "\n" not in str(exc.value)


def test_parse_neuron_ls_reads_the_sandbox_stand_ins_output(tmp_path, monkeypatch):
    ns = load_standin("neuron_ls.py.in", monkeypatch, tmp_path, LEGACY="False")
    hog = {"pid": 4242, "command": "python3 hog.py", "neuron_runtime_version": ""}
    ns["device_processes"] = lambda cores_per_device=1: {1: [hog]}  # no /proc scan
    records = ns["device_records"](ns["hw"], ns["present_devices"]())
    text = json.dumps(records, indent=4)  # as `neuron-ls -j` prints them
    assert probes.parse_neuron_ls_pids(text) == {4242: [2, 3]}


SMI = ("0, 0, 0\n"
       "1, 2, 5\n"
       "2, [N/A], [N/A]\n"
       "3, [Not Supported], 1\r\n"
       "\n")


def test_parse_nvidia_smi_errors():
    rows = probes.parse_nvidia_smi_errors(SMI)
    vol, agg = "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total"
    assert rows == {0: {vol: 0, agg: 0}, 1: {vol: 2, agg: 5}, 2: {vol: None, agg: None},
                    3: {vol: None, agg: 1}}
    assert probes.gpu_ecc_total(rows) == 2
    assert probes.gpu_ecc_total(rows, "ecc.errors.uncorrected.aggregate.total") == 6
    header = "index, ecc.errors.uncorrected.volatile.total, ecc.errors.uncorrected.aggregate.total\n"
    assert probes.parse_nvidia_smi_errors(header + SMI) == rows  # without noheader
    assert probes.parse_nvidia_smi_errors("") == {}
    assert probes.parse_nvidia_smi_errors("0, N/A\n", ("index", "ecc.errors.uncorrected.volatile.total")) == \
        {0: {"ecc.errors.uncorrected.volatile.total": None}}


@pytest.mark.parametrize(("text", "words"), [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
     "latest NVIDIA driver is installed and running.\n", "is not a row of 3 values"),
    ("0, 0\n", "is not a row of 3 values"),
    ("GPU-0, 0, 0\n", "is not a row of 3 values"),
    ("0, 1, lots\n", "ecc.errors.uncorrected.aggregate.total 'lots' is not a count"),
    ("0, -1, 0\n", "is not a count"),
])
def test_parse_nvidia_smi_refuses_what_it_cannot_read_in_one_line(text, words):
    with pytest.raises(ProbeError, match="^nvidia-smi: ") as exc:
        probes.parse_nvidia_smi_errors(text)
    assert words in str(exc.value) and "\n" not in str(exc.value)


KERNEL_LOG = """\
Okt 06 17:59:27 balrog kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.
Okt 06 17:59:27 balrog kernel: NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.
May 13 17:19:01 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: \
ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type FAULT_PDE ACCESS_TYPE_READ
May  6 00:38:27 alex kernel: [ 4909.922970] NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 \
00000000
[ 4910.000001] NVRM: Xid (PCI:0000:3B:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit \
error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.
eth0: link up
"""


def test_parse_xid_events_and_count_those_against_the_host():
    events = probes.parse_xid_events(KERNEL_LOG)
    assert events == [("0000:01:00", 79), ("0000:08:00", 31), ("0000:01:00", 13), ("0000:3b:00", 48)]
    assert probes.count_xids(events) == 2  # 31 and 13 are the application's own
    assert probes.count_xids(events, ignore=()) == 4
    assert probes.parse_xid_events("") == [] and probes.parse_xid_events("NVRM: Xid (garbage): x") == []


@pytest.mark.parametrize(("text", "count"), [("0\n", 0), ("3", 3), ("  12 \n", 12), ("'7'\n", 7)])
def test_parse_docker_restart_count(text, count):
    assert probes.parse_docker_restart_count(text) == count


@pytest.mark.parametrize("text", ["", "\n", "-1", "<no value>", "Error: No such object: triton-0\n", "1\n2\n",
                                  "²"])
def test_parse_docker_restart_count_refuses_anything_else_in_one_line(text):
    with pytest.raises(ProbeError, match=r"^docker inspect: restart count .* is not a whole number$") as exc:
        probes.parse_docker_restart_count(text)
    assert "\n" not in str(exc.value)
