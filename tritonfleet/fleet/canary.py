"""The rollout's load balancer and its traffic canary (:mod:`tritonfleet.fleet.rollout` runs it).

Traffic canary (``canary_weight``, with ``prometheus``): once every canary host is updated and back, the load
balancer sends ``canary_weight`` % of the requests to them for ``bake`` seconds, then the gates
(:mod:`tritonfleet.fleet.gates`) compare their servers' error ratio and latency per request with the other hosts'
over that window. A breach (or gates that cannot be evaluated) takes the canary hosts out, restores the weights,
rolls them back (step ``canary gate``, the message naming the metric, the values and the window) and starts no
further batch; a pass restores the weights, puts the canary hosts back among the others and goes on. The
verdict is the report's ``traffic_canary``. Everything a traffic canary needs is checked by :func:`validate`
before anything changes; :func:`load_balancer` is the balancer the options name.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonfleet.fleet.rollout import Options, Rollout

#: The traffic canary's lines (weights, the gates' verdict, a canary host's rollback) at INFO.
logger = logging.getLogger(__name__)

#: Bake seconds of a traffic canary when none is given.
DEFAULT_BAKE = 120.0
LB_KINDS = ("elbv2", "haproxy")

# The rollout module imports this one: what it needs from there is imported where it is used.

#: Options a host's ``rollout_<name>`` data may give (roles/rollout.py); a command-line option wins.
FROM_DATA = ("lb", "target_group", "lb_timeout", "canary_weight", "bake", "prometheus", "max_error_ratio",
             "max_latency_ratio")


def options_from_data(opts: Options, hosts: list[tuple[str, dict]]) -> Options:
    """``opts`` with what the hosts' ``rollout_*`` data says for every option the command line left unset
    (``opts.given``). A rollout has one value of each: hosts that disagree, or a value roles/rollout.py refuses,
    are one line naming the host and the field (before anything changes)."""
    import dataclasses

    from pydantic import ValidationError

    from roles.rollout import Settings
    from tritonfleet.fleet.rollout import RolloutError

    changes: dict[str, Any] = {}
    for name in FROM_DATA:
        if name in opts.given:
            continue
        key = f"rollout_{name}"
        said = [(host, data[key]) for host, data in hosts if data.get(key) is not None]
        if not said:
            continue
        first_host, value = said[0]
        for host, other in said[1:]:
            if other != value:
                raise RolloutError(f"{host}: {key}: {other!r} differs from {first_host}'s {value!r}: a rollout has "
                                   f"one value (set it for every host, e.g. in group_data/all.py, or pass "
                                   f"--{name.replace('_', '-')})")
        try:
            checked = getattr(Settings.model_validate({name: value}), name)
        except ValidationError as exc:
            why = "; ".join(e["msg"] for e in exc.errors())
            raise RolloutError(f"{first_host}: {key}: {value!r}: {why}") from None
        if name == "lb":
            checked = "haproxy" if checked == "haproxy" else None  # elbv2: when a target group is given
        changes[name] = checked
    if changes:
        logger.info("from the inventory's data: " + ", ".join(f"rollout_{k}={v}" for k, v in changes.items()))
    return dataclasses.replace(opts, **changes) if changes else opts


def traffic_canary(rollout: Rollout, batch: list[str]) -> str | None:
    """Weights, bake, gates (module docstring) for the canary ``batch`` of ``rollout``; why the rollout stops,
    None to go on."""
    from tritonfleet.fleet import gates
    from tritonfleet.fleet.rollout import _one_line

    o = rollout.opts
    assert rollout.lb is not None and o.canary_weight is not None and o.prometheus
    bake = o.bake or DEFAULT_BAKE
    rollout.traffic = rec = {"weight": o.canary_weight, "bake": bake, "hosts": list(batch), "set": None,
                             "verdict": None, "error": None}
    if any(rollout.results[n].status != "updated" for n in batch):
        rec["error"] = "a canary host failed: no traffic was sent to it"
        return "canary hosts failed: no traffic canary, no further batches"
    canary = [(n, rollout.hosts[n]) for n in batch]
    try:
        rec["set"] = rollout.lb.set_weights(canary, o.canary_weight)
    except Exception as exc:
        rec["error"] = f"weights: {_one_line(exc)}"
        _restore(rollout, rec, rejoin=True)
        return f"traffic canary: weights not set: {_one_line(exc)}"
    logger.info(f"traffic canary: {rec['set']}; baking {bake:g}s")
    if logger.isEnabledFor(logging.DEBUG) and hasattr(rollout.lb, "view"):
        try:
            for v in rollout.lb.view():
                logger.debug("balancer %s %s: %s (%s) %s, weight %s, sessions %s", v.balancer, v.pool, v.server,
                             v.host or "?", v.state, v.weight, v.sessions)
        except Exception as exc:  # noqa: BLE001 - only for the log
            logger.debug("balancer view: %s", _one_line(exc))
    started = rollout.clock()
    while not rollout.stop_requested and rollout.clock() - started < bake:
        rollout.sleep(min(5.0, bake - (rollout.clock() - started)))
    if rollout.stop_requested:
        rec["error"] = "interrupted during the bake"
        _restore(rollout, rec, rejoin=True)
        return "interrupted"
    rest = [n for n in rollout.order if n not in batch]
    try:
        verdict = gates.evaluate(o.prometheus, list(batch), rest, bake, max_error_ratio=o.max_error_ratio,
                                 max_latency_ratio=o.max_latency_ratio)
        rec["verdict"] = verdict.to_dict()
        line = verdict.line()
    except gates.GateError as exc:
        verdict, line = None, f"gates not evaluated: {_one_line(exc)}"
        rec["error"] = line
    if verdict is not None and verdict.ok:
        logger.info(f"canary gates {line}")
        if not _restore(rollout, rec, rejoin=True):
            return f"traffic canary: weights not restored: {rec['error']}"
        return None
    logger.info(f"canary gates failed: {line}; rolling the canary back")
    _restore(rollout, rec, rejoin=False)
    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        list(pool.map(lambda n: _gate_rollback(rollout, n, line), batch))
    return f"canary gate: {line}: no further batches"


def _restore(rollout: Rollout, rec: dict, rejoin: bool) -> bool:
    from tritonfleet.fleet.rollout import _join, _one_line

    assert rollout.lb is not None
    try:
        rollout.lb.restore_weights(rejoin=rejoin)
        return True
    except Exception as exc:
        rec["error"] = _join(rec["error"] or "", f"restore: {_one_line(exc)}")
        logger.info(f"traffic canary: weights not restored: {_one_line(exc)}")
        return False


def _gate_rollback(rollout: Rollout, name: str, why: str) -> None:
    from tritonfleet.fleet.rollout import NOT_FAILED, _join

    r, data = rollout.results[name], rollout.hosts[name]
    started = time.monotonic()
    try:
        rollout._rollback(r, data, "canary gate", why)
        if r.status != "rollback failed":
            rollout._put_back(r, data)
    except Exception as exc:
        r.status = "rollback failed" if r.status in NOT_FAILED else r.status
        r.message = _join(r.message, f"{type(exc).__name__}: {exc}")
    r.seconds = round(r.seconds + time.monotonic() - started, 1)
    logger.info(f"{name}: {r.status} ({r.failed_step})")


def validate(opts: Options) -> None:
    """Every option a load balancer and a traffic canary need, checked before anything changes (one line)."""
    from tritonfleet.fleet.rollout import RolloutError

    kind = opts.lb_kind
    if kind is not None and kind not in LB_KINDS:
        raise RolloutError(f"--lb {kind}: expected one of {', '.join(LB_KINDS)}")
    if kind == "elbv2" and not opts.target_group:
        raise RolloutError("--lb elbv2 needs --target-group (the target group the hosts serve in)")
    if kind == "haproxy" and opts.target_group:
        raise RolloutError("--target-group is for --lb elbv2 (--lb is haproxy)")
    w = opts.canary_weight
    if w is not None and not 0 <= w <= 100:
        raise RolloutError(f"--canary-weight {w}: expected a percentage 0-100")
    if opts.bake is not None and opts.bake <= 0:
        raise RolloutError(f"--bake {opts.bake:g}: expected seconds above 0")
    if (w is not None or opts.bake is not None) and not opts.prometheus:
        what = "--canary-weight" if w is not None else "--bake"
        raise RolloutError(f"{what} needs --prometheus: a traffic canary is judged by comparing its hosts' metrics "
                           "with the others' (without one, roll out in batches without weights)")
    if opts.bake is not None and w is None:
        raise RolloutError("--bake needs --canary-weight (the share of the traffic the canary gets while it bakes)")
    if not 0 <= opts.max_error_ratio <= 1:
        raise RolloutError(f"--max-error-ratio {opts.max_error_ratio:g}: expected a ratio 0-1 (0.01: 1% of requests)")
    if opts.max_latency_ratio <= 0:
        raise RolloutError(f"--max-latency-ratio {opts.max_latency_ratio:g}: expected a factor above 0")
    if w is None:
        return
    if kind is None:
        raise RolloutError("--canary-weight needs a load balancer (--lb haproxy, or --lb elbv2 with --target-group)")
    if opts.canary < 1:
        raise RolloutError("--canary-weight needs canary hosts (--canary 1 or more)")
    if kind == "elbv2":
        if not opts.canary_target_group:
            raise RolloutError("--canary-weight with --lb elbv2 needs --canary-target-group (the canary hosts' "
                               "target group)")
        if bool(opts.listener_arn) == bool(opts.rule_arn):
            raise RolloutError("--canary-weight with --lb elbv2 needs one of --listener-arn or --rule-arn (whose "
                               "forward action gets the weights)")


def load_balancer(opts: Options, hosts: list[tuple[str, dict]], balancers: list[tuple[str, dict]]):
    """The :class:`tritonfleet.fleet.lb.LoadBalancer` of the options, checked against the hosts; None without one."""
    from tritonfleet.fleet.lb import LoadBalancerError, TargetGroup
    from tritonfleet.fleet.rollout import RolloutError

    lb: Any = None
    try:
        if opts.lb_kind == "elbv2":
            assert opts.target_group
            canary = ({"listener_arn": opts.listener_arn, "rule_arn": opts.rule_arn,
                       "canary_arn": opts.canary_target_group} if opts.canary_target_group else {})
            lb = TargetGroup(opts.target_group, opts.region, delay=opts.lb_delay,
                             attempts=max(1, round(opts.lb_timeout / opts.lb_delay)), **canary)
        elif opts.lb_kind == "haproxy":
            from tritonfleet.fleet.haproxy import HAProxy, poll_interval

            lb = HAProxy(balancers, timeout=opts.lb_timeout, interval=poll_interval(balancers, opts.lb_delay))
        if lb is not None:
            lb.check(hosts)
    except LoadBalancerError as exc:
        raise RolloutError(str(exc)) from None
    return lb
