"""The host watchdog's decision core: what the ``tritonfleet-watchdog`` service should do about what its
probes saw. Pure: no I/O but :func:`write_textfile`, no clock (time comes from the samples), standard library
only (Python 3.9), so every rule can be tested with made-up samples.

Every interval the service reads, per Triton server, a :class:`ServerSample` (readiness, the container's
restart count, the server's resident set, each model's readiness) and, per host, a :class:`HostSample`
(Neuron hardware error counters, NeuronCores held by processes that are not our containers, GPU Xid and
uncorrected ECC counts), hands them to :meth:`Watchdog.observe` and carries out the :class:`Action` list it
returns, writing each :meth:`Action.journal_line` to the journal and :func:`textfile` of
:attr:`Watchdog.counts` to node_exporter's textfile directory.

The rules :class:`Watchdog` applies (the conditions, the actions, their bounds and hysteresis) and the policy
data that sets them are described in :mod:`.watchpolicy`, which defines the samples, :class:`Action` and
:class:`Policy`; the parsers of the probes' output (:func:`parse_neuron_monitor`,
:func:`parse_neuron_ls_pids`, :func:`parse_nvidia_smi_errors`, :func:`parse_xid_events`,
:func:`parse_docker_restart_count`) are in :mod:`.probes`. This module re-exports the public names of both
(``__all__``).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .probes import (
    APPLICATION_XIDS,
    GPU_QUERY_FIELDS,
    accumulate,
    count_xids,
    foreign,
    gpu_ecc_total,
    parse_docker_restart_count,
    parse_neuron_ls_pids,
    parse_neuron_monitor,
    parse_nvidia_smi_errors,
    parse_xid_events,
)
from .watchpolicy import (
    ACTIONS,
    CONDITIONS,
    DEFAULT_CHAINS,
    SERVER_CONDITIONS,
    Action,
    HostSample,
    Policy,
    PolicyError,
    ProbeError,
    ServerSample,
)

__all__ = [
    # the engine and the textfile (this module)
    "HOUR", "LEAK_FLOOR_SHARE", "LEAK_MIN_COVERAGE", "MAX_POINTS", "MIB", "Watchdog", "increments",
    "is_hw_error_counter", "slope",
    "ACTIONS_METRIC", "LAST_RUN_METRIC", "escape_label", "textfile", "write_textfile",
    # the policy (watchpolicy)
    "ACTIONS", "CONDITIONS", "DEFAULT_CHAINS", "SERVER_CONDITIONS", "Action", "HostSample", "Policy",
    "PolicyError", "ProbeError", "ServerSample",
    # the parsers (probes)
    "APPLICATION_XIDS", "GPU_QUERY_FIELDS", "accumulate", "count_xids", "foreign", "gpu_ecc_total",
    "parse_docker_restart_count", "parse_neuron_ls_pids", "parse_neuron_monitor", "parse_nvidia_smi_errors",
    "parse_xid_events",
]

MIB = 1024 * 1024
HOUR = 3600.0

#: The leak fit needs samples spanning at least this part of ``leak_window_seconds`` (a server that just
#: started grows while it loads its models: a short fit would take that for a leak).
LEAK_MIN_COVERAGE = 0.5
#: A leak raises the floor too: the lowest sample of the window's later half must be above the lowest of its
#: earlier half by this share of the fitted growth (a straight line's floor rises by half of it; a garbage
#: collector's sawtooth comes back down to the same floor, whatever a fit over part of its teeth says).
LEAK_FLOOR_SHARE = 0.25
#: Most points a history window keeps, whatever the sampling rate (memory stays bounded).
MAX_POINTS = 10000


# -- history ---------------------------------------------------------------------------------------------

class _Window:
    """(time, value) points no older than ``max_age`` behind the newest, but for one before those (the
    baseline of the oldest increment in the window), and at most :data:`MAX_POINTS` of them."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self.points: deque[tuple[float, int]] = deque(maxlen=MAX_POINTS)

    def add(self, at: float, value: int) -> None:
        self.points.append((at, value))
        while len(self.points) >= 2 and self.points[1][0] < at - self.max_age:
            self.points.popleft()

    def since(self, start: float) -> list[tuple[float, int]]:
        return [p for p in self.points if p[0] >= start]

    def clear(self) -> None:
        self.points.clear()


def increments(points: Iterable[tuple[float, int]], start: float) -> int:
    """How much a counter grew in the increments seen at ``start`` or later (drops count as no growth)."""
    grown = 0
    pts = list(points)
    for (_, before), (at, after) in zip(pts, pts[1:]):  # noqa: B905 - 3.9
        if at >= start and after > before:
            grown += after - before
    return grown


def _fit(points: Sequence[tuple[float, int]]) -> tuple[float, float]:
    """(sxy, sxx) of a least-squares line through ``points`` (slope = sxy / sxx), about the first point."""
    t0, y0 = points[0]
    ts = [t - t0 for t, _ in points]
    ys = [y - y0 for _, y in points]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    sxx = sum((t - mt) ** 2 for t in ts)
    sxy = sum((t - mt) * (y - my) for t, y in zip(ts, ys))  # noqa: B905 - 3.9
    return sxy, sxx


def slope(points: Sequence[tuple[float, int]]) -> float:
    """The least-squares slope of ``points`` (value per second); 0.0 for fewer than two distinct times."""
    if len(points) < 2:
        return 0.0
    sxy, sxx = _fit(points)
    return sxy / sxx if sxx else 0.0


def _size(n: float) -> str:
    """``512 MiB``, ``1.2 GiB``."""
    if abs(n) >= 1024 * MIB:
        return f"{n / (1024 * MIB):.1f} GiB"
    return f"{n / MIB:.0f} MiB"


def _ranges(cores: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> ``0-2,5``."""
    spans: list[list[int]] = []
    for c in sorted(set(cores)):
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def is_hw_error_counter(name: str) -> bool:
    """Whether a Neuron counter (as :func:`parse_neuron_monitor` names it) counts uncorrectable or hardware
    errors: ``device<N>.mem_ecc_uncorrected``, ``device<N>.sram_ecc_uncorrected``,
    ``runtime.<tag>.hardware``. Corrected ECC events and the runtimes' other error kinds are not."""
    last = name.rsplit(".", 1)[-1]
    return last.endswith("_uncorrected") or (name.startswith("runtime.") and last == "hardware")


@dataclass
class _Finding:
    server: str | None
    condition: str
    detail: str
    pids: tuple[int, ...] = ()


class _ServerState:
    def __init__(self, policy: Policy) -> None:
        self.rss = _Window(policy.leak_window_seconds)
        self.restarts = _Window(policy.crash_window_seconds)
        self.not_ready_since: float | None = None
        self.ready_models: set[str] = set()
        self.last_at: float | None = None
        self.our_restarts: deque[float] = deque()


# -- the watchdog ----------------------------------------------------------------------------------------

class Watchdog:
    """The state machine: feed it samples with :meth:`observe`, carry out the actions it returns."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.counts: dict[tuple[str, str, str], int] = {}
        self.last_run: float | None = None
        self._servers: dict[str, _ServerState] = {}
        self._fired: dict[tuple[str | None, str], float] = {}
        self._pending: dict[tuple[str | None, str], dict[str, list[int]]] = {}
        self._host_at: float | None = None
        self._neuron: dict[str, int] | None = None
        self._gpu: tuple[int, int] | None = None  # (Xid events, uncorrected ECC errors)
        self._last_replace: float | None = None
        self._freed: set[int] = set()

    # ... the conditions

    def _server(self, sample: ServerSample) -> list[_Finding]:
        p, chains = self.policy, self.policy.chains
        st = self._servers.setdefault(sample.server, _ServerState(p))
        if st.last_at is not None and sample.at <= st.last_at:
            return []  # a stale or repeated sample
        st.last_at = sample.at
        found: list[_Finding] = []
        name = sample.server

        if sample.ready:
            st.not_ready_since = None
        else:
            if st.not_ready_since is None:
                st.not_ready_since = sample.at
            waited = sample.at - st.not_ready_since
            if waited >= p.not_ready_seconds and chains["not_ready"]:
                found.append(_Finding(name, "not_ready", f"not ready for {waited:.0f} s"))

        if st.restarts.points and sample.restarts != st.restarts.points[-1][1]:
            st.rss.clear()  # a new process: its memory is no continuation of the old one's
        st.restarts.add(sample.at, sample.restarts)
        start = sample.at - p.crash_window_seconds
        grown = increments(st.restarts.points, start)
        if grown >= p.crash_restarts and chains["crash_loop"]:
            found.append(_Finding(name, "crash_loop", f"restart count grew by {grown} in "
                                  f"{p.crash_window_seconds:.0f} s (now {sample.restarts})"))

        st.rss.add(sample.at, sample.rss_bytes)
        if chains["leak"]:
            detail = self._leak(st.rss.since(sample.at - p.leak_window_seconds))
            if detail:
                found.append(_Finding(name, "leak", detail))

        if sample.ready:  # (a server that is not ready may list no models: what it says then is not used)
            st.ready_models &= set(sample.models)  # a model no longer listed was unloaded
            down = sorted(m for m, ok in sample.models.items() if not ok and m in st.ready_models)
            st.ready_models |= {m for m, ok in sample.models.items() if ok}
            if down and chains["model_unready"]:
                found.append(_Finding(name, "model_unready", "not ready any more: " + ", ".join(down)))
        return found

    def _leak(self, points: Sequence[tuple[float, int]]) -> str:
        p = self.policy
        if len(points) < p.leak_min_samples:
            return ""
        span = points[-1][0] - points[0][0]
        if span < p.leak_window_seconds * LEAK_MIN_COVERAGE:
            return ""
        sxy, sxx = _fit(points)  # one division each below: a threshold compares exactly
        per_hour = sxy * HOUR / (sxx * MIB)
        growth = sxy * span / sxx
        first = points[0][1]
        pct = sxy * span * 100.0 / (sxx * first) if first > 0 else (math.inf if growth > 0 else 0.0)
        middle = points[0][0] + span / 2
        floor_rise = (min(y for t, y in points if t >= middle) - min(y for t, y in points if t < middle))
        if per_hour > p.leak_mib_per_hour and pct > p.leak_min_growth_pct and \
                floor_rise >= LEAK_FLOOR_SHARE * growth:
            return (f"rss grew {per_hour:.0f} MiB/h over {span:.0f} s "
                    f"({_size(first)} -> {_size(points[-1][1])})")
        return ""

    def _host(self, host: HostSample) -> list[_Finding]:
        chains = self.policy.chains
        if self._host_at is not None and host.at <= self._host_at:
            return []
        self._host_at = host.at
        self._latch("neuron_hw_error", self._neuron,
                    {k: v for k, v in host.neuron_errors.items() if is_hw_error_counter(k)})
        self._neuron = dict(host.neuron_errors)
        xid, ecc = self._gpu if self._gpu is not None else (None, None)
        self._latch("gpu_xid", None if xid is None else {"Xid events": xid}, {"Xid events": host.gpu_xid})
        self._latch("gpu_ecc", None if ecc is None else {"uncorrected ECC errors": ecc},
                    {"uncorrected ECC errors": host.gpu_ecc_dbe})
        self._gpu = (host.gpu_xid, host.gpu_ecc_dbe)

        found: list[_Finding] = []
        for condition in ("neuron_hw_error", "gpu_xid", "gpu_ecc"):
            grown = self._pending.get((None, condition))
            if grown and chains[condition]:
                found.append(_Finding(None, condition, ", ".join(
                    f"{name} {before} -> {after}" for name, (before, after) in sorted(grown.items()))))
        foreign = {pid: sorted(set(cores)) for pid, cores in host.foreign_core_pids.items()}
        self._freed &= set(foreign)
        if foreign and chains["foreign_cores"]:
            found.append(_Finding(None, "foreign_cores", "; ".join(
                f"pid {pid} holds cores {_ranges(cores) or '?'}" for pid, cores in sorted(foreign.items())),
                tuple(sorted(foreign))))
        return found

    def _latch(self, condition: str, before: Mapping[str, int] | None, now: Mapping[str, int]) -> None:
        """Remember counters that grew since the previous host sample until the condition is acted on
        (the first sample is the baseline; a counter first seen later starts from 0)."""
        if before is None or not self.policy.chains[condition]:
            return
        for name, value in now.items():
            old = before.get(name, 0)
            if value > old:
                seen = self._pending.setdefault((None, condition), {})
                seen[name] = [seen[name][0] if name in seen else old, value]

    # ... the decisions

    def _unavailable(self, now: float, kind: str, found: _Finding) -> str | None:
        """Why ``kind`` cannot be done now (None: it can)."""
        p = self.policy
        if kind == "restart":
            if found.server is None:  # a host condition's chain holds no restart (Policy)
                return "no server to restart"
            done = self._servers[found.server].our_restarts
            recent = sum(1 for t in done if now - t <= HOUR)
            if recent >= p.max_restarts_per_hour:
                return f"restart budget spent ({recent} in the last hour)"
        elif kind == "replace":
            if self._last_replace is not None and now - self._last_replace < p.replace_cooldown_seconds:
                return f"replace already asked {now - self._last_replace:.0f} s ago"
        elif kind == "free-cores":
            if not p.allow_free_cores:
                return "free-cores not allowed"
            if not set(found.pids) - self._freed:
                return "free-cores already tried for pid " + ", ".join(map(str, found.pids))
        return None

    def _decide(self, now: float, found: _Finding, restarting: set[str]) -> Action | None:
        key = (found.server, found.condition)
        last = self._fired.get(key)
        if last is not None and now - last < self.policy.settle_seconds:
            return None
        skipped: list[str] = []
        chosen = ""
        for kind in self.policy.chains[found.condition]:
            if kind == "restart" and found.server in restarting:
                self._fired[key] = now  # this round's restart of the server covers this condition too
                self._pending.pop(key, None)
                return None
            why = self._unavailable(now, kind, found)
            if why is None:
                chosen = kind
                break
            skipped.append(why)
        detail = found.detail
        if not chosen:
            chosen, detail = "report", f"{detail}; nothing left to do: {'; '.join(skipped)}"
        elif skipped:
            detail = f"{detail}; escalated: {'; '.join(skipped)}"
        self._fired[key] = now
        self._pending.pop(key, None)
        pids: tuple[int, ...] = ()
        if chosen == "restart" and found.server is not None:
            restarting.add(found.server)
            st = self._servers[found.server]
            st.our_restarts.append(now)
            st.rss.clear()
        elif chosen == "replace":
            self._last_replace = now
        elif chosen == "free-cores":
            pids = tuple(sorted(set(found.pids) - self._freed))
            self._freed |= set(pids)
        return Action(chosen, found.server, found.condition, detail, pids)

    def observe(self, servers: Iterable[ServerSample], host: HostSample | None = None) -> list[Action]:
        """The actions to take now, given this interval's samples (the newest sample's time is "now")."""
        samples = sorted(servers, key=lambda s: (s.server, s.at))
        times = [s.at for s in samples] + ([host.at] if host is not None else [])
        if not times:
            return []
        now = max(times)
        found: list[_Finding] = []
        for sample in samples:
            found += self._server(sample)
        if host is not None:
            found += self._host(host)
        restarting: set[str] = set()
        actions = [a for a in (self._decide(now, f, restarting) for f in found) if a is not None]
        for action in actions:
            self.counts[action.labels()] = self.counts.get(action.labels(), 0) + 1
        self._prune(now)
        self.last_run = now
        return actions

    def restarts_in_last_hour(self, server: str, now: float) -> int:
        """Restarts of ours of ``server`` in the hour up to ``now`` (both ends included)."""
        st = self._servers.get(server)
        return 0 if st is None else sum(1 for t in st.our_restarts if 0 <= now - t <= HOUR)

    def _prune(self, now: float) -> None:
        keep = max(HOUR, self.policy.leak_window_seconds, self.policy.crash_window_seconds,
                   self.policy.settle_seconds)
        for name, st in list(self._servers.items()):
            while st.our_restarts and now - st.our_restarts[0] > HOUR:
                st.our_restarts.popleft()
            if st.last_at is not None and now - st.last_at > keep:
                del self._servers[name]  # not seen for long: gone
        self._fired = {k: t for k, t in self._fired.items() if now - t < keep}


# -- the textfile ----------------------------------------------------------------------------------------

ACTIONS_METRIC = "tritonfleet_watchdog_actions_total"
LAST_RUN_METRIC = "tritonfleet_watchdog_last_run_timestamp_seconds"


def escape_label(value: str) -> str:
    """A label value in the text exposition format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def textfile(counts: Mapping[tuple[str, str, str], int], last_run: float) -> str:
    """The Prometheus text exposition of the action counters ((server, reason, action) -> count), sorted,
    and of the last run's time."""
    lines = [f"# HELP {ACTIONS_METRIC} Actions the host watchdog took, by server, reason and action.",
             f"# TYPE {ACTIONS_METRIC} counter"]
    for (server, reason, action), count in sorted(counts.items()):
        lines.append(f'{ACTIONS_METRIC}{{server="{escape_label(server)}",reason="{escape_label(reason)}",'
                     f'action="{escape_label(action)}"}} {_number(count)}')
    lines += [f"# HELP {LAST_RUN_METRIC} Unix time of the host watchdog's last run.",
              f"# TYPE {LAST_RUN_METRIC} gauge", f"{LAST_RUN_METRIC} {_number(last_run)}"]
    return "\n".join(lines) + "\n"


def write_textfile(path: str, text: str, *, durable: bool = True) -> None:
    """Write ``text`` to ``path`` atomically (node_exporter never reads half a file): a temporary file in the
    same directory, fsynced (unless not ``durable``: a file rewritten every few seconds, where a lost one is
    harmless), mode 0644, renamed over ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
