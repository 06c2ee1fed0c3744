"""A bounded client for the live-update measurements: PROTOCOL (http or grpc) requests to one model, paced at
RATE a second over CONNECTIONS connections, for SECONDS at most, to a Triton on loopback only. Prints one JSON
object: ``{"samples": [[start, seconds, ok], ...]}`` (start: time.monotonic(), comparable across processes
on the host).

usage: steady_client.py PROTOCOL HOST:PORT MODEL RATE CONNECTIONS SECONDS STOPFILE

It stops early once STOPFILE exists. A process of its own, so that what the test process does meanwhile (the
agent, moto) does not delay the client's own measurements.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import threading
import time

import numpy as np

MAX_REQUESTS = 20_000  # per connection, whatever the rate: a bounded loop


def main() -> int:
    protocol, address, model, rate, connections, seconds, stopfile = sys.argv[1:8]
    rate, connections, seconds = float(rate), int(connections), float(seconds)
    host, port = address.rsplit(":", 1)
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"loopback only, not {host}")
    samples: list[tuple[float, float, bool]] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds
    body = json.dumps({"inputs": [{"name": "X", "shape": [1], "datatype": "INT32", "data": [0]}]})

    def http_call():
        conn = http.client.HTTPConnection(host, int(port), timeout=30)

        def call() -> bool:
            nonlocal conn
            try:
                conn.request("POST", f"/v2/models/{model}/infer", body=body,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                return resp.status == 200
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                return False
        return call

    def grpc_call():
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(address)
        x = grpcclient.InferInput("X", [1], "INT32")
        x.set_data_from_numpy(np.array([0], dtype=np.int32))

        def call() -> bool:
            try:
                client.infer(model, [x], client_timeout=30)
                return True
            except Exception:  # noqa: BLE001 - any failure is a failed request
                return False
        return call

    def worker(offset: float) -> None:
        call = (grpc_call if protocol == "grpc" else http_call)()
        step = connections / rate
        due = time.monotonic() + offset
        for _ in range(MAX_REQUESTS):
            now = time.monotonic()
            if now >= end or os.path.exists(stopfile):
                return
            if due > now:
                time.sleep(due - now)
            start = time.monotonic()
            ok = call()
            with lock:
                samples.append((start, time.monotonic() - start, ok))
            due += step

    threads = [threading.Thread(target=worker, args=(i / rate,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    json.dump({"samples": sorted(samples)}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
