"""A bounded client for the front door: ``add_sub`` inferences over HTTP and gRPC through one address, paced at a
fixed rate, every answer checked. The rollout e2e tests and ``bench/rollout.py`` measure failed requests with it.

    with Traffic("192.168.250.19", rate=60) as traffic:
        ...                      # a rollout
    traffic.summary()            # {"ok": ..., "failed": ..., "wrong": ..., ...}

Several addresses are taken in turn, request by request (a client-side round robin: the way a client without a
load balancer spreads its requests over the hosts). Each protocol has its own thread sending ``rate / 2`` requests a second (a new request when the previous one has
answered and its slot has come). A request that raises (connection refused, reset, HTTP 5xx, a timeout) is failed;
one whose ``OUTPUT0`` is not ``INPUT0 + INPUT1`` is wrong. Bounded in count (``max_requests``) and time
(``max_seconds``); only the given address is ever contacted (a sandbox host or loopback).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np

logger = logging.getLogger(__name__)

A, B = 2.0, 1.0  # the inputs; add_sub answers A + B


@dataclass
class Counts:
    ok: int = 0
    failed: int = 0
    wrong: int = 0
    errors: list[str] = field(default_factory=list)  # the first few failures, one line each
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return self.ok + self.failed + self.wrong


class Traffic:
    """``rate`` requests a second in all, split evenly over HTTP (``http_port``) and gRPC (``grpc_port``)."""

    def __init__(self, address: str | list[str], *, http_port: int = 8000, grpc_port: int = 8001, model: str = "add_sub",
                 rate: float = 60.0, max_requests: int = 200_000, max_seconds: float = 900.0,
                 timeout: float = 10.0, protocols: tuple[str, ...] = ("http", "grpc")) -> None:
        if rate <= 0 or max_requests < 1 or max_seconds <= 0:
            raise ValueError("rate, max_requests and max_seconds must be above 0")
        self.addresses = [address] if isinstance(address, str) else list(address)
        self.model, self.timeout = model, timeout
        self.ports = {"http": http_port, "grpc": grpc_port}
        self.protocols = protocols
        self.interval = len(protocols) / rate
        self.max_requests, self.max_seconds = max_requests, max_seconds
        self.counts = {p: Counts() for p in protocols}
        self.started = self.stopped = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(p,), daemon=True, name=f"traffic-{p}")
                         for p in protocols]

    # -- the clients ------------------------------------------------------------------------------------------

    def _client(self, protocol: str, address: str):
        url = f"{address}:{self.ports[protocol]}"
        if protocol == "http":
            import tritonclient.http as mod

            return mod, mod.InferenceServerClient(url, connection_timeout=self.timeout, network_timeout=self.timeout)
        import tritonclient.grpc as gmod

        return gmod, gmod.InferenceServerClient(url)

    def _once(self, mod, client) -> float:
        a = np.full((1, 4), A, np.float32)
        b = np.full((1, 4), B, np.float32)
        inputs = [mod.InferInput("INPUT0", a.shape, "FP32"), mod.InferInput("INPUT1", b.shape, "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        kwargs = {"client_timeout": self.timeout} if mod.__name__.endswith("grpc") else {}
        out = client.infer(self.model, inputs, **kwargs).as_numpy("OUTPUT0")
        return float(out[0][0])

    def _run(self, protocol: str) -> None:
        clients = [self._client(protocol, a) for a in self.addresses]
        counts = self.counts[protocol]
        per_thread = max(1, self.max_requests // len(self.protocols))
        next_at = time.monotonic()
        while not self._stop.is_set() and counts.sent < per_thread and time.monotonic() - self.started < self.max_seconds:
            t0 = time.monotonic()
            i = counts.sent % len(clients)
            mod, client = clients[i]
            try:
                value = self._once(mod, client)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and the first few kept
                with self._lock:
                    counts.failed += 1
                    if len(counts.errors) < 10:
                        counts.errors.append(f"{protocol}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300])
                try:  # a fresh connection after a failure, as a client library's retry would
                    clients[i] = self._client(protocol, self.addresses[i])
                except Exception:  # noqa: BLE001 - the next request fails and is counted
                    pass
            else:
                with self._lock:
                    if value == A + B:
                        counts.ok += 1
                    else:
                        counts.wrong += 1
                        if len(counts.errors) < 10:
                            counts.errors.append(f"{protocol}: wrong answer {value} (expected {A + B})")
                    counts.latencies_ms.append((time.monotonic() - t0) * 1000)
            next_at = max(next_at + self.interval, time.monotonic() - self.interval)
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    # -- the context ------------------------------------------------------------------------------------------

    def __enter__(self) -> Traffic:
        self.started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)
        self.stopped = time.monotonic()

    # -- results ----------------------------------------------------------------------------------------------

    def summary(self) -> dict:
        """Totals over both protocols, per protocol, and the achieved rate."""
        with self._lock:
            seconds = (self.stopped or time.monotonic()) - self.started
            lat = sorted(x for c in self.counts.values() for x in c.latencies_ms)
            total = {k: sum(getattr(c, k) for c in self.counts.values()) for k in ("ok", "failed", "wrong")}
            return {**total, "sent": sum(total.values()), "seconds": round(seconds, 1),
                    "rate": round(sum(total.values()) / seconds, 1) if seconds > 0 else 0.0,
                    "p50_ms": round(lat[len(lat) // 2], 2) if lat else None,
                    "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2) if lat else None,
                    "per_protocol": {p: {"ok": c.ok, "failed": c.failed, "wrong": c.wrong}
                                     for p, c in self.counts.items()},
                    "errors": [e for c in self.counts.values() for e in c.errors][:10]}
