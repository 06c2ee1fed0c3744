"""tritonclient over gRPC or HTTP: model metadata as :class:`~.bind.ModelInfo`, and inference.

One :class:`Conn` per concurrency slot. Metadata and readiness go through tritonclient's
``InferenceServerClient``. Inference:

- gRPC: each request is built once as Triton's ``ModelInferRequest`` protobuf (tritonclient's generated
  ``service_pb2``) and sent as is with grpc.aio (:meth:`Conn.aio_stub`); the response is read with
  tritonclient's ``InferResult`` (and only when its bytes differ from the expected ones). Not rebuilding
  requests, and asyncio instead of a thread per request in flight, keep the runner's own CPU use low on a
  small host, where it competes with the server for the cores.
- HTTP: tritonclient.http's blocking ``infer``, one thread per request in flight; imported only when HTTP
  is used: a host may have the gRPC client only.

Every call has a timeout: gRPC deadlines, HTTP connection and network timeouts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from .bind import ModelInfo, TensorMeta

MAX_GRPC_MESSAGE = 2**31 - 1  # as tritonclient (Triton's MAX_GRPC_MESSAGE_SIZE)


class ClientError(Exception):
    """A server could not be reached or answered with an error (one line)."""


class ProtocolUnavailable(ClientError):
    """This host's tritonclient cannot speak the protocol (no tritonclient[http])."""


@dataclass(frozen=True)
class Endpoint:
    server: str  # its --server name
    protocol: str  # grpc | http
    address: str  # host:port
    ssl: bool = False

    @classmethod
    def from_url(cls, server: str, url: str) -> Endpoint:
        """``grpc://h:p``, ``grpcs://h:p``, ``http://h:p`` or ``https://h:p``."""
        parts = urlsplit(url)
        protocol = {"grpc": "grpc", "grpcs": "grpc", "http": "http", "https": "http"}[parts.scheme]
        return cls(server, protocol, parts.netloc, parts.scheme in ("grpcs", "https"))


def client_module(protocol: str) -> Any:
    """``tritonclient.grpc`` or ``tritonclient.http``; ProtocolUnavailable if this host lacks it."""
    try:
        if protocol == "grpc":
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
    except (ImportError, RuntimeError) as exc:  # tritonclient raises RuntimeError for a missing extra
        raise ProtocolUnavailable(f"{protocol}: this host's tritonclient has no {protocol} support "
                                  f"(tritonclient[{protocol}]): {one_line(exc)}") from None
    return module


def one_line(exc: BaseException) -> str:
    """An exception as one line (gRPC errors as ``CODE: details``)."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        try:
            text = f"{code().name}: {details()}"
        except Exception:  # noqa: BLE001 - not a grpc.Call after all
            text = str(exc)
    else:
        text = str(exc)
    return " ".join((text.strip() or type(exc).__name__).split())


class Conn:
    """One client of one server (tritonclient's client is made on first use)."""

    def __init__(self, endpoint: Endpoint, timeout: float, headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.headers = headers or None
        self.module = client_module(endpoint.protocol)
        self.grpc = endpoint.protocol == "grpc"
        self.metadata = tuple((k.lower(), v) for k, v in (headers or {}).items()) or None
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            e = self.endpoint
            try:
                if self.grpc:
                    self._client = self.module.InferenceServerClient(e.address, ssl=e.ssl)
                else:
                    self._client = self.module.InferenceServerClient(
                        e.address, ssl=e.ssl, connection_timeout=self.timeout, network_timeout=self.timeout)
            except Exception as exc:  # noqa: BLE001 - tritonclient raises several kinds
                raise ClientError(f"{e.server}: {one_line(exc)}") from None
        return self._client

    def _kw(self) -> dict:
        return {"client_timeout": self.timeout} if self.grpc else {}

    def close(self) -> None:
        try:
            if self._client is not None:
                self._client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    def wait_ready(self, seconds: float) -> None:
        """Until the server says it is ready (at most ``seconds``); ClientError if it never does."""
        deadline = time.monotonic() + seconds
        last = "not ready"
        while True:
            try:
                if self.client.is_server_ready(headers=self.headers, **self._kw()):
                    return
            except Exception as exc:  # noqa: BLE001 - refused connections, timeouts
                last = one_line(exc)
            if time.monotonic() >= deadline:
                raise ClientError(f"server {self.endpoint.server} ({self.endpoint.protocol}://"
                                  f"{self.endpoint.address}) is not ready after {seconds:g} s: {last}")
            time.sleep(0.25)

    def model_info(self, model: str, version: str = "") -> ModelInfo:
        """Metadata and config of a ready model; ClientError if it is not ready or unknown."""
        try:
            if not self.client.is_model_ready(model, version, headers=self.headers, **self._kw()):
                raise ClientError(f"model {model} is not ready on server {self.endpoint.server}")
            if self.grpc:
                meta = self.client.get_model_metadata(model, version, headers=self.headers, as_json=True,
                                                      **self._kw())
                config = self.client.get_model_config(model, version, headers=self.headers, as_json=True,
                                                      **self._kw())["config"]
            else:
                meta = self.client.get_model_metadata(model, version, headers=self.headers)
                config = self.client.get_model_config(model, version, headers=self.headers)
        except ClientError:
            raise
        except Exception as exc:  # noqa: BLE001 - InferenceServerException, socket errors
            raise ClientError(f"model {model} on server {self.endpoint.server}: {one_line(exc)}") from None
        return model_info(meta, config)

    # --- inference ---------------------------------------------------------------------------------------

    def prepare(self, model: str, version: str, arrays: dict[str, np.ndarray], dtypes: dict[str, str],
                outputs: list[str]) -> Any:
        """One request, built once and sent as often as wanted."""
        if self.grpc:
            return grpc_request(model, version, arrays, dtypes, outputs)
        tensors = []
        for name, arr in arrays.items():
            t = self.module.InferInput(name, list(arr.shape), dtypes[name])
            t.set_data_from_numpy(arr)
            tensors.append(t)
        return model, version, tensors, [self.module.InferRequestedOutput(n) for n in outputs] or None

    def call(self, request: Any) -> Any:
        """HTTP: send one prepared request and wait; tritonclient.http's ``InferResult`` (raises its error)."""
        model, version, inputs, outputs = request
        return self.client.infer(model, inputs, model_version=version, outputs=outputs, headers=self.headers)

    def aio_stub(self) -> tuple[Any, Any]:
        """gRPC: ``(channel, stub)`` on grpc.aio, for the running event loop; ``await stub.ModelInfer(request,
        timeout=conn.timeout, metadata=conn.metadata)`` gives a ``ModelInferResponse``."""
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        options = [("grpc.max_send_message_length", MAX_GRPC_MESSAGE),
                   ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE)]
        if self.endpoint.ssl:
            channel = grpc.aio.secure_channel(self.endpoint.address, grpc.ssl_channel_credentials(), options)
        else:
            channel = grpc.aio.insecure_channel(self.endpoint.address, options)
        return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)

    def raw(self, result: Any) -> Callable[[str], tuple[bytes | None, tuple[int, ...] | None]]:
        """``raw(name)`` -> (the output's bytes, its shape), ``(None, None)`` if missing; not for BYTES."""
        if self.grpc:
            index = {o.name: (i, o) for i, o in enumerate(result.outputs)}

            def grpc_raw(name: str) -> tuple[bytes | None, tuple[int, ...] | None]:
                hit = index.get(name)
                if hit is None or hit[0] >= len(result.raw_output_contents):
                    return None, None
                return result.raw_output_contents[hit[0]], tuple(hit[1].shape)
            return grpc_raw

        def http_raw(name: str) -> tuple[bytes | None, tuple[int, ...] | None]:
            arr = result.as_numpy(name)
            return (None, None) if arr is None else (arr.tobytes(), tuple(arr.shape))
        return http_raw

    def numpy(self, result: Any, name: str) -> np.ndarray | None:
        if self.grpc:
            return self.module.InferResult(result).as_numpy(name)
        return result.as_numpy(name)


def grpc_request(model: str, version: str, arrays: dict[str, np.ndarray], dtypes: dict[str, str],
                 outputs: list[str]) -> Any:
    """A ``ModelInferRequest`` with the tensors in ``raw_input_contents`` (as tritonclient sends them)."""
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import serialize_byte_tensor

    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, arr in arrays.items():
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, dtypes[name]
        tensor.shape.extend(int(d) for d in arr.shape)
        if dtypes[name] == "BYTES":
            serialized = serialize_byte_tensor(arr)
            request.raw_input_contents.append(serialized.item() if serialized.size > 0 else b"")
        else:
            request.raw_input_contents.append(np.ascontiguousarray(arr).tobytes())
    for name in outputs:
        request.outputs.add().name = name
    return request


def _optional(config: dict) -> set[str]:
    return {i.get("name") for i in config.get("input", []) if i.get("optional")}


def model_info(meta: dict, config: dict) -> ModelInfo:
    """ModelInfo from metadata and config as JSON (gRPC's int64 fields are strings there)."""
    optional = _optional(config)

    def tensors(items: list[dict]) -> tuple[TensorMeta, ...]:
        return tuple(TensorMeta(t["name"], t["datatype"], tuple(int(d) for d in t.get("shape", [])),
                                t["name"] in optional) for t in items)

    return ModelInfo(meta["name"], tuple(str(v) for v in meta.get("versions", [])),
                     int(config.get("max_batch_size", 0) or 0), tensors(meta.get("inputs", [])),
                     tensors(meta.get("outputs", [])))
