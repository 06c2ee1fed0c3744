"""Client side of the serving tests: random inputs, exact expected outputs, concurrent load."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.grpc as grpcclient
from served_models import ServedModel

from tritonfleet.agent.qa.bind import NP_DTYPES  # Triton dtype -> numpy, as the QA runner reads outputs


def random_inputs(
    m: ServedModel, rng: np.random.Generator, rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    rows = int(rng.integers(1, 5)) if rows is None else rows
    shape = (rows, 4)
    if m.dtype == "INT64":
        a = rng.integers(-(10**6), 10**6, shape, dtype=np.int64)
        b = rng.integers(-(10**6), 10**6, shape, dtype=np.int64)
    else:
        a = (rng.standard_normal(shape) * 1000).astype(np.float32)
        b = (rng.standard_normal(shape) * 1000).astype(np.float32)
    return a, b


def expected(m: ServedModel, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    out = NP_DTYPES[m.output_dtype]
    if m.kind == "add":
        return [(a + b).astype(out)]
    return [(a + b).astype(out), (a - b).astype(out)]


def infer(client: grpcclient.InferenceServerClient, m: ServedModel, *arrays: np.ndarray) -> list[np.ndarray]:
    inputs = []
    for name, arr in zip(m.input_names, arrays, strict=True):
        tensor = grpcclient.InferInput(name, list(arr.shape), m.dtype)
        tensor.set_data_from_numpy(arr)
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(n) for n in m.output_names]
    result = client.infer(m.name, inputs, outputs=outputs, model_version=str(m.version))
    return [result.as_numpy(n) for n in m.output_names]


def assert_exact(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert np.array_equal(g, w), (g, w)


def hammer(url: str, m: ServedModel, concurrency: int, per_worker: int = 4, seed: int = 0) -> int:
    """``concurrency`` clients, each sending ``per_worker`` random requests; every reply checked exactly."""

    def worker(k: int) -> int:
        rng = np.random.default_rng(seed * 1000 + k)
        client = grpcclient.InferenceServerClient(url)
        try:
            for _ in range(per_worker):
                a, b = random_inputs(m, rng)
                assert_exact(infer(client, m, a, b), expected(m, a, b))
        finally:
            client.close()
        return per_worker

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return sum(pool.map(worker, range(concurrency)))
