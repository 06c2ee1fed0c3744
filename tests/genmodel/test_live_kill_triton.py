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
from test_live_reload_triton import CONFIG, ExplicitTriton, header_file, model

from tests.unit.test_agent_sync import (  # noqa: F401 (endpoint, s3, bucket: fixtures)
    AWS_ENV,
    ROOT,
    bucket,
    endpoint,
    s3,
    set_remote,
    sync_args,
)

pytestmark = pytest.mark.slow

HOOK = Path(__file__).resolve().parent / "kill_hook.py"
MODELS = ("steady", "changing", "arriving", "leaving")
SLOW_PY = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(LOAD_SECONDS)

    def execute(self, requests):
        out = np.array([{release}], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ANSWER", out)]) for _ in requests]
'''
LOAD_SECONDS = 2.5  # a load outlives the kill 0.3 s into it by far: the next run's load overlaps it


def slow(name: str, release: int) -> dict[str, bytes]:
    """A model whose load takes LOAD_SECONDS more (its config says ``release`` too: a changed config)."""
    return {f"{name}/config.pbtxt": CONFIG.format(release=release).encode(),
            f"{name}/1/model.py": SLOW_PY.replace("LOAD_SECONDS", str(LOAD_SECONDS)).format(release=release).encode()}


V1 = {**model("steady", 7, config=0), **slow("changing", 1), **model("leaving", 5)}
V2 = {**model("steady", 7, config=0), **slow("changing", 2), **slow("arriving", 3)}
MAX_PROBES = 20_000  # the prober's bound, whatever happens


class Prober:
    """Asks every model, one after the other, over HTTP, until stopped: (time, model, answer or None)."""

    def __init__(self, server: ExplicitTriton) -> None:
        self.port = server.http_port
        self.seen: list[tuple[float, str, int | None]] = []
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
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        for _ in range(MAX_PROBES):
            if self.stop.is_set():
                return
            for name in MODELS:
                try:
                    answer = self._ask(conn, name)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                    answer = -1  # the server did not answer at all
                self.seen.append((time.monotonic(), name, answer))
            time.sleep(0.02)

    def since(self, began: float) -> dict[str, list[int | None]]:
        out: dict[str, list[int | None]] = {name: [] for name in MODELS}
        for t, name, answer in list(self.seen):
            if t >= began:
                out[name].append(answer)
        return out

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def _runs(answers: list) -> list:
    """The answers with repeats folded: [None, None, 3, 3] -> [None, 3]."""
    return [a for i, a in enumerate(answers) if i == 0 or answers[i - 1] != a]


def check(seen: dict[str, list[int | None]], point: str) -> None:
    assert seen["steady"] and set(seen["steady"]) == {7}, (point, "steady", _runs(seen["steady"]))
    assert _runs(seen["changing"]) in ([1, 2], [2]), (point, "changing", _runs(seen["changing"]))
    assert _runs(seen["arriving"]) in ([None, 3], [3]), (point, "arriving", _runs(seen["arriving"]))
    assert _runs(seen["leaving"]) in ([5, None], [None]), (point, "leaving", _runs(seen["leaving"]))


def test_a_kill_at_any_step_of_a_live_update_shows_clients_no_model_that_comes_and_goes(
        triton_layout, endpoint, s3, bucket, tmp_path):  # noqa: F811
    dest = tmp_path / "models"
    server = ExplicitTriton(triton_layout, dest / "current", tmp_path / "tritonserver.log")

    def agent(kill_at: str | None, with_server: bool = True) -> subprocess.CompletedProcess:
        extra = ["--server", f"triton={server.grpc_endpoint}", "--timeout", "60",
                 "--header-file", str(header_file(tmp_path))] if with_server else []
        env = {**os.environ, **AWS_ENV, "TF_KILL_AT": kill_at or ""}
        return subprocess.run([sys.executable, str(HOOK), *sync_args(endpoint, bucket, dest, *extra)], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=180)

    set_remote(s3, bucket, "repo", V1)
    assert agent(None, with_server=False).returncode == 0
    server.start()
    prober = Prober(server)
    try:
        points, done = None, []
        while points is None or len(done) < len(points):
            set_remote(s3, bucket, "repo", V1)  # back to release 1, served (a normal run)
            proc = agent(None)
            assert proc.returncode == 0, proc.stderr
            time.sleep(0.3)
            assert {m: server.serves(m)[0] for m in MODELS} == \
                {"steady": 7, "changing": 1, "arriving": None, "leaving": 5}
            set_remote(s3, bucket, "repo", V2)
            point = None if points is None else points[len(done)]
            began = time.monotonic()
            proc = agent(point)
            if points is None:  # the first update runs through: it names the steps
                assert proc.returncode == 0, proc.stderr
                steps = [line.split(" ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("step ")]
                points = [s for s in steps if s in ("after:pending", "after:switch")
                          or s.split(":")[1] in ("load", "unload")]
                assert len(points) >= 11, steps  # 2 loads, 1 unload: 3 points each, and the two before them
            else:
                assert proc.returncode == -9, (point, proc.returncode, proc.stderr)
                rerun = agent(None)  # at once, as a retry would: its loads may overlap the killed run's  # nothing new in S3: it finishes what the killed run owes
                assert rerun.returncode == 0, (point, rerun.stderr)
                done.append(point)
            time.sleep(0.5)
            check(prober.since(began), point or "no kill")
            assert {m: server.serves(m)[0] for m in MODELS} == \
                {"steady": 7, "changing": 2, "arriving": 3, "leaving": None}, point
            assert not (dest / ".reload-pending.json").exists()
    finally:
        prober.close()
        server.stop()
