"""Python-backend models with their own packages, on a Neuron host (``scratch``, inf2.xlarge) and the GPU host
(``gpu``, g5.xlarge) at once. The repository (from the sandbox's S3) holds add_sub and ``emoji_echo``, a python
model that imports ``emoji``, which the plain image lacks; the sandbox's repository server has a PyPI simple
index with emoji and tabulate (``triton_pip_index`` in the sandbox inventory). Asserted from outside: the
deploy's output, tritonclient on each host, and ``docker inspect`` over SSH.

1. Plain image: the model update (``deploys/models.py``; ``serve.py`` on hosts that serve nothing yet) fails with
   Triton's reason in one line naming the model, the module and the setting, and each host goes on serving what
   it served (add_sub answers).
2. ``triton_python_requirements`` (pinned, with hashes): the image is built on each host and emoji_echo serves.
3. The same again: nothing changes (no build, same containers).
4. One host's requirements change (tabulate added): a new image, the container swapped through the health gate,
   still serving; at the same time the other host's pin cannot be resolved: the run fails with pip's reason
   naming the package, and that host's container is the one it had, serving. Then the other way round, so each
   family shows both.
"""

from __future__ import annotations

import json
import uuid

import boto3
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import assert_noop, host_ip, pyinfra, ssh, write_inventory
from tritonfleet import pyreqs
from tritonfleet.sandbox import fleet, layout, pypi
from tritonfleet.sandbox.inventory import sandbox_hosts

NEURON, GPU = "scratch", "gpu"
HOSTS = [NEURON, GPU]
EMOJI = [line for line in pypi.requirement_lines() if line.startswith("emoji==")]
BOTH = pypi.requirement_lines()  # emoji and tabulate
UNRESOLVABLE = ["emoji==99.0"]


def _tree() -> dict[str, bytes]:
    tree = {}
    for root in (layout.SAMPLES / "add_sub", layout.EXTRA_SAMPLES / "emoji_echo"):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                tree[f"{root.name}/{path.relative_to(root)}"] = path.read_bytes()
    return tree


def _container(host: str) -> dict | None:
    out = ssh(host, "docker inspect triton 2>/dev/null || true").stdout.strip()
    if not out or out == "[]":
        return None
    c = json.loads(out)[0]
    return {"id": c["Id"], "image": c["Config"]["Image"]}


def _client(host: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"{host_ip(host)}:8000", connection_timeout=10, network_timeout=10)


def _emojize(host: str, text: str = ":thumbs_up:") -> str:
    data = np.array([[text.encode()]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data)
    return _client(host).infer("emoji_echo", [inp]).as_numpy("OUTPUT0")[0][0].decode()


def _add_sub(host: str) -> float:
    a = np.full((1, 4), 2, np.float32)
    inputs = [httpclient.InferInput(n, list(a.shape), "FP32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(a / 2 if i.name() == "INPUT1" else a)
    return float(_client(host).infer("add_sub", inputs).as_numpy("OUTPUT0")[0][0])


@pytest.fixture(scope="module")
def repo(sandbox, tmp_path_factory):
    """add_sub and emoji_echo in a prefix of their own; ``inventory(per_host)`` writes an inventory for them."""
    s3 = boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                      aws_access_key_id="sandbox", aws_secret_access_key="sandbox")
    prefix = f"e2e-pyreqs-{uuid.uuid4().hex[:8]}"
    for path, body in _tree().items():
        s3.put_object(Bucket=fleet.S3_BUCKET, Key=f"{prefix}/{path}", Body=body)
    base = tmp_path_factory.mktemp("pyreqs")
    n = iter(range(100))

    def inventory(per_host: dict | None = None) -> str:
        d = base / f"run{next(n)}"
        d.mkdir()
        return str(write_inventory(d, HOSTS, extra={"models_s3_uri": f"s3://{fleet.S3_BUCKET}/{prefix}"},
                                   per_host=per_host))

    assert all(d.get("triton_pip_index") == layout.pypi_index_url() for _, d in sandbox_hosts(HOSTS))
    return inventory


@pytest.fixture(scope="module")
def built(repo):
    """Runs 1 and 2: the plain image fails on the missing module, the requirements make it serve."""
    before = {h: _container(h) for h in HOSTS}
    answered = {h: _answers(h) for h in HOSTS}
    # on serving hosts (the suite's earlier tests served both) the model update alone shows it: deploys/models.py
    plain = pyinfra(repo(), "deploys/models.py" if all(answered.values()) else "deploys/serve.py")
    serving = {h: (answered[h], _answers(h)) for h in HOSTS}  # after the failed run: what served still serves
    with_reqs = pyinfra(repo({h: {"triton_python_requirements": EMOJI} for h in HOSTS}), "deploys/serve.py")
    return before, (plain, serving), with_reqs


def _answers(host: str) -> bool | None:
    """add_sub answers 3.0 (True), answers wrongly (False), or the host serves nothing (None)."""
    try:
        return _add_sub(host) == 3.0
    except Exception:  # noqa: BLE001 - nothing serving
        return None


def test_a_model_needing_a_package_fails_on_the_plain_image_naming_module_and_setting(built):
    before, (plain, serving), _ = built
    assert plain.returncode != 0
    for host in HOSTS:  # a host that served before (the e2e fleet's earlier tests served both) still does
        was, now = serving[host]
        assert now is True or was is not True, (host, was, now)
    hint = ("model emoji_echo: python backend: No module named 'emoji': add it to triton_python_requirements "
            "(pinned, e.g. emoji==")
    for host in HOSTS:
        assert any(host in line and hint in line for line in plain.output.splitlines()), plain.output[-6000:]
    assert "Traceback" not in plain.output


def test_with_the_requirements_each_host_builds_its_image_and_serves_the_model(built):
    before, _, run = built
    assert run.returncode == 0, run.output[-6000:]
    for host in HOSTS:
        c = _container(host)
        assert c is not None and c["image"].startswith(f"{pyreqs.IMAGE_REPOSITORY}:"), host
        # a new container where the image changed (it had: the plain image, in the suite)
        assert before[host] is None or before[host]["image"] == c["image"] or c["id"] != before[host]["id"], host
        assert _emojize(host) == "\N{THUMBS UP SIGN}", host
        assert _add_sub(host) == 3.0, host
        label = ssh(host, f"docker image inspect -f '{{{{index .Config.Labels \"{pyreqs.LABEL}\"}}}}' "
                          f"{c['image']}").stdout.strip()
        assert label == pyreqs.parse(EMOJI).digest(), host


def test_a_second_run_builds_nothing_and_changes_nothing(built, repo):
    _, _, first = built
    assert first.returncode == 0
    have = {h: _container(h) for h in HOSTS}
    again = pyinfra(repo({h: {"triton_python_requirements": EMOJI} for h in HOSTS}), "deploys/serve.py")
    assert_noop(again)
    assert "docker build" not in again.output
    assert {h: _container(h) for h in HOSTS} == have


@pytest.mark.parametrize("changed, broken", [(NEURON, GPU), (GPU, NEURON)], ids=["neuron-rebuilds", "gpu-rebuilds"])
def test_changed_requirements_rebuild_and_swap_and_an_unresolvable_pin_fails_while_the_old_image_serves(
        built, repo, changed, broken):
    """One host's set changes (tabulate added, or taken out again), the other's pin cannot be resolved, in the
    same run; then the other way round, so each family shows both."""
    _, _, first = built
    assert first.returncode == 0
    have = {h: _container(h) for h in HOSTS}
    new_set = BOTH if have[changed]["image"] != _tag(BOTH) else EMOJI
    run = pyinfra(repo({changed: {"triton_python_requirements": new_set},
                        broken: {"triton_python_requirements": UNRESOLVABLE}}), "deploys/serve.py")
    assert run.returncode != 0
    # the broken host: pip's reason naming the package, in one line; its container untouched and serving
    lines = [line for line in run.output.splitlines() if f"[{broken}]" in line and "did not install" in line]
    assert lines and "emoji==99.0" in lines[0] and "no such version" in lines[0], run.output[-6000:]
    assert _container(broken) == have[broken]
    assert _emojize(broken) == "\N{THUMBS UP SIGN}"
    # the changed host: a new image with its new set, swapped in through the health gate
    now = _container(changed)
    assert now is not None and now["image"] == _tag(new_set)
    assert now["image"] != have[changed]["image"] and now["id"] != have[changed]["id"]
    assert _emojize(changed) == "\N{THUMBS UP SIGN}" and _add_sub(changed) == 3.0
    imported = ssh(changed, "docker exec triton python3 -c 'import emoji, importlib.util as u; "
                            "print(u.find_spec(\"tabulate\") is not None)'")
    assert imported.stdout.strip() == str(new_set == BOTH), imported.stdout + imported.stderr


def _tag(lines: list[str]) -> str:
    return pyreqs.image_tag(layout_image(), pyreqs.parse(lines), layout.pypi_index_url())


def layout_image() -> str:
    """The sandbox's base serving image (``triton_image`` of its inventory)."""
    ((_, data),) = sandbox_hosts([NEURON])
    return data["triton_image"]
