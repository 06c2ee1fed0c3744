"""``tritonfleet rollout``: the rolling rollout's command line (what it does: ``tritonfleet/fleet/rollout.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


@click.command()
@click.option("--inventory", "-i", envvar="TRITONFLEET_INVENTORY", help="pyinfra inventory file (SSH rollout).")
@click.option("--asg", help="Auto Scaling group: roll its launch template out by an instance refresh instead.")
@click.option("--min-healthy", type=click.IntRange(0, 100), default=90, show_default=True,
              help="--asg: MinHealthyPercentage of the refresh.")
@click.option("--checkpoints", default="", help="--asg: CheckpointPercentages, e.g. 10,50 (pause there).")
@click.option("--checkpoint-delay", type=click.IntRange(0, 172800), default=None,
              help="--asg: seconds to wait at each checkpoint.")
@click.option("--batch", type=click.IntRange(1, 1000), default=1, show_default=True, help="Hosts per batch.")
@click.option("--canary", type=click.IntRange(0, 1000), default=1, show_default=True,
              help="Hosts in the first batch, alone.")
@click.option("--fail-percent", type=click.FloatRange(0, 100), default=0, show_default=True,
              help="Stop starting batches once failed hosts exceed this share of the fleet.")
@click.option("--lb", "lb", type=click.Choice(["elbv2", "haproxy"]), default=None,
              help="Load balancer the hosts leave while they change: an ELBv2 target group (--target-group; the "
                   "default when one is given) or the HAProxy of the inventory's lb group (Runtime API over SSH).")
@click.option("--target-group", help="ELBv2 target group ARN: hosts leave it while they change.")
@click.option("--region", help="AWS region of the target group.")
@click.option("--lb-timeout", type=click.IntRange(10, 3600), default=None,
              help="Seconds a host may take to drain from the load balancer, and to be healthy in it again "
                   "(default: rollout_lb_timeout, 600).")
@click.option("--canary-weight", type=int, default=None,
              help="Traffic canary: percent (0-100) of the requests sent to the canary hosts for --bake seconds, "
                   "then judged against the other hosts by the gates (needs --prometheus and --lb).")
@click.option("--bake", type=float, default=None, help="Traffic canary: seconds it bakes (default 120).")
@click.option("--prometheus", help="Prometheus URL the canary gates ask (e.g. http://prometheus:9090).")
@click.option("--max-error-ratio", type=float, default=None,
              help="Canary gate: the canary's error ratio above which it is rolled back (0.01: 1% of requests; "
                   "default: rollout_max_error_ratio, 0.01).")
@click.option("--max-latency-ratio", type=float, default=None,
              help="Canary gate: the canary's latency per request above this times the others' rolls it back "
                   "(default: rollout_max_latency_ratio, 1.5).")
@click.option("--listener-arn", help="ELBv2 traffic canary: the listener whose default action gets the weights.")
@click.option("--rule-arn", help="ELBv2 traffic canary: the listener rule whose forward action gets the weights.")
@click.option("--canary-target-group", help="ELBv2 traffic canary: the canary hosts' target group ARN.")
@click.option("--deploy", default="deploys/serve.py", show_default=True, help="The deploy each host gets.")
@click.option("--reports", "reports_dir", default="reports", show_default=True, help="Where the report goes.")
@click.option("--limit", help="Only these hosts (comma separated).")
@click.option("--step-timeout", type=click.IntRange(60, 86400), default=1800, show_default=True,
              help="Seconds one pyinfra run on one host may take.")
def rollout(inventory: str | None, asg: str | None, min_healthy: int, checkpoints: str,
            checkpoint_delay: int | None, batch: int, canary: int, fail_percent: float, lb: str | None,
            target_group: str | None, region: str | None, lb_timeout: int | None, canary_weight: int | None,
            bake: float | None, prometheus: str | None, max_error_ratio: float | None,
            max_latency_ratio: float | None,
            listener_arn: str | None, rule_arn: str | None, canary_target_group: str | None, deploy: str,
            reports_dir: str, limit: str | None, step_timeout: int) -> None:
    """Roll the inventory's hosts through DEPLOY: canary, then batches; each host leaves the load balancer,
    is updated, passes the health gate and its QA suites, or is rolled back. With --canary-weight the canary
    then gets that share of the traffic for --bake seconds and the Prometheus gates compare it with the other
    hosts; a breach rolls it back. Exits non-zero when a host failed, a gate breached or the rollout stopped.
    With --asg, an instance refresh of the Auto Scaling group instead."""
    from tritonfleet.fleet import rollout as ro

    if asg:
        _asg(asg, region, min_healthy, checkpoints, checkpoint_delay)
        return
    if not inventory:
        raise click.ClickException("--inventory (or TRITONFLEET_INVENTORY) is required without --asg")

    if not Path(deploy).is_file():
        raise click.ClickException(f"--deploy {deploy}: no such file (run from the project checkout)")
    # what the command line sets wins; the rest comes from the hosts' rollout_* data (roles/rollout.py)
    optional: dict[str, Any] = {"target_group": target_group, "lb_timeout": lb_timeout, "lb": lb, "canary_weight": canary_weight,
                "bake": bake, "prometheus": prometheus, "max_error_ratio": max_error_ratio,
                "max_latency_ratio": max_latency_ratio}
    given = {k: v for k, v in optional.items() if v is not None}
    opts = ro.Options(inventory=inventory, batch=batch, canary=canary, fail_percent=fail_percent,
                      region=region, deploy=deploy, reports_dir=reports_dir,
                      limit=[h for h in (limit or "").split(",") if h] or None, step_timeout=step_timeout,
                      listener_arn=listener_arn, rule_arn=rule_arn, canary_target_group=canary_target_group,
                      given=frozenset(given), **given)
    try:
        code = ro.main(opts)
    except (ro.RolloutError, OSError, SyntaxError) as exc:
        raise click.ClickException(str(exc)) from None
    except SystemExit as exc:  # an inventory that refuses to load
        raise click.ClickException(str(exc)) from None
    raise SystemExit(code)


def _asg(group: str, region: str | None, min_healthy: int, checkpoints: str, delay: int | None) -> None:
    from tritonfleet.fleet import aws
    from tritonfleet.fleet.refresh import start_refresh, wait_refresh
    from tritonfleet.fleet.tags import FleetError

    try:
        points = [int(p) for p in checkpoints.split(",") if p.strip()]
    except ValueError:
        raise click.ClickException(f"--checkpoints {checkpoints}: expected percentages like 10,50") from None
    client = aws.client("autoscaling", region)
    try:
        refresh = start_refresh(client, group, min_healthy=min_healthy, checkpoints=points, checkpoint_delay=delay)
        click.echo(f"{group}: instance refresh {refresh} started", err=True)
        outcome = wait_refresh(client, group, refresh,
                               on_progress=lambda o: click.echo(f"{group}: {o.status} {o.percent}%", err=True))
    except FleetError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(outcome.line())
    raise SystemExit(0 if outcome.ok else 1)
