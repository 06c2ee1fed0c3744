"""The host watchdog's policy: the conditions the ``tritonfleet-watchdog`` service watches for, the actions it
may take about them and their bounds, the samples it judges (:class:`ServerSample`, :class:`HostSample`), the
:class:`Action` it returns, and :class:`Policy`, the checked form of the policy data (one-line
:class:`PolicyError`). :mod:`.watchdog` applies it; a role can check policy data with this module alone. Pure:
no I/O, standard library only (Python 3.9).

**Conditions** (each with an ordered chain of actions in the :class:`Policy`):

- ``not_ready``: the server has not been ready for ``not_ready_seconds`` (every sample since then not ready);
- ``crash_loop``: the container's restart count grew by ``crash_restarts`` or more within
  ``crash_window_seconds`` (increments seen in the window; a count that drops, a new container, is no growth);
- ``leak``: the resident set grows: over the last ``leak_window_seconds``, with ``leak_min_samples`` samples
  or more spanning half the window or more, the least-squares slope is above ``leak_mib_per_hour``, the
  fitted growth (slope x span) is above ``leak_min_growth_pct`` of the window's first sample, *and* the floor
  rose (the lowest sample of the window's later half is above the lowest of its earlier half by a quarter of
  the fitted growth or more). A fit over the window evens out a garbage collector's sawtooth (its rises and
  drops cancel out), the floor check refuses what is left of it (a sawtooth comes back down to the same
  floor), the growth minimum ignores a small slow drift. The window restarts with each new process (a
  restart count that changed, a restart of ours);
- ``model_unready``: a model seen ready is now reported not ready (a model no longer listed was unloaded, and
  is forgotten); judged only while the server itself is ready;
- ``neuron_hw_error``: an uncorrectable or hardware error counter grew
  (:func:`.watchdog.is_hw_error_counter`);
- ``foreign_cores``: a process that is not one of our containers holds NeuronCores;
- ``gpu_xid`` / ``gpu_ecc``: the host's Xid count / uncorrected ECC count grew.

The first :class:`HostSample` is the counters' baseline; a counter that drops (a driver reload) starts a new
one.

**Actions**: ``report`` (a journal line and the metric only), ``restart`` (the service restarts the server,
taking it out of the load balancer first when one is configured), ``replace`` (the service calls
SetInstanceHealth Unhealthy through the instance profile, and the Auto Scaling group replaces the host),
``free-cores`` (the service ends the foreign processes in :attr:`Action.pids`; allowed only with
``allow_free_cores``).

**Bounds.** A chain is walked from its start each time its condition fires and the first action still
possible is taken: ``restart`` while the server had fewer than ``max_restarts_per_hour`` restarts of ours in
the last hour (3600 s, both ends included), ``replace`` once per ``replace_cooldown_seconds`` per host,
``free-cores`` once per foreign process; ``report`` always. When nothing in the chain is possible, a
``report`` says so. One restart per server per :meth:`.watchdog.Watchdog.observe` covers every condition that
asked for it.

**Hysteresis.** An action for a (server, condition) is followed by no other for that (server, condition)
until ``settle_seconds`` have passed, whether or not the condition cleared meanwhile (so a flapping condition
cannot restart a server more often either). Counter conditions are latched: growth seen during the settle
time is acted on when it ends.

**Policy data** (JSON or a dict; every field optional; a condition's chain replaces its default; ``[]`` turns
the condition off)::

    {"not_ready": ["restart", "report"], "crash_loop": ["report"], "leak": ["restart", "report"],
     "model_unready": ["restart", "report"], "neuron_hw_error": ["replace"], "foreign_cores": ["report"],
     "gpu_xid": ["report"], "gpu_ecc": ["replace"],
     "not_ready_seconds": 300, "crash_restarts": 3, "crash_window_seconds": 600,
     "leak_window_seconds": 1800, "leak_mib_per_hour": 256, "leak_min_growth_pct": 10, "leak_min_samples": 10,
     "max_restarts_per_hour": 3, "replace_cooldown_seconds": 3600, "settle_seconds": 600,
     "allow_free_cores": false}
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CONDITIONS = ("not_ready", "crash_loop", "leak", "model_unready", "neuron_hw_error", "foreign_cores",
              "gpu_xid", "gpu_ecc")
SERVER_CONDITIONS = frozenset(CONDITIONS[:4])
ACTIONS = ("report", "restart", "replace", "free-cores")

DEFAULT_CHAINS: dict[str, tuple[str, ...]] = {
    "not_ready": ("restart", "report"),
    "crash_loop": ("report",),  # docker's restart policy already restarts it: another restart adds nothing
    "leak": ("restart", "report"),
    "model_unready": ("restart", "report"),
    "neuron_hw_error": ("replace",),  # an uncorrectable error: the hardware is suspect
    "foreign_cores": ("report",),
    "gpu_xid": ("report",),  # many Xids are the application's own faults (13, 31, 43, 45)
    "gpu_ecc": ("replace",),
}

_SETTINGS: dict[str, type] = {  # the Policy's settings (defaults: the Policy's) and their kinds
    "not_ready_seconds": float, "crash_restarts": int, "crash_window_seconds": float,
    "leak_window_seconds": float, "leak_mib_per_hour": float, "leak_min_growth_pct": float,
    "leak_min_samples": int, "max_restarts_per_hour": int, "replace_cooldown_seconds": float,
    "settle_seconds": float, "allow_free_cores": bool,
}
_MIN_INT = {"crash_restarts": 1, "leak_min_samples": 3, "max_restarts_per_hour": 0}
_ZERO_OK = {"leak_mib_per_hour", "leak_min_growth_pct", "settle_seconds", "replace_cooldown_seconds"}


class PolicyError(ValueError):
    """Watchdog policy data that cannot be used: one line naming the field."""


class ProbeError(ValueError):
    """A probe's output that cannot be read at all: one line naming the tool."""


# -- observations and actions ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerSample:
    """One Triton server at time ``at`` (Unix seconds): ``ready`` (its readiness endpoint), ``restarts`` (the
    container's RestartCount), ``rss_bytes`` (its resident set) and each loaded model's readiness."""

    server: str
    at: float
    ready: bool
    restarts: int
    rss_bytes: int
    models: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class HostSample:
    """The host at ``at``: cumulative Neuron error counters (name -> count, see
    :func:`.probes.parse_neuron_monitor` and :func:`.probes.accumulate`), the NeuronCores each foreign process
    holds (pid -> cores), and the cumulative GPU Xid and uncorrected (double-bit) ECC error counts."""

    at: float
    neuron_errors: dict[str, int] = field(default_factory=dict)
    foreign_core_pids: dict[int, list[int]] = field(default_factory=dict)
    gpu_xid: int = 0
    gpu_ecc_dbe: int = 0


@dataclass(frozen=True)
class Action:
    """What to do: ``kind`` (report, restart, replace, free-cores) for ``server`` (None: the host) because of
    condition ``reason``; ``detail`` says what was seen; ``pids`` the processes ``free-cores`` ends."""

    kind: str
    server: str | None
    reason: str
    detail: str
    pids: tuple[int, ...] = ()

    def journal_line(self) -> str:
        """``watchdog: restart server triton-0: leak: rss grew 512 MiB/h over 600 s (1.2 GiB -> 1.3 GiB)``."""
        if self.kind == "replace":
            where = "host" + (f" for server {self.server}" if self.server else "")
        else:
            where = f"server {self.server}" if self.server else "host"
        return " ".join(f"watchdog: {self.kind} {where}: {self.reason}: {self.detail}".split())

    def labels(self) -> tuple[str, str, str]:
        """(server, reason, action) of the metric (server "" for the host)."""
        return (self.server or "", self.reason, self.kind)


# -- policy ----------------------------------------------------------------------------------------------

def _fail(name: str, problem: str) -> PolicyError:
    return PolicyError(f"watchdog policy: {name}: {problem}")


def _setting(name: str, value: Any) -> Any:
    kind = _SETTINGS[name]
    if kind is bool:
        if not isinstance(value, bool):
            raise _fail(name, f"must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(name, f"must be a number, got {value!r}")
    if kind is int:
        if value != int(value):
            raise _fail(name, f"must be a whole number, got {value!r}")
        if int(value) < _MIN_INT[name]:
            raise _fail(name, f"must be {_MIN_INT[name]} or more, got {value!r}")
        return int(value)
    if value < 0 or (value == 0 and name not in _ZERO_OK):
        raise _fail(name, f"must be {'0 or more' if name in _ZERO_OK else 'more than 0'}, got {value!r}")
    return float(value)


def _chain(condition: str, value: Any, allow_free_cores: bool) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise _fail(condition, f"must be a list of actions ({', '.join(ACTIONS)}), got {value!r}")
    chain: list[str] = []
    for action in value:
        if action not in ACTIONS:
            raise _fail(condition, f"unknown action {action!r} (known: {', '.join(ACTIONS)})")
        if action in chain:
            raise _fail(condition, f"{action!r} twice")
        if action == "restart" and condition not in SERVER_CONDITIONS:
            raise _fail(condition, "'restart' is for a server's conditions, this one is the host's")
        if action == "free-cores" and condition != "foreign_cores":
            raise _fail(condition, "'free-cores' is for foreign_cores only")
        if action == "free-cores" and not allow_free_cores:
            raise _fail(condition, "'free-cores' needs allow_free_cores: true")
        chain.append(action)
    if "report" in chain[:-1]:
        raise _fail(condition, "'report' must come last (what follows it would never run)")
    return tuple(chain)


@dataclass(frozen=True)
class Policy:
    """What the watchdog does about each condition (``chains``: condition -> actions in order) and the
    thresholds and bounds (see the module's docstring). Checked when made: :class:`PolicyError`."""

    chains: Mapping[str, Sequence[str]] = field(default_factory=lambda: dict(DEFAULT_CHAINS))
    not_ready_seconds: float = 300.0
    crash_restarts: int = 3
    crash_window_seconds: float = 600.0
    leak_window_seconds: float = 1800.0
    leak_mib_per_hour: float = 256.0
    leak_min_growth_pct: float = 10.0
    leak_min_samples: int = 10
    max_restarts_per_hour: int = 3
    replace_cooldown_seconds: float = 3600.0
    settle_seconds: float = 600.0
    allow_free_cores: bool = False

    def __post_init__(self) -> None:
        for name in _SETTINGS:
            object.__setattr__(self, name, _setting(name, getattr(self, name)))
        if not isinstance(self.chains, Mapping):
            raise _fail("chains", "must map conditions to lists of actions")
        unknown = sorted(set(self.chains) - set(CONDITIONS))
        if unknown:
            raise _fail(str(unknown[0]), f"unknown condition (known: {', '.join(CONDITIONS)})")
        chains = dict(DEFAULT_CHAINS)
        chains.update({c: _chain(c, v, self.allow_free_cores) for c, v in self.chains.items()})
        object.__setattr__(self, "chains", chains)

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> Policy:
        """A policy from plain data: condition names map to action lists, the other keys are settings."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise PolicyError(f"watchdog policy: must be an object of conditions and settings, got {data!r}")
        chains: dict[str, Any] = {}
        settings: dict[str, Any] = {}
        for key, value in data.items():
            if key in CONDITIONS:
                chains[key] = value
            elif key in _SETTINGS:
                settings[key] = value
            else:
                raise _fail(str(key), "unknown field (conditions: " + ", ".join(CONDITIONS) + "; settings: "
                            + ", ".join(_SETTINGS) + ")")
        return cls(chains=chains, **settings)

    @classmethod
    def from_json(cls, text: str) -> Policy:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PolicyError(f"watchdog policy: not valid JSON: {exc}") from None
        return cls.from_data(data)
