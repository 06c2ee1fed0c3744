"""Accuracy QA on the host: run suites of known inputs and expected outputs against the local Triton servers.

``tritonfleet-agent qa run`` reads suite files (``qa/<model>.yaml`` or ``.json``, one model each), checks them
against each server's model metadata before sending any inference, sends every case at each of its
concurrency levels over gRPC or HTTP, compares the outputs (``exact``, ``{atol, rtol}`` or ``{topk}``) and
writes ``OUT/<stamp>.json`` and a JUnit ``OUT/<stamp>.xml``.

Modules: :mod:`.schema` (the suite format, pydantic), :mod:`.data` (tensors: inline, ``.npy``,
perf_analyzer ``--input-data`` JSON), :mod:`.suites` (finding and loading suite files), :mod:`.bind`
(checking a suite against a model's metadata: requests and expected arrays), :mod:`.compare`,
:mod:`.client` (tritonclient), :mod:`.runner`, :mod:`.report` (JSON, JUnit XML, summary),
:mod:`.selftest` (the built-in Neuron self-test suites) and :mod:`.command` (what the CLI calls).

Runtime dependencies beyond the standard library: numpy, tritonclient (grpc; http optional), PyYAML and
pydantic 2. Nothing here imports the rest of tritonfleet, and ``tritonfleet-agent sync`` never imports it.
"""
