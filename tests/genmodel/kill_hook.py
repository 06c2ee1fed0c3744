"""``tritonfleet-agent`` with a SIGKILL at one step of its switch-and-load sequence (tests only).

    python kill_hook.py AGENT-ARGS...                       (TF_KILL_AT unset: prints the steps, kills nothing)
    TF_KILL_AT=after:switch python kill_hook.py AGENT-ARGS...

The steps: ``after:pending`` (the pending record written), ``after:switch`` (``current`` switched), then for
each load and unload ``before:load:M``, ``during:load:M`` (the request sent and being served: killed 0.3 s
into it) and ``after:load:M``. Each step is announced on stderr as ``step STEP``. The kill is a real SIGKILL
of the agent process, from the process itself at that point; nothing in the agent knows about it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from tritonfleet.agent import cli, layout, live

KILL_AT = os.environ.get("TF_KILL_AT", "")


def step(name: str) -> None:
    print(f"step {name}", file=sys.stderr, flush=True)
    if name == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


def wrap_call(action: str):
    def wrapper(self, model: str):
        where = f"{model}@{self.server.name}"
        step(f"before:{action}:{where}")
        during = f"during:{action}:{where}"
        if KILL_AT == during:  # send it, let Triton work on it, then die with the request in flight
            threading.Thread(target=original[action], args=(self, model), daemon=True).start()
            time.sleep(0.3)
        step(during)
        reason = original[action](self, model)
        step(f"after:{action}:{where}")
        return reason
    return wrapper


original = {"load": live.GrpcTriton.load, "unload": live.GrpcTriton.unload}
live.GrpcTriton.load = wrap_call("load")
live.GrpcTriton.unload = wrap_call("unload")

_write_json = live._write_json


def write_json(path: str, data: dict) -> None:
    _write_json(path, data)
    if path.endswith(live.PENDING):
        step("after:pending")


live._write_json = write_json
_switch = layout.Repo.switch


def switch(self, *args, **kwargs):
    out = _switch(self, *args, **kwargs)
    step("after:switch")
    return out


layout.Repo.switch = switch

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
