"""The pure part of a release rollout (:mod:`tritonfleet.fleet.releaseroll`): its options and their
validation, the plan (which of the inventory's hosts are the canary, the release root and the release relative
to it), what a host's pull state says (:func:`serves`, :func:`refused`, :func:`describe`) and what one bounded
wait for the hosts saw (:class:`Waited`). No S3, no SSH, no clock: each function reads its arguments only
(:func:`load_hosts`: the inventory).

:mod:`tritonfleet.fleet.releaseroll` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonfleet.fleet import release as rel

#: Seconds the hosts have to serve a release, per phase (canary, fleet, rollback), when none is given.
DEFAULT_WAIT = 120.0
#: Seconds between two reads of the hosts' pull states.
POLL = 1.0
#: Seconds of the metric gate's bake when none is given (the traffic canary's).
DEFAULT_BAKE = 120.0


class ReleaseRolloutError(rel.ReleaseError):
    """A release rollout refused or stopped before anything changed (one line)."""


@dataclass
class Options:
    inventory: str
    release: str  # relative to the root (v2, releases/2026-11-27) or a full s3:// URI below it
    group: str = "canary"  # the canary: the hosts with this models_pull_group (RELEASE.<group>)
    root: str | None = None  # the release root; None: the hosts' models_s3_uri (one for all of them)
    endpoint_url: str | None = None
    region: str | None = None
    wait: float = DEFAULT_WAIT  # seconds per phase for the hosts to serve (canary, fleet, rollback)
    qa: bool = True  # the QA gate on the canary hosts that have qa_suites
    prometheus: str | None = None  # the metric gate's Prometheus; None: no metric gate
    bake: float | None = None  # seconds the canary serves before the metric gate (DEFAULT_BAKE when None)
    max_error_ratio: float = 0.01
    max_latency_ratio: float = 1.5
    reports_dir: str = "reports"
    poll: float = POLL
    step_timeout: float = 1800  # seconds one QA run may take (the rollout's --step-timeout)
    project: str = "."  # where deploys/ live (the project checkout)


@dataclass(frozen=True)
class Plan:
    """What a rollout moves: the release (relative to ``root``), the canary hosts (``group``) and the rest."""

    root: str
    release: str
    group: str
    canary: list[str]
    rest: list[str]
    data: dict[str, dict]

    @property
    def hosts(self) -> list[str]:
        return self.canary + self.rest


@dataclass
class Waited:
    """One bounded wait: the hosts seen serving (seconds after the wait began), those that refused the release
    (why), each host's last state, and how the wait ended."""

    served: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    last: dict[str, dict | None] = field(default_factory=dict)
    timed_out: bool = False
    interrupted: bool = False
    read_error: str | None = None

    def behind(self, hosts: list[str]) -> list[str]:
        return [h for h in hosts if h not in self.served]


# -- validation and the hosts, pure -------------------------------------------------------------------------------

def validate(opts: Options) -> None:
    """The options, before the inventory is read (one line)."""
    rel.validate_group(opts.group)
    if not opts.wait > 0:
        raise ReleaseRolloutError(f"--wait {opts.wait:g}: expected seconds above 0")
    if opts.bake is not None and not opts.bake > 0:
        raise ReleaseRolloutError(f"--bake {opts.bake:g}: expected seconds above 0")
    if opts.bake is not None and not opts.prometheus:
        raise ReleaseRolloutError("--bake needs --prometheus: the metric gate compares the canary hosts' metrics "
                                  "with the other hosts' after the bake")
    if not 0 <= opts.max_error_ratio <= 1:
        raise ReleaseRolloutError(f"--max-error-ratio {opts.max_error_ratio:g}: expected a ratio 0-1 (0.01: 1% "
                                  "of requests)")
    if not opts.max_latency_ratio > 0:
        raise ReleaseRolloutError(f"--max-latency-ratio {opts.max_latency_ratio:g}: expected a factor above 0")
    if opts.root is not None:
        rel.parse_root(opts.root)


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, (str, int)) and str(value).strip().lower() in ("true", "yes", "1", "on"))


def _names(hosts: list[str], most: int = 8) -> str:
    return ", ".join(hosts[:most]) + (f" and {len(hosts) - most} more" if len(hosts) > most else "")


def plan(opts: Options, hosts: list[tuple[str, dict]]) -> Plan:
    """The canary and the rest among ``hosts`` (the inventory's Triton hosts), the release root and the release
    relative to it; ReleaseRolloutError (one line) for an inventory a release rollout cannot move."""
    inv = opts.inventory
    if not hosts:
        raise ReleaseRolloutError(f"{inv}: no hosts")
    push = [n for n, d in hosts if not _flag(d.get("models_pull"))]
    if push:
        raise ReleaseRolloutError(
            f"{inv}: {_names(push)}: models_pull is not true: a release rollout moves pull-mode hosts only (set "
            "models_pull: true and run deploys/models.py, or use an inventory of the pull-mode hosts; "
            "`tritonfleet rollout` rolls push-mode hosts)")
    if opts.root is not None:
        root = rel.root_uri_of(*rel.parse_root(opts.root))
    else:
        roots: dict[str, list[str]] = {}
        for name, data in hosts:
            uri = data.get("models_s3_uri")
            if not uri:
                raise ReleaseRolloutError(f"{name}: no models_s3_uri (the release root it follows): set it, or "
                                          "pass --root s3://BUCKET/PREFIX")
            try:
                found = rel.root_uri_of(*rel.parse_root(str(uri)))
            except rel.ReleaseError as exc:
                raise ReleaseRolloutError(f"{name}: models_s3_uri: {exc}") from None
            roots.setdefault(found, []).append(name)
        if len(roots) > 1:
            which = "; ".join(f"{r} ({_names(h, 3)})" for r, h in sorted(roots.items()))
            raise ReleaseRolloutError(f"{inv}: the hosts follow {len(roots)} release roots ({which}): roll each out "
                                      "with an inventory of its own, or pass --root s3://BUCKET/PREFIX")
        root = next(iter(roots))
    canary = [n for n, d in hosts if d.get("models_pull_group") == opts.group]
    if not canary:
        groups = sorted({str(d["models_pull_group"]) for _, d in hosts if d.get("models_pull_group")})
        said = f"its groups: {', '.join(groups)}" if groups else "no host has a models_pull_group"
        raise ReleaseRolloutError(f"{inv}: no host has models_pull_group {opts.group!r} ({said}): the canary is a "
                                  "host group: set models_pull_group on the canary hosts and run deploys/models.py, "
                                  "or name another --group")
    rest = [n for n, _ in hosts if n not in canary]
    if opts.prometheus and not rest:
        raise ReleaseRolloutError(f"--prometheus: every host of {inv} is in group {opts.group!r}: the metric gate "
                                  "compares the canary with other hosts")
    return Plan(root, rel.relative_release(root, opts.release), opts.group, canary, rest, dict(hosts))


def load_hosts(inventory: str) -> list[tuple[str, dict]]:
    """The inventory's Triton hosts: every host but the ``lb`` group's and those without an accelerator (as
    ``tritonfleet status`` and the rollout leave them out)."""
    from tritonfleet.access.health import is_balancer
    from tritonfleet.access.inventory import load_inventory_groups
    from tritonfleet.fleet.haproxy import GROUP

    everyone, members = load_inventory_groups(inventory)
    balancers = set(members.get(GROUP, []))
    return [(n, d) for n, d in everyone if n not in balancers and not is_balancer(d)]


# -- a host's pull state, pure -----------------------------------------------------------------------------------

def _failures(state: dict | None) -> int:
    try:
        return int((state or {}).get("failures") or 0)
    except (TypeError, ValueError):
        return 0


def serves(state: dict | None, release: str) -> bool:
    """The host serves ``release`` and its pointer names it, without a failure since."""
    return (isinstance(state, dict) and state.get("release") == release and state.get("pointed") == release
            and _failures(state) == 0)


def refused(state: dict | None, release: str, before: dict | None) -> bool:
    """The host's agent tried ``release`` and failed, since ``before`` (its state before the pointer was written:
    a host that already failed the release counts once it failed again)."""
    if not isinstance(state, dict) or state.get("pointed") != release or _failures(state) < 1:
        return False
    stale = isinstance(before, dict) and before.get("pointed") == release and _failures(before) >= 1
    return not stale or _failures(state) > _failures(before)


def describe(state: dict | None) -> str:
    """What a host's pull state says, for a message (one line)."""
    if not isinstance(state, dict):
        return "no pull state (unreachable, or its pull agent never wrote one)"
    served, pointed, n = state.get("release"), state.get("pointed"), _failures(state)
    words = [f"serves {served}" if served else "serves no release yet"]
    if pointed != served:
        words.append(f"its pointer names {pointed}" if pointed else "its pointer names no release")
    if n:
        words.append(f"{n} failed tr{'y' if n == 1 else 'ies'}")
    if state.get("last_error"):
        words.append(" ".join(str(state["last_error"]).split())[:300])
    return ", ".join(words[:2]) + (": " + "; ".join(words[2:]) if words[2:] else "")


def _one_line(exc: BaseException) -> str:
    return (" ".join(str(exc).split()) or type(exc).__name__)[:600]
