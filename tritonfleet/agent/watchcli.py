"""``tritonfleet-agent watchdog``: the host watchdog's command line (``tritonfleet-watchdog.service``; what it
does: ``watchrun.py``'s docstring): the sub-command's arguments and its command, which checks them and starts
the service. ``cli.py`` builds the parser and registers this sub-command (``build_parser``). Exit codes and
errors: as ``cli.py``'s docstring says. Python 3.9, like the rest of the agent.
"""

from __future__ import annotations

import argparse
import os

from .args import _endpoint, _region, _seconds_in


def _add_watchdog(commands) -> None:
    watchdog = commands.add_parser(
        "watchdog", help="the host watchdog (tritonfleet-watchdog.service): watch the Triton servers and the "
                         "accelerators, act on what the policy says",
        description="Every interval: probe this host's Triton servers (readiness, restarts, memory, models) and "
                    "its Neuron/GPU error counters, decide by the policy (restart, replace, free-cores, report), "
                    "act, write the textfile metric and the state file.")
    watchdog.add_argument("--policy", required=True, metavar="FILE",
                          help="the policy and the drain hook, JSON (watchrun.py's docstring)")
    watchdog.add_argument("--interval", type=_seconds_in(5, 3600), default=30.0, metavar="S",
                          help="seconds from one pass to the next (default 30)")
    watchdog.add_argument("--textfile-dir", required=True, metavar="DIR",
                          help="node_exporter's textfile directory (tritonfleet_watchdog.prom is written there)")
    watchdog.add_argument("--state", required=True, metavar="FILE",
                          help="the JSON state file the last pass leaves (for tritonfleet status)")
    watchdog.add_argument("--once", action="store_true", help="one pass, then exit")
    watchdog.add_argument("--header-file", metavar="FILE",
                          help="the restricted-API header for the repository index, 'name: value' (0600)")
    watchdog.add_argument("--neuron-exporter", type=_endpoint, metavar="URL",
                          help="neuron-monitor-prometheus.py's metrics URL (read instead of running neuron-monitor)")
    watchdog.add_argument("--endpoint-url", type=_endpoint, metavar="URL",
                          help="another Auto Scaling endpoint (for replace)")
    watchdog.add_argument("--region", type=_region, help="the Auto Scaling group's region (default: from IMDS)")
    watchdog.add_argument("--queue-time-fleet", metavar="FLEET",
                          help="publish each server's queue time per request to CloudWatch every minute, with "
                               "dimension fleet=FLEET (queuetime.py; fleet autoscale's metric)")
    watchdog.add_argument("--queue-time-family", metavar="FAMILY", help="the family dimension, e.g. inf2")
    watchdog.add_argument("--queue-time-url", action="append", default=[], type=_endpoint, metavar="URL",
                          help="a Triton server's metrics URL, http://127.0.0.1:8002/metrics (repeatable)")
    watchdog.set_defaults(run=_watchdog, parser=watchdog)


def _watchdog(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .watchpolicy import PolicyError
    from .watchrun import Options, QueueTimeOptions, load_config
    from .watchrun import main as watch

    if not os.path.isdir(args.textfile_dir):
        parser.error(f"--textfile-dir {args.textfile_dir}: not a directory")
    if os.path.isdir(args.state):
        parser.error(f"--state {args.state}: a directory, not a file")
    try:
        config = load_config(args.policy)
    except PolicyError as exc:
        parser.error(f"--policy {args.policy}: {exc}")
    queue_time = None
    if args.queue_time_fleet or args.queue_time_url or args.queue_time_family:
        if not (args.queue_time_fleet and args.queue_time_family and args.queue_time_url):
            parser.error("--queue-time-fleet, --queue-time-family and --queue-time-url go together")
        queue_time = QueueTimeOptions(tuple(args.queue_time_url), args.queue_time_fleet, args.queue_time_family)
    options = Options(config=config, interval=args.interval, textfile_dir=args.textfile_dir, state=args.state,
                      header_file=args.header_file, neuron_exporter=args.neuron_exporter,
                      endpoint_url=args.endpoint_url, region=args.region, queue_time=queue_time)
    return watch(options, once=args.once)
