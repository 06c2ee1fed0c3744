"""The agent SIGKILLed at every step of a live update's switch-and-load sequence, against the real Triton
2.51 on CPU (explicit model control on DIR/current), with a client asking every model throughout.

What a client may see while an update is in flight and a kill interrupts it (README "Model repositories"):
- a model the update does not touch never fails;
- a changed model never fails; it answers from the old files, then from the new ones, never back;
- an added model is absent (Triton answers "unknown model") until it is ready, then stays ready: never
  ready and then missing;
- a removed model serves until it is unloaded, then is gone for good.
The next run, with nothing new in S3, finishes the update: every model serves the new release.

The kill points are the steps tests/genmodel/kill_hook.py announces: after the pending record is written,
after ``current`` is switched, and before, during (the request in flight) and after each load and unload.
One server here: a client spread over several servers of a host also sees them switch one after the other
(README "Model repositories").
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_live_reload_triton import ExplicitTriton, header_file, model

from tests.unit.test_agent_sync import AWS_ENV, ROOT, set_remote, sync_args

pytestmark = pytest.mark.slow

HOOK = Path(__file__).resolve().parent / "kill_hook.py"
MODELS = ("steady", "changing", "arriving", "leaving")
V1 = {**model("steady", 7, config=0), **model("changing", 1), **model("leaving", 5)}
V2 = {**model("steady", 7, config=0), **model("changing", 2), **model("arriving", 3)}
SERVES = {"V1": {"steady": 7, "changing": 1, "arriving": None, "leaving": 5},
          "V2": {"steady": 7, "changing": 2, "arriving": 3, "leaving": None}}
#: The suite kills each kind of step once, in one direction or the other (the updates alternate, each a
#: killed run and its rerun): the record, the switch, an added model's load before, during and after it, a
#: changed model's load and a removed model's unload in flight. TF_LIVE_KILLS=all kills both directions at
#: every step (22 kills, about 3 minutes here).
SUITE_POINTS = {"V2": ("after:switch", "during:load:arriving@a", "after:load:arriving@a", "during:unload:leaving@a"),
                "V1": ("after:pending", "before:load:leaving@a", "during:load:changing@a", "during:unload:arriving@a")}
ALL = os.environ.get("TF_LIVE_KILLS") == "all"
MAX_PROBES = 20_000  # the prober's bound, whatever happens
#: how long the prober may take to ask every model once after an agent run ended (its requests wait for a busy CPU)
CATCH_UP_S = 15.0


class Prober:
    """Asks every model on every server, one after the other, over HTTP, until stopped: (time, model, answer
    or None), as a client of the host's servers (a load balancer over them) sees them."""

    def __init__(self, servers: list[ExplicitTriton]) -> None:
        self.ports = [s.http_port for s in servers]
        self.seen: list[tuple[float, int, str, int | None]] = []  # (time, server, model, answer)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _ask(self, conn: http.client.HTTPConnection, name: str) -> int | None:
        body = json.dumps({"inputs": [{"name": "X", "shape": [1], "datatype": "INT32", "data": [0]}]})
        conn.request("POST", f"/v2/models/{name}/infer", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return json.loads(data)["outputs"][0]["data"][0] if resp.status == 200 else None

    def _run(self) -> None:
        conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for port in self.ports]
        for _ in range(MAX_PROBES):
            if self.stop.is_set():
                return
            for i, port in enumerate(self.ports):
                for name in MODELS:
                    try:
                        answer = self._ask(conns[i], name)
                    except (OSError, http.client.HTTPException):
                        conns[i].close()
                        conns[i] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                        answer = -1  # the server did not answer at all
                    self.seen.append((time.monotonic(), i, name, answer))
            time.sleep(0.02)

    def since(self, began: float) -> list[dict[str, list[int | None]]]:
        """Per server, per model: the answers since ``began``."""
        out = [{name: [] for name in MODELS} for _ in self.ports]
        for t, server, name, answer in list(self.seen):
            if t >= began:
                out[server][name].append(answer)
        return out

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def _runs(answers: list) -> list:
    """The answers with repeats folded: [None, None, 3, 3] -> [None, 3]."""
    return [a for i, a in enumerate(answers) if i == 0 or answers[i - 1] != a]


def check(seen: list[dict[str, list[int | None]]], old: dict, new: dict, point: str) -> None:
    """What each server's clients saw from the start of an update ``old`` -> ``new`` (model -> answer, None:
    absent) to the end of the run that finished it (see the module docstring)."""
    for server, models in enumerate(seen):
        for name in MODELS:
            runs, was, now = _runs(models[name]), old[name], new[name]
            allowed = [[now]] if was == now else [[was, now], [now]]
            assert runs in allowed, (point, f"server {server}", name, runs)


def test_a_kill_at_any_step_of_a_live_update_shows_clients_no_model_that_comes_and_goes(
        triton_layout, endpoint, s3, bucket, tmp_path):  # noqa: F811
    """Updates back and forth between V1 and V2, each direction first run through (it names its steps), then
    killed at each step in turn and run again at once (nothing new in S3: the rerun finishes what the killed
    run owes, its loads maybe overlapping the killed run's, which Triton finishes on its own)."""
    dest = tmp_path / "models"
    server = ExplicitTriton(triton_layout, dest / "current", tmp_path / "tritonserver.log")

    def agent(kill_at: str | None, with_server: bool = True) -> subprocess.CompletedProcess:
        extra = ["--server", f"a={server.grpc_endpoint}", "--timeout", "60",
                 "--header-file", str(header_file(tmp_path))] if with_server else []
        env = {**os.environ, **AWS_ENV, "TF_KILL_AT": kill_at or ""}
        return subprocess.run([sys.executable, str(HOOK), *sync_args(endpoint, bucket, dest, *extra)], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=180)

    set_remote(s3, bucket, "repo", V1)
    assert agent(None, with_server=False).returncode == 0
    server.start()
    prober = Prober([server])
    points: dict[str, list[str] | None] = {"V1": None, "V2": None}  # kill points of the update to V1, to V2
    killed: list[str] = []
    state = "V1"
    try:
        while any(p is None or p for p in points.values()):
            target = "V2" if state == "V1" else "V1"
            set_remote(s3, bucket, "repo", V2 if target == "V2" else V1)
            todo = points[target]
            point = todo.pop(0) if todo else None
            began = time.monotonic()
            proc = agent(point)
            if point is None:  # run through: it names the steps
                assert proc.returncode == 0, proc.stderr
                steps = [line.split(" ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("step ")]
                if points[target] is None:
                    every = [p for p in steps if p in ("after:pending", "after:switch")
                             or p.split(":")[1] in ("load", "unload")]
                    assert len(every) >= 11, steps  # 2 loads and 1 unload: 3 points each; 2 before
                    points[target] = every if ALL else [p for p in every if p in SUITE_POINTS[target]]
                    assert ALL or len(points[target]) == len(SUITE_POINTS[target]), every
            else:
                assert proc.returncode == -9, (point, proc.returncode, proc.stderr)
                proc = agent(None)  # at once, as a retry would
                assert proc.returncode == 0, (point, proc.stderr)
                killed.append(f"{target}:{point}")
            ended = time.monotonic()
            # the prober asks the models one after the other: wait, bounded, until it asked each since the run
            # ended (a fixed 0.3 s was too short for its thread on a busy machine: clean-clone CI, eighth session)
            caught_up = ended + CATCH_UP_S
            while not all(t > ended for t in _last_seen(prober).values()) and time.monotonic() < caught_up:
                time.sleep(0.05)
            assert all(t > ended for t in _last_seen(prober).values()), "the client fell behind"
            check(prober.since(began), SERVES[state], SERVES[target], f"to {target}, killed {point}")
            assert {m: server.serves(m)[0] for m in MODELS} == SERVES[target], point
            assert not (dest / ".reload-pending.json").exists()
            state = target
    finally:
        prober.close()
        server.stop()
    assert len(killed) >= (22 if ALL else sum(map(len, SUITE_POINTS.values()))), killed


def _last_seen(prober: Prober) -> dict[str, float]:
    return {name: max(t for t, _s, m, _a in list(prober.seen) if m == name) for name in MODELS}
