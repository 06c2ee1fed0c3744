"""``tritonfleet-agent pull``: pull mode's command line (``tritonfleet-models-pull.service``; what it does:
``pull.py``'s docstring): the sub-command's arguments (the sync's, ``cli.py``'s, and its own) and its command.
``cli.py`` builds the parser and registers this sub-command (``build_parser``, which imports this module when it
runs: this module imports the sync's arguments, setup and summary from ``cli.py``). Exit codes and errors: as
``cli.py``'s docstring says. Python 3.9, like the rest of the agent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict

from .args import _seconds_in
from .cli import PROG, _sync_arguments, summary, sync_setup


def _group(value: str) -> str:
    from .pull import GROUP

    if not GROUP.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r}: expected a group name like canary (a-z, 0-9, _ and -)")
    return value


def _add_pull(commands) -> None:
    pull = commands.add_parser(
        "pull", help="pull mode (tritonfleet-models-pull.service): watch the release pointer in S3 and serve the "
                     "release it names",
        description="Watch SOURCE/RELEASE (SOURCE/RELEASE.GROUP with --group) with conditional requests; when it "
                    "names another release, sync SOURCE/<release>/ into DIR and reload the changed models live "
                    "(pull.py's docstring). Failures keep the current release serving and back off.")
    _sync_arguments(pull)
    pull.add_argument("--group", type=_group, metavar="GROUP",
                      help="follow SOURCE/RELEASE.GROUP while it exists (a canary group), else SOURCE/RELEASE")
    pull.add_argument("--interval", type=_seconds_in(0.2, 3600), default=2.0, metavar="S",
                      help="seconds between two checks of the pointer (default 2)")
    pull.add_argument("--max-backoff", type=_seconds_in(1, 86400), default=300.0, metavar="S",
                      help="the longest wait before a failed release is tried again (default 300)")
    pull.add_argument("--state", metavar="FILE", help="the JSON state file each check leaves (tritonfleet status)")
    pull.add_argument("--textfile-dir", metavar="DIR",
                      help="node_exporter's textfile directory (tritonfleet_models_pull.prom is written there)")
    pull.add_argument("--once", action="store_true",
                      help="one check (and sync), then exit: 0 the host serves the pointed release, 1 it does not")
    pull.set_defaults(run=_pull, parser=pull, verify=False)


def _pull(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import logging
    import signal

    from .pull import State, Watcher

    if args.dry_run and not args.once:
        parser.error("--dry-run goes with --once")
    if args.textfile_dir and not os.path.isdir(args.textfile_dir):
        parser.error(f"--textfile-dir {args.textfile_dir}: not a directory")
    if args.state and os.path.isdir(args.state):
        parser.error(f"--state {args.state}: a directory, not a file")
    setup = sync_setup(args, parser)
    if isinstance(setup, int):
        return setup
    opts, live = setup
    state = State.load(args.state) if args.state else State()
    state.failures, state.next_check = 0, None  # this process tries at once
    watcher = Watcher(opts, group=args.group, live=live, state_path=None if args.dry_run else args.state,
                      textfile_dir=None if args.dry_run else args.textfile_dir, interval=args.interval,
                      max_backoff=args.max_backoff, state=state)
    if args.once:
        check = watcher.check(dry_run=args.dry_run)
        if check.result is not None:
            for warning in check.result.warnings:
                print(f"{PROG}: warning: {warning}", file=sys.stderr)
        if args.json and check.result is not None:
            print(json.dumps({**asdict(check.result), "release": watcher.state.pointed}, sort_keys=True))
        elif args.json and check.error is None:  # already served (not reached: --once always syncs)
            print(json.dumps({"status": "unchanged", "release": watcher.state.pointed}, sort_keys=True))
        elif check.result is not None and check.error is None:
            print(f"release {watcher.state.pointed}: {summary(check.result)}")
        if check.error:
            print(f"{PROG}: error: {check.error}", file=sys.stderr)
            return 1
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # between passes; a sync in flight is bounded

    def report(check) -> None:
        if check.action == "synced" and check.result is not None and check.result.status != "unchanged":
            print(f"release {watcher.state.pointed}: {summary(check.result)}", flush=True)
        elif check.error and (check.changed or check.action == "failed"):
            print(f"{PROG}: error: {check.error} (next try in "
                  f"{max(0.0, (watcher.state.next_check or 0) - time.time()):.0f} s)", file=sys.stderr, flush=True)

    print(f"watching {watcher.root}{watcher.pointers[0].key[len(opts.prefix):]} every {args.interval:g} s"
          + (f" (else {watcher.root}RELEASE)" if args.group else ""), flush=True)
    try:
        watcher.run(stop, report)
    except KeyboardInterrupt:
        pass
    return 0
