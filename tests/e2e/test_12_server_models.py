"""Each server its own models, on the sandbox's inf2.24xlarge split into two Triton servers: ``adder`` loads
add_sub, ``other`` loads ``other`` (models from the sandbox's S3), after a first run with the default single
server (which must go: it holds every device and port 8000). Asserted from outside: each container has exactly
its devices and cores (docker inspect, and /dev inside it); each server answers its own model and
"unknown model" for the other's; a model update reloads only the server that serves it (the other server's
containers log no new load); and a version whose model does not fit its server's accelerator memory is refused
before anything is loaded, while the host goes on serving the version it had."""

from __future__ import annotations

import re
import uuid

import boto3
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import host_ip, pyinfra, ssh, write_inventory
from tests.e2e.test_03_serve import _containers, _env, _neuron_nodes
from tritonfleet.sandbox import fleet

HOST = "inf2big"
SERVERS = [{"name": "adder", "models": ["add_sub"]}, {"name": "other", "models": ["other"]}]
PORTS = {"adder": 8000, "other": 8010}
#: inf2.24xlarge: 6 devices of 2 cores, split evenly
DEVICES = {"adder": (range(0, 3), "0-5"), "other": (range(3, 6), "6-11")}
ADD_SUB = (fleet.SAMPLES / "add_sub/1/model.py").read_text()
CONFIG = (fleet.SAMPLES / "add_sub/config.pbtxt").read_text()
#: far more than an inf2.24xlarge's devices hold (6 x 32 GiB)
HUGE = 'parameters { key: "tritonfleet_memory_mib" value: { string_value: "1000000" } }\n'


def _model(name: str, code: str = ADD_SUB, extra_config: str = "") -> dict[str, str]:
    config = CONFIG.replace('name: "add_sub"', f'name: "{name}"')
    if extra_config:  # an instance on the accelerator (KIND_CPU instances take no accelerator memory)
        assert "KIND_CPU" in config
        config = config.replace("KIND_CPU", "KIND_MODEL") + extra_config
    return {f"{name}/config.pbtxt": config, f"{name}/1/model.py": code}


@pytest.fixture(scope="module")
def split(sandbox, tmp_path_factory):
    s3 = boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                      aws_access_key_id="sandbox", aws_secret_access_key="sandbox")
    run = uuid.uuid4().hex[:8]
    trees = {"v1": {**_model("add_sub"), **_model("other")},
             "v2": {**_model("add_sub", ADD_SUB + "# v2\n"), **_model("other")},  # add_sub changes
             "v3": {**_model("add_sub", ADD_SUB + "# v2\n"), **_model("other", extra_config=HUGE)}}
    uris = {}
    for version, tree in trees.items():
        for path, text in tree.items():
            s3.put_object(Bucket=fleet.S3_BUCKET, Key=f"e2e-split-{run}/{version}/{path}", Body=text.encode())
        uris[version] = f"s3://{fleet.S3_BUCKET}/e2e-split-{run}/{version}"
    base = tmp_path_factory.mktemp("split")
    inv = {}
    for version, uri in uris.items():
        (base / version).mkdir()
        inv[version] = write_inventory(base / version, [HOST], extra={"triton_servers": SERVERS,
                                                                       "models_s3_uri": uri})
    single = write_inventory(base, [HOST], extra={"models_s3_uri": uris["v1"]})
    served = pyinfra(single, "deploys/serve.py")  # the default: one server with every device, port 8000
    assert served.returncode == 0, served.output[-5000:]
    assert [c["Name"] for c in _containers(HOST)] == ["/triton"]
    served = pyinfra(inv["v1"], "deploys/serve.py")
    assert served.returncode == 0, served.output[-5000:]
    return inv


def test_each_container_has_exactly_its_devices_and_cores(split):
    by_name = {c["Name"].lstrip("/"): c for c in _containers(HOST)}
    assert sorted(by_name) == sorted(PORTS)  # the single server is gone
    assert _neuron_nodes(HOST) == {f"neuron{i}" for i in range(6)}  # the host has them all
    for name, (devs, cores) in DEVICES.items():
        c = by_name[name]
        assert [d["PathOnHost"] for d in c["HostConfig"]["Devices"]] == [f"/dev/neuron{i}" for i in devs]
        # what the container really sees: its own nodes and no other neuron node
        assert _neuron_nodes(HOST, c["Id"]) == {f"neuron{i}" for i in devs}, name
        assert _env(c)["NEURON_RT_VISIBLE_CORES"] == cores


def _client(server: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"{host_ip(HOST)}:{PORTS[server]}", network_timeout=10)


def _infer(server: str, model: str) -> float:
    a = np.full((1, 4), 2, np.float32)
    inputs = [httpclient.InferInput("INPUT0", a.shape, "FP32"), httpclient.InferInput("INPUT1", a.shape, "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return float(_client(server).infer(model, inputs).as_numpy("OUTPUT0")[0][0])


def _loads(server: str) -> dict[str, int]:
    """How often the server's container logged a successful load, per model (Triton's own log lines)."""
    logs = ssh(HOST, f"docker logs {server} 2>&1").stdout
    out: dict[str, int] = {}
    for model in re.findall(r"successfully loaded '([^']+)'", logs):
        out[model] = out.get(model, 0) + 1
    return out


def _current() -> str:
    return ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.strip()


def test_each_server_answers_its_own_models_only(split):
    assert _infer("adder", "add_sub") == 4.0 and _infer("other", "other") == 4.0
    for server, foreign in (("adder", "other"), ("other", "add_sub")):
        with pytest.raises(Exception, match="unknown model") as info:
            _infer(server, foreign)
        assert foreign in str(info.value)
        assert not _client(server).is_model_ready(foreign)
    flags = ssh(HOST, "docker inspect -f '{{json .Args}}' adder other").stdout.splitlines()
    assert '"--load-model=add_sub"' in flags[0] and "--load-model=other" not in flags[0]
    assert '"--load-model=other"' in flags[1] and "add_sub" not in flags[1]


def test_a_model_update_reloads_only_the_server_that_serves_it(split):
    before = {s: _loads(s) for s in PORTS}
    run = pyinfra(split["v2"], "deploys/models.py")
    assert run.returncode == 0, run.output[-5000:]
    after = {s: _loads(s) for s in PORTS}
    assert after["adder"].get("add_sub", 0) == before["adder"].get("add_sub", 0) + 1, (before, after)  # reloaded
    assert after["other"] == before["other"], (before, after)  # it serves no add_sub: nothing loaded there
    assert _infer("adder", "add_sub") == 4.0 and _infer("other", "other") == 4.0


def test_a_version_that_does_not_fit_is_refused_before_any_load_and_the_host_keeps_serving(split):
    served = _current()
    before = {s: _loads(s) for s in PORTS}
    run = pyinfra(split["v3"], "deploys/models.py")
    assert run.returncode != 0
    line = next((x for x in run.output.splitlines() if "MiB" in x and "other" in x), "")
    assert re.search(r"server other: .*other.*1000000 MiB", line), run.output[-4000:]
    assert _current() == served  # the version it had
    assert {s: _loads(s) for s in PORTS} == before  # nothing was loaded anywhere
    assert _infer("adder", "add_sub") == 4.0 and _infer("other", "other") == 4.0
