"""Model repositories from S3 on a sandbox host, asserted from outside (tritonclient, docker inspect over
SSH, the S3 server's request log): serve from the bucket, update it live under load without touching the
container, a no-op re-run with no GET, and a broken model that fails the run while the old one serves."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid

import boto3
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import assert_noop, host_ip, killed_first_run, pyinfra, ssh, write_inventory
from tests.faults import Hang
from tritonfleet.sandbox import fleet, neffgen
from tritonfleet.sandbox.layout import BRIDGE_IP, logs_dir

HOST = "scratch2"  # its own host: this file runs on the second fleet worker (tests/conftest.py)
ADD_SUB = (fleet.SAMPLES / "add_sub/1/model.py").read_text()
CONFIG = (fleet.SAMPLES / "add_sub/config.pbtxt").read_text()
V2 = ADD_SUB.replace("(in0 + in1)", "(in0 + in1 + 100)")
BROKEN = ADD_SUB.replace("class TritonPythonModel:", "class TritonPythonModel:\n    def initialize(self, args):\n"
                         "        raise RuntimeError('tritonfleet-e2e: broken on purpose')\n")


def _client():
    return boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                        aws_access_key_id="sandbox", aws_secret_access_key="sandbox")


def _model(name: str, code: str = ADD_SUB) -> dict[str, str]:
    config = re.sub(r'name:\s*"add_sub"', f'name: "{name}"', CONFIG)
    return {f"{name}/config.pbtxt": config, f"{name}/1/model.py": code}


def _set(s3, prefix: str, tree: dict[str, str | bytes]) -> None:
    """Make the prefix hold exactly ``tree`` (puts what differs, deletes the rest)."""
    have = {o["Key"][len(prefix):]: o for o in s3.list_objects_v2(Bucket=fleet.S3_BUCKET, Prefix=prefix).get("Contents", [])}
    for path, text in tree.items():
        s3.put_object(Bucket=fleet.S3_BUCKET, Key=prefix + path, Body=text if isinstance(text, bytes) else text.encode())
    for path in set(have) - set(tree):
        s3.delete_object(Bucket=fleet.S3_BUCKET, Key=prefix + path)


def _infer(client, model: str):
    a, b = np.full((1, 4), 2, np.float32), np.full((1, 4), 1, np.float32)
    inputs = [httpclient.InferInput("INPUT0", a.shape, "FP32"), httpclient.InferInput("INPUT1", b.shape, "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return client.infer(model, inputs).as_numpy("OUTPUT0")[0][0]


def _object_gets(offset: int) -> list[str]:
    """Object GETs (not listings) by the host in the S3 server's log after byte ``offset``."""
    with open(logs_dir() / "s3.log", "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    ip = re.escape(host_ip(HOST))
    return re.findall(rf'^{ip} .*"(?:GET|HEAD) (/{fleet.S3_BUCKET}/[^ ?]+) HTTP', text, re.M)


def _log_size() -> int:
    return (logs_dir() / "s3.log").stat().st_size


def _container() -> dict:
    c = json.loads(ssh(HOST, "docker inspect triton").stdout)[0]
    return {"id": c["Id"], "started": c["State"]["StartedAt"]}


class Load:
    """One client thread at ~60 requests per second to a model, bounded in count and time."""

    def __init__(self, model: str, rate: float = 60, max_requests: int = 12000, max_seconds: float = 240) -> None:
        self.model, self.rate, self.max_requests, self.max_seconds = model, rate, max_requests, max_seconds
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000", connection_timeout=5, network_timeout=5)
        self.started = time.monotonic()
        n = 0
        while not self._stop.is_set() and n < self.max_requests and time.monotonic() - self.started < self.max_seconds:
            n += 1
            try:
                assert _infer(client, self.model) == 3.0
                self.ok += 1
            except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                self.failures.append(f"{type(exc).__name__}: {exc}"[:200])
            time.sleep(max(0.0, self.started + n / self.rate - time.monotonic()))
        self.seconds = time.monotonic() - self.started

    def __enter__(self) -> Load:
        self._thread.start()
        time.sleep(1)
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(1)
        self._stop.set()
        self._thread.join(30)


@pytest.fixture(scope="module")
def live(sandbox, tmp_path_factory):
    """A bare host serving v1 of a repository in its own prefix of the sandbox bucket."""
    fleet.reset_host(HOST)
    s3 = _client()
    prefix = f"e2e-live-{uuid.uuid4().hex[:8]}/"
    _set(s3, prefix, {**_model("add_sub"), **_model("steady"), **_model("leaving")})
    base = tmp_path_factory.mktemp("live")
    inv = write_inventory(base, [HOST], extra={"models_s3_uri": f"s3://{fleet.S3_BUCKET}/{prefix.rstrip('/')}"})
    # issue 20 part 7, as found: the first run SIGKILLed while it installs the agent, the next one at once
    first = killed_first_run(inv, "Host agent", 1.0)
    assert "Starting operation: Host agent" in first, first[-3000:]
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode == 0, f"the rerun after a killed first run:\n{run.output[-5000:]}"
    assert "Directory not empty" not in run.output and "executed 0 commands" not in run.output
    yield s3, prefix, inv
    _set(s3, prefix, {})


def test_serves_the_repository_from_the_bucket(live):
    """(Its host's first run was killed during the agent's install and run again at once: the fixture.)"""
    assert ssh(HOST, "readlink /opt/tritonfleet/venv").stdout.strip().startswith("venvs/")
    client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000")
    for model in ("add_sub", "steady", "leaving"):
        assert client.is_model_ready(model), model
    assert _infer(client, "add_sub") == 3.0
    assert ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.startswith("versions/")
    assert ssh(HOST, "stat -c %a /etc/tritonfleet/repository-header").stdout.strip() == "600"


def test_an_update_is_loaded_live_under_load_without_touching_the_container(live):
    s3, prefix, inv = live
    before = _container()
    _set(s3, prefix, {**_model("add_sub", V2), **_model("steady"), **_model("arriving")})
    with Load("steady") as load:
        run = pyinfra(inv, "deploys/models.py")
    assert run.returncode == 0, run.output[-5000:]
    assert load.failures == [], load.failures[:5]
    rate = load.ok / load.seconds
    print(f"steady: {load.ok} requests in {load.seconds:.1f} s ({rate:.0f}/s) during the update, 0 failed")
    assert load.ok >= 100 and rate >= 50, (load.ok, load.seconds)
    client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000")
    assert _infer(client, "add_sub") == 103.0  # v2, read through the switched `current`
    assert client.is_model_ready("arriving") and not client.is_model_ready("leaving")
    assert _container() == before  # same container, never restarted


def test_a_second_run_changes_nothing_and_gets_no_object(live):
    s3, prefix, inv = live
    offset = _log_size()
    run = pyinfra(inv, "deploys/models.py")
    assert_noop(run)
    assert _object_gets(offset) == []
    # the listing was made (the run did ask S3) and the log is where we look
    with open(logs_dir() / "s3.log", "rb") as f:
        f.seek(offset)
        assert f"list-type=2&prefix={prefix}".encode() in f.read()


def test_a_broken_model_fails_the_run_with_tritons_reason_and_the_previous_version_keeps_serving(live):
    s3, prefix, inv = live
    before = _container()
    current = ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.strip()
    _set(s3, prefix, {**_model("add_sub", BROKEN), **_model("steady"), **_model("arriving")})
    with Load("steady") as load:
        run = pyinfra(inv, "deploys/models.py")
    assert run.returncode != 0
    assert "model add_sub did not load" in run.output and "broken on purpose" in run.output, run.output[-3000:]
    assert "switched back to" in run.output
    assert load.failures == []
    client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000")
    assert _infer(client, "add_sub") == 103.0 and client.is_model_ready("arriving")
    assert ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.strip() == current
    assert _container() == before


def test_a_model_compiled_for_a_newer_runtime_is_refused_before_the_switch_and_the_old_version_serves(live):
    """Issue 26: a model whose NEFF was compiled by a neuronx-cc newer than the image's runtime loads (the sandbox
    image declares runtime-lib 2.34.10.0, Neuron SDK 2.32.0, whose compiler is 2.27.5334.0) is refused by the
    agent before it switches: one line naming the model and the fix, `current` unchanged, v1 answering."""
    s3, prefix, inv = live
    current = ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.strip()
    client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000")
    served = ("add_sub", "steady", "arriving")  # the live update's v2 (the broken model before this was refused)
    assert all(client.is_model_ready(m) for m in served)
    newer = neffgen.neff_bytes("2.28.1000.0", "2.0")  # a compiler of a release after 2.32.0
    # what the host serves (the live update's v2; the broken model before this was refused) and bert
    _set(s3, prefix, {**_model("add_sub", V2), **_model("steady"), **_model("arriving"), **_model("bert"),
                      "bert/1/model.neff": newer})
    run = pyinfra(inv, "deploys/models.py")
    assert run.returncode != 0
    line = ("model bert: compiled by neuronx-cc 2.28.1000.0 (NEFF 2.0), newer than neuronx-cc 2.27.5334.0 of Neuron "
            "SDK 2.32.0, needs a runtime newer than 2.34; the image has 2.34.10.0: set neuron_sdk_release to a "
            "release after 2.32.0, or recompile with the image's compiler (neuronx-cc 2.27.5334.0)")
    assert line in run.output, run.output[-3000:]
    assert ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.strip() == current
    assert not client.is_model_ready("bert") and all(client.is_model_ready(m) for m in served)
    assert _infer(client, "add_sub") == 103.0


def test_an_s3_that_hangs_fails_the_run_in_bounded_time_and_the_next_run_is_not_held_up(live, tmp_path):
    """Issue 20 part 1, as found: deploys/models.py against an S3 that accepts connections and never answers.
    The run ends within the timeouts (not minutes), with the agent's one line naming the endpoint and the
    phase, ``current`` untouched and serving; the next run against the real S3 takes the lock at once."""
    s3, prefix, inv = live
    _set(s3, prefix, {**_model("add_sub", V2), **_model("steady"), **_model("arriving"), **_model("late")})
    before = ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.strip()
    hang = Hang(BRIDGE_IP)  # on the bridge: the sandbox host reaches it
    try:
        hung = write_inventory(tmp_path, [HOST], extra={
            "models_s3_uri": f"s3://{fleet.S3_BUCKET}/{prefix.rstrip('/')}", "models_s3_endpoint": hang.url,
            "models_s3_read_timeout": 1, "models_s3_connect_timeout": 1})
        started = time.monotonic()
        run = pyinfra(hung, "deploys/models.py", timeout=300)
        seconds = time.monotonic() - started
    finally:
        hang.close()
    assert run.returncode != 0 and hang.conns, run.output[-3000:]
    assert f"S3 at {hang.url} did not answer within 1 s (read timeout, 3 attempts) while listing s3://" \
        in run.output, run.output[-3000:]
    assert "Traceback" not in run.output
    # the plan's dry run and the sync: 3 attempts x 1 s each, plus pyinfra's own work (the default: 180 s)
    assert seconds < 60, seconds
    assert ssh(HOST, "readlink /opt/tritonfleet/models/current").stdout.strip() == before
    client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000")
    assert _infer(client, "steady") == 3.0
    again = pyinfra(inv, "deploys/models.py")
    assert again.returncode == 0 and "another sync holds" not in again.output, again.output[-3000:]
    assert client.is_model_ready("late")


def test_a_file_that_rots_on_the_host_is_found_by_a_no_op_run_and_repaired(live):
    """Issue 20 part 2, as found: a byte changed in a model file of the current version and another file
    deleted. With S3 unchanged the next run finds both, repairs them through a new version and the normal
    switch, reloads the model, and says so; the run after it changes nothing."""
    s3, prefix, inv = live
    root = "/opt/tritonfleet/models/current"
    # (a model.py would not do: the models' identical model.py files are one inode, linked)
    ssh(HOST, f"printf X | dd of={root}/steady/config.pbtxt bs=1 seek=0 conv=notrunc status=none "
              f"&& rm {root}/late/1/model.py")
    run = pyinfra(inv, "deploys/models.py")
    assert run.returncode == 0, run.output[-3000:]
    assert "2 damaged files, repaired from S3 by this run: late/1/model.py (missing), steady/config.pbtxt " \
        "(content changed (md5 " in run.output, run.output[-3000:]
    assert ssh(HOST, f"cat {root}/steady/config.pbtxt").stdout == _model("steady")["steady/config.pbtxt"]
    assert ssh(HOST, f"cat {root}/late/1/model.py").stdout == ADD_SUB
    client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000")
    assert _infer(client, "steady") == 3.0 and client.is_model_ready("late")
    assert_noop(pyinfra(inv, "deploys/models.py"))
