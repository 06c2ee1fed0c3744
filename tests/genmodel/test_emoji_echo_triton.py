"""The sandbox's ``emoji_echo`` sample on the real Triton 2.51 server: without ``emoji`` its load fails with
Triton's "No module named 'emoji'", which :func:`tritonfleet.pyreqs.import_hints` turns into the hint naming the
setting; with the module importable it loads and serves (here a stand-in ``emoji.py`` next to the model file:
the model's version directory is on the stub's ``sys.path``; the sandbox's images get the real package from
``triton_python_requirements``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from genmodel_harness import free_ports

from tritonfleet import pyreqs
from tritonfleet.sandbox import layout

STANDIN = '''"""Stand-in for the emoji package (tests only)."""
def emojize(text):
    return text.replace(":thumbs_up:", "\\U0001F44D")
'''


def _post(url: str, body: bytes = b"") -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def server(triton_layout, tmp_path):
    """A server in explicit model control (as hosts run it) over a repository holding only ``emoji_echo``."""
    repo = tmp_path / "repo"
    shutil.copytree(layout.EXTRA_SAMPLES / "emoji_echo", repo / "emoji_echo")
    http, grpc, metrics = free_ports(3)
    log = open(tmp_path / "tritonserver.log", "wb")  # noqa: SIM115 - the server's until it ends
    proc = subprocess.Popen(
        [str(triton_layout.binary), f"--model-repository={repo}", f"--backend-directory={triton_layout.root / 'backends'}",
         f"--cache-directory={triton_layout.root / 'caches'}", "--http-address=127.0.0.1", f"--http-port={http}",
         "--grpc-address=127.0.0.1", f"--grpc-port={grpc}", "--metrics-address=127.0.0.1",
         f"--metrics-port={metrics}", "--allow-gpu-metrics=false", "--model-control-mode=explicit"],
        stdout=log, stderr=subprocess.STDOUT, env=triton_layout.env, start_new_session=True, cwd=triton_layout.root)
    log.close()
    url = f"http://127.0.0.1:{http}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{url}/v2/health/live", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail((tmp_path / "tritonserver.log").read_text()[-3000:])
                time.sleep(0.2)
        yield url, repo
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_emoji_echo_fails_to_load_without_emoji_and_serves_with_it(server):
    url, repo = server
    code, body = _post(f"{url}/v2/repository/models/emoji_echo/load")
    assert code == 400
    assert "ModuleNotFoundError: No module named 'emoji'" in json.loads(body)["error"]
    gate = f"loading emoji_echo\nERROR: model emoji_echo did not load (HTTP {code}): {body}\n"
    assert pyreqs.import_hints(gate) == [
        "model emoji_echo: python backend: No module named 'emoji': add it to triton_python_requirements "
        "(pinned, e.g. emoji==<version>)"]

    (repo / "emoji_echo/1/emoji.py").write_text(STANDIN)
    code, body = _post(f"{url}/v2/repository/models/emoji_echo/load")
    assert code == 200, body
    request = {"inputs": [{"name": "INPUT0", "shape": [2, 1], "datatype": "BYTES", "data": [":thumbs_up:", "hi"]}]}
    code, body = _post(f"{url}/v2/models/emoji_echo/infer", json.dumps(request).encode())
    assert code == 200, body
    (output,) = json.loads(body)["outputs"]
    assert (output["name"], output["shape"], output["data"]) == ("OUTPUT0", [2, 1], ["\U0001F44D", "hi"])
