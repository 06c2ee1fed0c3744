"""Live reload over gRPC (``--server NAME=grpc://HOST:PORT``, what the models role passes): against moto on
loopback and a Triton stand-in speaking Triton's gRPC protocol (grpcio with tritonclient's service
definitions), which reads the model files through ``DIR/current`` when asked to load, keeps the loaded
version when a load fails and records every call with its metadata. The real Triton over gRPC:
tests/genmodel/test_live_reload_triton.py."""

from __future__ import annotations

import argparse
import os
import socket
import threading
from concurrent import futures

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.unit.test_agent_live import SECRET, V1, V2, agent, set_remote, sync_args, update_to_v2
from tests.unit.test_agent_sync import bucket, endpoint, s3  # noqa: F401 (fixtures)
from tritonfleet.agent import live
from tritonfleet.agent.cli import _server
from tritonfleet.agent.manifest import SyncError


class GrpcTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, repo, together: threading.Barrier | None = None) -> None:
        self.repo = repo
        self.together = together  # loads wait here for the other server's load of the same model
        self.loaded: dict[str, bytes] = {}
        self.calls: list[tuple[str, str, dict]] = []  # (action, model, metadata)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.url = f"grpc://127.0.0.1:{self.port}"
        self.server.start()

    def _restricted(self, action: str, model: str, context) -> None:
        metadata = dict(context.invocation_metadata())
        self.calls.append((action, model, metadata))
        if metadata.get("triton-grpc-protocol-x-key") != SECRET:  # Triton 2.51's check and message
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          "This protocol is restricted, expecting header 'triton-grpc-protocol-x-key'")

    def ServerReady(self, request, context):  # noqa: N802
        return service_pb2.ServerReadyResponse(ready=True)

    def RepositoryModelLoad(self, request, context):  # noqa: N802
        self._restricted("load", request.model_name, context)
        try:
            data = (self.repo / request.model_name / "1" / "model.py").read_bytes()
        except OSError:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"failed to load '{request.model_name}', no version")
        if self.together:
            try:
                self.together.wait()
            except threading.BrokenBarrierError:
                context.abort(grpc.StatusCode.INTERNAL, "the other server was not asked meanwhile")
        if b"broken" in data:
            context.abort(grpc.StatusCode.INTERNAL,
                          f"load failed for model '{request.model_name}':\n  SyntaxError in model.py")
        self.loaded[request.model_name] = data
        return service_pb2.RepositoryModelLoadResponse()

    def RepositoryModelUnload(self, request, context):  # noqa: N802
        self._restricted("unload", request.model_name, context)
        self.loaded.pop(request.model_name, None)
        return service_pb2.RepositoryModelUnloadResponse()

    def actions(self) -> list[str]:
        return sorted(f"{model}:{action}" for action, model, _ in self.calls)


@pytest.fixture
def setup(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    dest = tmp_path / "models"
    header = tmp_path / "header"
    header.write_text(f"X-Key: {SECRET}\n")  # gRPC metadata keys are lowercase: the agent lowers it
    header.chmod(0o600)
    triton = GrpcTriton(dest / "current")
    set_remote(s3, bucket, "repo", V1)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert code == 0, err
    triton.loaded = {m: V1[f"{m}/1/model.py"] for m in ("steady", "changing", "leaving")}

    def run(*extra: str, url: str = triton.url):
        return agent(capsys, *sync_args(endpoint, bucket, dest, "--server", f"triton={url}",
                                        "--header-file", str(header), "--timeout", "5", *extra))
    yield dest, triton, run, (s3, bucket), out["version"]
    triton.server.stop(0)


def test_loads_and_unloads_go_over_grpc_with_the_header_as_metadata(setup):
    triton = setup[1]
    update_to_v2(setup, triton.actions)
    assert all(meta.get("triton-grpc-protocol-x-key") == SECRET for *_, meta in triton.calls)


def test_a_failed_load_over_grpc_switches_back_with_tritons_reason_on_one_line(setup):
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", {**V2, "changing/1/model.py": b"broken v3"})
    code, out, err = run()
    assert code == 1 and out["reload"]["rolled_back"]
    assert "model changing did not load (gRPC INTERNAL: load failed for model 'changing': SyntaxError in " \
           "model.py); switched back to" in err
    assert os.readlink(dest / "current") == f"versions/{v1}"
    assert triton.loaded == {"steady": b"one", "changing": b"v1", "leaving": b"bye"}


def test_a_server_whose_grpc_port_refuses_is_not_running_and_is_skipped(setup):
    dest, triton, run, (client, name), v1 = setup
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    set_remote(client, name, "repo", V2)
    code, out, err = run(url=f"grpc://127.0.0.1:{port}")
    assert code == 0 and out["reload"]["skipped"] == ["triton"] and not triton.calls, err


def test_the_url_scheme_picks_the_client():
    grpc_client = live.client_for(live.Server("a", "grpc://127.0.0.1:8001"), ("X-Key", "v"), 5)
    http_client = live.client_for(live.Server("b", "http://127.0.0.1:8000"), ("X-Key", "v"), 5)
    assert type(grpc_client) is live.GrpcTriton and grpc_client.address == "127.0.0.1:8001"
    assert grpc_client.headers == {"triton-grpc-protocol-x-key": "v"}
    assert type(http_client) is live.Triton


def test_a_sync_without_the_grpc_client_ends_in_one_line(setup, monkeypatch, capsys):
    """The agent's own command line: no traceback when the live extra is missing, nothing switched."""
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    monkeypatch.setitem(__import__("sys").modules, "tritonclient.grpc", None)
    code, out, err = run()
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "the agent has no gRPC client" in err and os.readlink(dest / "current") == f"versions/{v1}"


def test_without_the_grpc_client_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tritonclient.grpc", None)
    with pytest.raises(SyncError, match=r"server a \(grpc://127.0.0.1:8001\): the agent has no gRPC client .*"
                                        r"install tritonfleet-agent\[live\]"):
        live.client_for(live.Server("a", "grpc://127.0.0.1:8001"), None, 5)


@pytest.mark.parametrize("text", ["t=grpc://127.0.0.1:8001", "t=grpc://[::1]:8001", "t=http://127.0.0.1:8000",
                                  "t=https://triton.internal:8000"])
def test_server_urls_accepted(text):
    assert _server(text) == tuple(text.split("=", 1))


@pytest.mark.parametrize("text", ["t=grpc://127.0.0.1", "t=grpc://127.0.0.1:8001/v2", "t=grpc://127.0.0.1:x",
                                  "t=grpc://u:p@127.0.0.1:8001", "t=ftp://127.0.0.1:21", "grpc://127.0.0.1:8001",
                                  "t t=grpc://127.0.0.1:8001", "t=grpc://127.0.0.1:8001?a=1"])
def test_server_urls_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected NAME=grpc://HOST:PORT"):
        _server(text)


def test_a_model_is_loaded_on_all_the_hosts_servers_at_once(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    """Two servers whose loads each wait (5 s at most) until the other server is loading the same model: a
    sequential agent would fail; the agent asks all servers at once, so both load and the run succeeds."""
    dest = tmp_path / "models"
    together = threading.Barrier(2, timeout=5)
    servers = [GrpcTriton(dest / "current", together) for _ in range(2)]
    try:
        set_remote(s3, bucket, "repo", V1)
        assert agent(capsys, *sync_args(endpoint, bucket, dest))[0] == 0
        set_remote(s3, bucket, "repo", V2)
        header = tmp_path / "header"
        header.write_text(f"x-key: {SECRET}\n")
        header.chmod(0o600)
        args = [a for i, t in enumerate(servers) for a in ("--server", f"t{i}={t.url}")]
        code, out, err = agent(capsys, *sync_args(endpoint, bucket, dest, *args, "--header-file", str(header),
                                                  "--timeout", "5"))
        assert code == 0, err
        assert all(t.loaded.get("arriving") == b"hi" and t.loaded.get("changing") == b"v2" for t in servers)
        assert out["reload"]["servers"] == ["t0", "t1"] and out["reload"]["loaded"] == ["arriving", "changing"]
    finally:
        for t in servers:
            t.server.stop(0)
