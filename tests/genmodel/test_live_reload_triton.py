"""Live reload by `tritonfleet-agent sync --server` / `switch --server` against the real Triton 2.51 on CPU
(explicit model control, ``--model-repository=DIR/current``), with moto on loopback as the bucket.

What only the real server shows (the stand-in of tests/unit/test_agent_live.py loads whatever it is told):
Triton reloads a model only when its directory is newer than what it loaded, and keeps a loaded version
whose version directory is not newer even then, unless the config changed. A switch back to an older
version therefore needs the agent to touch the model directories (a model whose config changed is then
reloaded) and, on a rollback, to unload a changed model before loading it (or the newer files keep
serving). Each test asserts what the server answers after the switch, from outside.

Each model is a Python-backend model answering one INT32, the release its files come from; ``release`` in
its config says which config Triton loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from genmodel_harness import TritonServer, free_ports

from tests.unit.test_agent_sync import AWS_ENV, agent, set_remote, sync_args

pytestmark = pytest.mark.slow

MODEL_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

RELEASE = {release}


class TritonPythonModel:
    def initialize(self, args):
        if RELEASE < 0:
            raise RuntimeError("broken on purpose")

    def execute(self, requests):
        out = np.array([RELEASE], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ANSWER", out)]) for _ in requests]
'''
CONFIG = '''backend: "python"
max_batch_size: 0
input [{{ name: "X", data_type: TYPE_INT32, dims: [1] }}]
output [{{ name: "ANSWER", data_type: TYPE_INT32, dims: [1] }}]
instance_group [{{ kind: KIND_CPU, count: 1 }}]
parameters {{ key: "release" value {{ string_value: "{release}" }} }}
'''


def model(name: str, code: int, config: int | None = None) -> dict[str, bytes]:
    """The files of a model answering ``code`` (a negative one fails to load), its config saying ``config``
    (default: ``code``; the same number in two releases: the same config file)."""
    return {f"{name}/config.pbtxt": CONFIG.format(release=code if config is None else config).encode(),
            f"{name}/1/model.py": MODEL_PY.format(release=code).encode()}


HEADER = ("x-repo-key", "genmodel-repository-key-0123")  # lowercase, as roles/triton.py requires (gRPC)


def header_file(tmp_path: Path) -> Path:
    """The agent's ``--header-file`` for HEADER (mode 0600)."""
    path = tmp_path / "repository-header"
    path.write_text(f"{HEADER[0]}: {HEADER[1]}\n")
    path.chmod(0o600)
    return path


class ExplicitTriton(TritonServer):
    """The harness's server in explicit model-control mode, every model of the repository loaded at start,
    the model-repository API restricted to HEADER on both protocols (as roles/triton.py runs it)."""

    def start(self, timeout: float = 120.0) -> None:
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        args = [str(self.layout.binary), f"--model-repository={self.repository}",
                f"--backend-directory={self.layout.root / 'backends'}",
                f"--cache-directory={self.layout.root / 'caches'}",
                "--http-address=127.0.0.1", f"--http-port={self.http_port}",
                "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
                "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics_port}",
                "--allow-gpu-metrics=false", "--model-control-mode=explicit", "--load-model=*", "--log-verbose=0",
                "--exit-timeout-secs=5", f"--http-restricted-api=model-repository:{HEADER[0]}={HEADER[1]}",
                f"--grpc-restricted-protocol=model-repository:{HEADER[0]}={HEADER[1]}"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.layout.env,
                                         start_new_session=True, cwd=self.layout.root)
        deadline = time.monotonic() + timeout
        while self.call("GET", "/v2/health/ready")[0] != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tritonserver did not start:\n{self.log_tail()}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://{self.http_url}"

    @property
    def grpc_endpoint(self) -> str:
        return f"grpc://{self.grpc_url}"

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, method=method, data=data)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback
                text = resp.read()
                return resp.status, json.loads(text) if text else {}
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except OSError:
            return 0, {}

    def serves(self, name: str) -> tuple[int | None, str | None]:
        """(what the model answers, the ``release`` of the config Triton has), None for what fails."""
        code, out = self.call("POST", f"/v2/models/{name}/infer",
                              {"inputs": [{"name": "X", "shape": [1], "datatype": "INT32", "data": [0]}]})
        answer = out["outputs"][0]["data"][0] if code == 200 else None
        code, config = self.call("GET", f"/v2/models/{name}/config")
        release = config.get("parameters", {}).get("release", {}).get("string_value") if code == 200 else None
        return answer, release


@pytest.fixture
def fleet(triton_layout, endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811 (fixtures)
    """``start(tree)``: sync ``tree`` into DIR, start Triton on DIR/current; then ``sync(tree)`` (with the
    server) and ``switch(version)`` return the agent's (exit code, output, stderr)."""
    dest = tmp_path / "models"
    servers: list[ExplicitTriton] = []

    def sync(tree: dict[str, bytes], with_server: bool = True, via: str = "grpc"):
        set_remote(s3, bucket, "repo", tree)
        extra = []
        if with_server:
            url = servers[0].grpc_endpoint if via == "grpc" else servers[0].url
            extra = ["--server", f"triton={url}", "--timeout", "60", "--header-file", str(header_file(tmp_path))]
        return agent(capsys, *sync_args(endpoint, bucket, dest, *extra))

    def start(tree: dict[str, bytes]) -> tuple[ExplicitTriton, str]:
        code, out, err = sync(tree, with_server=False)
        assert code == 0, err
        server = ExplicitTriton(triton_layout, dest / "current", tmp_path / "tritonserver.log")
        servers.append(server)
        server.start()
        return server, out["version"]

    def switch(version: str):
        return agent(capsys, "switch", "--dest", str(dest), "--to", version, "--server",
                     f"triton={servers[0].grpc_endpoint}", "--timeout", "60", "--header-file", str(header_file(tmp_path)))

    try:
        yield start, sync, switch, dest
    finally:
        for server in servers:
            server.stop()


def test_a_sync_back_to_older_files_reloads_a_model_whose_config_changed(fleet):
    """The bucket goes back to release 1, which is still on disk: ``current`` is switched back without a
    download and the model directories touched, so Triton reloads the model although its files are older
    than the ones it serves."""
    start, sync, switch, dest = fleet
    v1_tree = model("answer", 1)
    server, v1 = start(v1_tree)
    assert server.serves("answer") == (1, "1")
    code, out, err = sync(model("answer", 2))
    assert code == 0 and out["reload"]["loaded"] == ["answer"], err
    assert server.serves("answer") == (2, "2")

    code, out, err = sync(v1_tree)
    assert (code, out["status"], out["version"]) == (0, "switched", v1), err
    assert out["reload"]["loaded"] == ["answer"] and os.readlink(dest / "current") == f"versions/{v1}"
    assert server.serves("answer") == (1, "1")


def test_switching_back_unloads_a_changed_model_so_its_older_files_serve(fleet):
    """``switch --to`` an older version: a model whose config is the same in both (only its code changed)
    would keep serving the newer code on a plain load; the agent unloads it first."""
    start, sync, switch, dest = fleet
    server, v1 = start(model("same", 1, config=0))
    code, out, err = sync(model("same", 2, config=0))
    assert code == 0 and out["reload"]["loaded"] == ["same"], err
    assert server.serves("same") == (2, "0")

    code, text, err = switch(v1)
    assert code == 0 and f"-> {v1}; reloaded 1, unloaded 0" in text, err
    assert server.serves("same") == (1, "0")


def test_a_failed_load_switches_back_and_unloads_what_had_loaded_the_newer_files(fleet):
    """Release 2 of ``same`` loads, ``broken`` does not: ``current`` goes back to release 1 and ``same`` is
    unloaded before it is loaded from there, so the server serves release 1 again, not the newer files."""
    start, sync, switch, dest = fleet
    v1_tree = {**model("broken", 1), **model("same", 1, config=0)}
    server, v1 = start(v1_tree)
    code, out, err = sync({**model("broken", -1), **model("same", 2, config=0)})
    assert code == 1 and "model broken did not load" in err and out["reload"]["rolled_back"], err
    assert os.readlink(dest / "current") == f"versions/{v1}"
    assert server.serves("broken") == (1, "1")  # Triton kept the release it had
    assert server.serves("same") == (1, "0")



def test_a_sync_back_to_older_files_reloads_a_model_whose_config_is_the_same(fleet):
    """A sync whose bucket went back to a kept version reloads a model whose code alone changed, in place (no
    unload: the model keeps serving): Triton 2.51 keeps a loaded version whose version directory is not newer
    than when it loaded it, so the version directories are touched too, not only the model's."""
    start, sync, switch, dest = fleet
    v1_tree = model("same", 1, config=0)
    server, v1 = start(v1_tree)
    code, out, err = sync(model("same", 2, config=0))
    assert code == 0 and server.serves("same") == (2, "0"), err
    code, out, err = sync(v1_tree)
    assert (code, out["status"], out["reload"]["loaded"]) == (0, "switched", ["same"]), err
    assert server.serves("same") == (1, "0")


# --- a live update holds up no client of an unchanged model ------------------------------------------------

CLIENT = Path(__file__).resolve().parent / "steady_client.py"
RATE = 60  # requests a second on each protocol (50 at least wanted), over CONNECTIONS connections
CONNECTIONS = 3
UPDATES = 3
REST = 1.5  # seconds between updates


def clients_during(server: ExplicitTriton, tmp_path: Path, prepare, update) -> dict[str, list]:
    """An HTTP and a gRPC client to ``steady`` (processes of their own, bounded: tests/genmodel/steady_client.py)
    while ``update(i)`` runs UPDATES times, REST seconds apart (``prepare(i)`` before each, outside the
    windows). Per protocol: the samples ``(start, seconds, ok)``, and under "windows" the update windows."""
    stop = tmp_path / "stop-clients"
    clients = {proto: subprocess.Popen([sys.executable, str(CLIENT), proto, addr, "steady", str(RATE),
                                        str(CONNECTIONS), "120", str(stop)], stdout=subprocess.PIPE)
               for proto, addr in (("http", server.http_url), ("grpc", server.grpc_url))}
    windows = []
    try:
        time.sleep(1.0)  # the clients' own start
        for i in range(UPDATES):
            prepare(i)
            time.sleep(REST)
            began = time.monotonic()
            update(i)
            windows.append((began, time.monotonic()))
    finally:
        stop.touch()
        outs = {proto: json.loads(proc.communicate(timeout=60)[0] or b'{"samples": []}')["samples"]
                for proto, proc in clients.items()}
    return {**outs, "windows": windows}


def test_a_live_update_holds_up_no_client_of_an_unchanged_model(fleet, tmp_path, endpoint, s3, bucket):  # noqa: F811
    """HTTP and gRPC clients at 60 requests a second each to ``steady`` while the agent updates ``moving``
    (a Python model: a load takes over a second here) three times: no request fails, and none is held up for
    the load (none takes 3/4 of a load). Over HTTP, Triton 2.51 holds HTTP requests to other models
    for the whole load: the agent loads over gRPC. The p99 against the idle p99 is a benchmark's
    (``make bench-live``: a timing target, measured with the HTTP load as the peer in the same run)."""
    start, sync, switch, dest = fleet
    steady = model("steady", 7, config=0)
    server, _ = start({**steady, **model("moving", 1)})
    loads = []

    def prepare(i: int) -> None:  # the bucket's new release (the test's own work, outside the windows)
        set_remote(s3, bucket, "repo", {**steady, **model("moving", 2 + i)})

    def update(i: int) -> None:  # the agent as on a host: a process of its own
        cmd = [sys.executable, "-m", "tritonfleet.agent",
               *sync_args(endpoint, bucket, dest, "--server", f"triton={server.grpc_endpoint}", "--timeout", "60",
                          "--header-file", str(header_file(tmp_path)))]
        began = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **AWS_ENV})
        loads.append(time.monotonic() - began)
        assert proc.returncode == 0 and json.loads(proc.stdout)["reload"]["loaded"] == ["moving"], proc.stderr

    out = clients_during(server, tmp_path, prepare, update)
    assert server.serves("moving") == (1 + UPDATES, str(1 + UPDATES)) and server.serves("steady") == (7, "0")
    load = _load_seconds(server)  # what one load of moving takes on this machine now
    for proto in ("http", "grpc"):
        during = [(lat, ok) for t, lat, ok in out[proto] if any(a <= t <= b for a, b in out["windows"])]
        assert all(ok for _t, _lat, ok in out[proto]), proto
        assert len(during) >= 50 * sum(b - a for a, b in out["windows"]) * 0.9, (proto, len(during), out["windows"])
        slowest = max(lat for lat, _ok in during)
        assert slowest < 0.75 * load, (proto, slowest, load, loads)  # a stall is the whole load (a request
        # that arrives as the load starts waits all of it); a busy machine alone delays one by far less


def _load_seconds(server: ExplicitTriton) -> float:
    """One load of ``moving`` (touched, so Triton loads it again) over gRPC, timed."""
    import tritonclient.grpc as grpcclient

    for root, _dirs, _files in os.walk(server.repository / "moving"):
        os.utime(root)
    began = time.monotonic()
    grpcclient.InferenceServerClient(server.grpc_url).load_model(
        "moving", headers={f"triton-grpc-protocol-{HEADER[0].lower()}": HEADER[1]}, client_timeout=60)
    return time.monotonic() - began
