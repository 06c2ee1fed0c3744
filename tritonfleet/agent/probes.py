"""The host watchdog's parsers of what its probes read: the output of the tools the ``tritonfleet-watchdog``
service runs on the host, made into the counts its :class:`.watchpolicy.HostSample` and
:class:`.watchpolicy.ServerSample` hold. Pure: no I/O (the service runs the tools), standard library only
(Python 3.9).

:func:`parse_neuron_monitor` (a neuron-monitor report; :func:`accumulate` adds up its per-period counts),
:func:`parse_neuron_ls_pids` (``neuron-ls -j``; :func:`foreign` keeps the processes that are not ours),
:func:`parse_nvidia_smi_errors` (``nvidia-smi --query-gpu`` CSV; :func:`gpu_ecc_total`),
:func:`parse_xid_events` (kernel log lines; :func:`count_xids`), :func:`parse_docker_restart_count`
(``docker inspect``). Each raises :class:`.watchpolicy.ProbeError` (one line) on output it cannot read at all
and skips what it does not know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .watchpolicy import ProbeError


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _arr(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _one_line(text: str, limit: int = 120) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _json_documents(text: str, tool: str) -> list[Any]:
    """The JSON document of ``text``, or those of a stream of them (one a line), where a line cut short (the
    stream read mid-write) is skipped."""
    try:
        return [json.loads(text)]
    except ValueError as exc:
        problem = str(exc) if text.strip() else "no output"
    docs: list[Any] = []
    for line in text.splitlines():
        if line.strip():
            try:
                docs.append(json.loads(line))
            except ValueError:
                continue
    if not docs:
        raise ProbeError(f"{tool}: no JSON in its output ({_one_line(problem)})")
    return docs


# The report's format (awsdocs-neuron.readthedocs-hosted.com, "Neuron Monitor User Guide", "The JSON output
# format"; AWS's companion neuron-monitor-prometheus.py): one JSON document a line,
#   {"neuron_runtime_data": [{"pid", "neuron_runtime_tag", "error", "report": {"execution_stats":
#        {"error_summary": {"generic", "numerical", "transient", "model", "runtime", "hardware"}, ...},
#        ...}}],
#    "system_data": {"neuron_hw_counters": {"period", "error", "neuron_devices": [{"neuron_device_index",
#        "mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"}]}, ...},
#    "instance_info": {...}, "neuron_hardware_info": {..., "error"}}
# (older tools: "inference_stats" for "execution_stats"). The numbers are per period: AWS's exporter adds each
# report's values to its hardware_ecc_events_total and execution_errors_total counters, and so does this
# repository's stand-in exporter (tritonfleet/sandbox/standins/neuron_monitor_prometheus.py.in, held to it by
# tests/unit/test_sandbox_neuron_monitor.py); the stand-in monitor prints these groups in this shape.
# A group or runtime whose "error" is set is skipped, as AWS's exporter does.
def parse_neuron_monitor(text: str) -> dict[str, int]:
    """Neuron error counts in neuron-monitor output (one report, or several: their sum):
    ``device<N>.<counter>`` from ``system_data.neuron_hw_counters`` and ``runtime.<tag>.<kind>`` from each
    runtime's ``error_summary``. Per period: add them up with :func:`accumulate` for a
    :class:`.watchpolicy.HostSample`."""
    counts: dict[str, int] = {}
    for doc in _json_documents(text, "neuron-monitor"):
        doc = _obj(doc)
        hw = _obj(_obj(doc.get("system_data")).get("neuron_hw_counters"))
        if not hw.get("error"):
            for device in _arr(hw.get("neuron_devices")):
                device = _obj(device)
                index = device.get("neuron_device_index")
                if not _count(index):
                    continue
                for name, value in device.items():
                    if name != "neuron_device_index" and _count(value):
                        key = f"device{index}.{name}"
                        counts[key] = counts.get(key, 0) + value
        for runtime in _arr(doc.get("neuron_runtime_data")):
            runtime = _obj(runtime)
            if not runtime or runtime.get("error"):
                continue
            tag = str(runtime.get("neuron_runtime_tag") or runtime.get("pid") or "unknown")
            report = _obj(runtime.get("report"))
            for group in ("execution_stats", "inference_stats"):
                stats = _obj(report.get(group))
                if stats.get("error"):
                    continue
                for kind, value in _obj(stats.get("error_summary")).items():
                    if _count(value):
                        key = f"runtime.{tag}.{kind}"
                        counts[key] = counts.get(key, 0) + value
    return counts


def accumulate(totals: Mapping[str, int], counts: Mapping[str, int]) -> dict[str, int]:
    """``totals`` plus one report's per-period ``counts`` (the cumulative counters a HostSample holds)."""
    out = dict(totals)
    for name, value in counts.items():
        out[name] = out.get(name, 0) + value
    return out


def _devices(doc: Any) -> list[Any] | None:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        if "neuron_device" in doc:
            return [doc]
        for value in doc.values():  # a wrapper object (neuron-ls --output-format json, Neuron 2.34 and later)
            if isinstance(value, list) and \
                    any(isinstance(d, dict) and "neuron_processes" in d for d in value):
                return value
    return None


# `neuron-ls -j` (neuron-ls user guide, awsdocs-neuron.readthedocs-hosted.com "Neuron LS User Guide", and
# captures of trn1.2xlarge / trn2.48xlarge output): a JSON array, one object per device:
#   {"neuron_device": 0, "bdf", "cpu_affinity", "numa_node", "connected_to", "nc_count": 4,
#    "logical_neuroncore_config": 2, "memory_size", "neuroncore_ids": [0, 1, 2, 3],
#    "neuron_processes": [{"pid": 113985, "command": "...", "neuron_runtime_version": "2.0.0"}]}
# Older releases have no "neuroncore_ids" (the cores are then device x nc_count + 0..nc_count-1); the
# repository's stand-in (tritonfleet/sandbox/standins/neuron_common.py.in) prints the same records. AWS
# announced the end of -j with Neuron 2.34 (its replacement, --output-format json, wraps the devices in an
# object): a wrapper object holding such a device list is read too.
def parse_neuron_ls_pids(text: str) -> dict[int, list[int]]:
    """pid -> the NeuronCores of the devices it has open, from ``neuron-ls -j`` (the host's pids)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ProbeError(f"neuron-ls: not JSON ({_one_line(str(exc))})") from None
    devices = _devices(doc)
    if devices is None:
        raise ProbeError(f"neuron-ls: no device list in its JSON ({_one_line(text)})")
    held: dict[int, set[int]] = {}
    for device in devices:
        device = _obj(device)
        ids = device.get("neuroncore_ids")
        if isinstance(ids, list) and all(_count(c) for c in ids):
            cores = set(ids)
        elif _count(device.get("neuron_device")) and _count(device.get("nc_count")):
            first = device["neuron_device"] * device["nc_count"]
            cores = set(range(first, first + device["nc_count"]))
        else:
            cores = set()
        for proc in _arr(device.get("neuron_processes")):
            pid = _obj(proc).get("pid")
            if isinstance(pid, int) and _count(pid) and pid > 0:
                held.setdefault(pid, set()).update(cores)
    return {pid: sorted(cores) for pid, cores in sorted(held.items())}


def foreign(held: Mapping[int, Sequence[int]], ours: Iterable[int]) -> dict[int, list[int]]:
    """The entries of ``held`` (pid -> cores) whose pid is none of ``ours`` (our containers' processes)."""
    mine = set(ours)
    return {pid: list(cores) for pid, cores in held.items() if pid not in mine}


#: What the GPU probe asks nvidia-smi for: ``nvidia-smi --query-gpu=<these> --format=csv,noheader,nounits``.
GPU_QUERY_FIELDS = ("index", "ecc.errors.uncorrected.volatile.total",
                    "ecc.errors.uncorrected.aggregate.total")
# nvidia-smi prints "[N/A]" for a value a GPU does not have (ECC off, a T4 in some modes), "[Not Supported]",
# "[Unknown Error]" and the like in brackets too.
_SMI_NONE = re.compile(r"^\[.*\]$|^N/A$", re.IGNORECASE)
_DIGITS = re.compile(r"^[0-9]+$")


def parse_nvidia_smi_errors(text: str, fields: Sequence[str] = GPU_QUERY_FIELDS
                            ) -> dict[int, dict[str, int | None]]:
    """GPU index -> {field: count, or None where nvidia-smi says ``[N/A]``} from ``--query-gpu`` CSV output
    (``fields`` in the query's order, ``index`` first; a header line is skipped)."""
    if not fields or fields[0] != "index":
        raise ValueError("the query must start with index")
    rows: dict[int, dict[str, int | None]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if not line.strip() or [c.split(" [")[0] for c in cells] == list(fields):
            continue
        if len(cells) != len(fields) or not _DIGITS.match(cells[0]):
            raise ProbeError(f"nvidia-smi: {_one_line(line)!r} is not a row of {len(fields)} values")
        row: dict[str, int | None] = {}
        for name, cell in zip(fields[1:], cells[1:]):  # noqa: B905 - equal lengths; 3.9
            if _DIGITS.match(cell):
                row[name] = int(cell)
            elif _SMI_NONE.match(cell):
                row[name] = None
            else:
                raise ProbeError(f"nvidia-smi: {name} {cell!r} is not a count")
        rows[int(cells[0])] = row
    return rows


def gpu_ecc_total(rows: Mapping[int, Mapping[str, int | None]],
                  name: str = "ecc.errors.uncorrected.volatile.total") -> int:
    """The host's uncorrected ECC errors: the sum over its GPUs (``[N/A]`` counting 0)."""
    return sum(row.get(name) or 0 for row in rows.values())


# Kernel log lines of the NVIDIA driver (NVIDIA's Xid documentation, docs.nvidia.com/deploy/xid-errors):
#   NVRM: Xid (PCI:0000:00:1e): 79, pid=1122, GPU has fallen off the bus.
#   NVRM: Xid (0000:01:00): 13, 0005 00000000 ...          (older drivers: no "PCI:")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)\): "
                  r"(\d+)")
#: Xids that are the application's own faults (NVIDIA's Xid catalog resolves them by restarting the
#: application): a graphics engine exception, a GPU memory page fault, GPU stopped processing, a preemptive
#: cleanup after earlier errors.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})


def parse_xid_events(text: str) -> list[tuple[str, int]]:
    """(PCI address, Xid) of each NVRM Xid line in kernel log text (``journalctl -k``, dmesg)."""
    return [(m.group(1).lower(), int(m.group(2))) for m in _XID.finditer(text)]


def count_xids(events: Iterable[tuple[str, int]], ignore: Iterable[int] = APPLICATION_XIDS) -> int:
    """How many of ``events`` count against the host (``ignore``: the application's own)."""
    skip = set(ignore)
    return sum(1 for _, code in events if code not in skip)


def parse_docker_restart_count(text: str) -> int:
    """The count ``docker inspect --format '{{.RestartCount}}' <container>`` prints."""
    value = text.strip().strip("'\"")
    if not _DIGITS.match(value):
        raise ProbeError(f"docker inspect: restart count {_one_line(text)!r} is not a whole number")
    return int(value)
