"""The launcher of one sandbox host: it runs ``systemd-nspawn -b`` and runs it again whenever the host
reboots (nspawn exits with status 133), as EC2 restarts a rebooted instance on the same disk.

A power-off inside the host, a crash of nspawn or SIGTERM/SIGINT to the launcher end it (SIGTERM is passed
on to nspawn, which shuts the host down cleanly); the host is then stopped, and ``sandbox up`` starts it
again with its disk. A host that reboots too often in a row is left stopped.

Run: ``python -m tritonfleet.sandbox.hostrun --host NAME -- systemd-nspawn ... -b -D ROOT ...``
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

REBOOT_STATUS = 133  # systemd-nspawn's exit status when the container asked for a reboot
MAX_QUICK_REBOOTS = 5  # in a row, each within QUICK_SECONDS of its start: a boot loop
QUICK_SECONDS = 10.0


def _say(host: str, msg: str) -> None:
    print(f"tritonfleet-sandbox hostrun {host}: {msg}", flush=True)


def main(args: list[str] | None = None) -> int:
    args = sys.argv[1:] if args is None else args
    if "--" not in args or args.index("--") + 1 >= len(args):
        print("usage: python -m tritonfleet.sandbox.hostrun [--host NAME] -- COMMAND...", file=sys.stderr)
        return 2
    opts, cmd = args[: args.index("--")], args[args.index("--") + 1 :]
    host = opts[opts.index("--host") + 1] if "--host" in opts[:-1] else "host"
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    quick = 0
    while True:
        started = time.monotonic()
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        if stopping:  # the signal came before ``child`` was set
            child.send_signal(signal.SIGTERM)
        status = child.wait()
        if stopping or status != REBOOT_STATUS:
            _say(host, f"stopped (exit status {status})")
            return status if status >= 0 else 128 - status
        quick = quick + 1 if time.monotonic() - started < QUICK_SECONDS else 0
        if quick >= MAX_QUICK_REBOOTS:
            _say(host, f"rebooted {quick} times in a row within {QUICK_SECONDS:.0f}s each; leaving it stopped")
            return 1
        _say(host, "rebooted; starting it again")


if __name__ == "__main__":
    sys.exit(main())
