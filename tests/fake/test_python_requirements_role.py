"""@fake runs with ``triton_python_requirements``: the python layer's build context and build on GPU and Neuron
hosts, the containers running the built tag, preflight refusing bad lines and index URLs before anything runs,
the tag following the set (not its spelling), a failed pip install in one line before any swap, and the model
gate's hint for a python model missing a module."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest
from pyinfra.api.exceptions import PyinfraError
from pyinfra.connectors.fake import FakeConnector

import roles.operations.triton as triton_ops
from roles.preflight import PreflightError
from roles.triton import image_ref, serving_image, triton
from tests.fake.fakehost import run_deploys
from tests.fake.test_models_role import small_wheelhouse  # noqa: F401 - the agent's wheelhouse, a fixture
from tests.fake.test_roles import DATA
from tests.hostconfigs import host_config
from tritonfleet import pyreqs

NEURON = {**DATA, "instance_type": "inf2.xlarge"}
GPU = {**DATA, "instance_type": "g5.xlarge"}
NGC = "nvcr.io/nvidia/tritonserver:24.10-py3"
REQS = ["emoji==2.14.0", "requests==2.32.3"]
INDEX = "http://10.0.0.5:8080/simple/"
H = "a" * 64


def recording(monkeypatch) -> list[str]:
    """Every command the fake host is asked to run, also when the run fails (run_deploys raises then)."""
    seen: list[str] = []
    orig = FakeConnector.run_shell_command

    def run(self, command, *args, **kwargs):
        seen.append(str(command.get_raw_value() if hasattr(command, "get_raw_value") else command))
        return orig(self, command, *args, **kwargs)

    monkeypatch.setattr(FakeConnector, "run_shell_command", run)
    return seen


def swaps(commands: list[str]) -> list[str]:
    return [c for c in commands if "' triton-swap.sh " in c]


def failures(commands: list[str]) -> list[str]:
    return [shlex.split(c.split(" >&2")[0])[1] for c in commands if c.startswith("echo 'ERROR: ")]


def test_gpu_host_pulls_the_base_then_builds_the_python_layer_and_runs_it(monkeypatch):
    rec = run_deploys(triton, {**GPU, "triton_python_requirements": ["requests==2.32.3", "Emoji==2.14.0"],
                               "triton_pip_index": INDEX}, "ubuntu2204", monkeypatch)
    reqs = pyreqs.parse(REQS)
    tag = pyreqs.image_tag(NGC, reqs, INDEX)
    build_dir = f"/var/lib/tritonfleet/build/{tag.rsplit(':', 1)[1]}"
    assert rec.uploads[f"{build_dir}/Dockerfile"] == pyreqs.dockerfile(NGC, reqs, INDEX)
    assert f"FROM {NGC}\n" in rec.uploads[f"{build_dir}/Dockerfile"]
    assert "--index-url" in rec.uploads[f"{build_dir}/Dockerfile"] and "--trusted-host 10.0.0.5:8080" in \
        rec.uploads[f"{build_dir}/Dockerfile"]
    assert rec.uploads[f"{build_dir}/requirements.txt"].splitlines()[1:] == REQS
    pulls = [c for c in rec.commands if c.startswith("docker pull")]
    assert pulls == [f"docker pull -q {NGC}"]  # the base, as without requirements
    (build,) = [c for c in rec.commands if "docker build" in c]
    assert f"docker build -t {tag} {build_dir} >{build_dir}/build.log 2>&1" in build
    assert rec.commands.index(pulls[0]) < rec.commands.index(build) < rec.commands.index(swaps(rec.commands)[0])
    (swap,) = swaps(rec.commands)
    assert f" {tag} tritonserver " in swap and f" {NGC} tritonserver " not in swap


def test_neuron_host_builds_its_image_then_the_python_layer_on_it(monkeypatch):
    gated: list[str] = []
    monkeypatch.setattr(triton_ops, "neuron_compat_gate", lambda **kw: gated.append(kw["image"]))
    rec = run_deploys(triton, {**NEURON, "triton_python_requirements": REQS}, "ubuntu2204", monkeypatch)
    base = image_ref(host_config(NEURON))
    tag = pyreqs.image_tag(base, pyreqs.parse(REQS))
    builds = [c for c in rec.commands if "docker build" in c]
    assert len(builds) == 2 and base in builds[0] and f"-t {tag} " in builds[1]
    (layer,) = [v for k, v in rec.uploads.items() if k.endswith(f"{tag.rsplit(':', 1)[1]}/Dockerfile")]
    assert f"FROM {base}\n" in layer and "--index-url" not in layer and "--require-hashes" not in layer
    (swap,) = swaps(rec.commands)
    assert f" {tag} tritonserver " in swap
    assert gated == [tag]  # the layer inherits the base's runtime label: the gate reads the image that runs


def test_without_requirements_nothing_changes(monkeypatch):
    rec = run_deploys(triton, GPU, "ubuntu2204", monkeypatch)
    assert not any("docker build" in c for c in rec.commands) and not rec.uploads
    (swap,) = swaps(rec.commands)
    assert f" {NGC} tritonserver " in swap
    rec = run_deploys(triton, NEURON, "ubuntu2204", monkeypatch)
    assert [c for c in rec.commands if "docker build" in c] == [
        f"DOCKER_BUILDKIT=0 docker build -q -t {image_ref(host_config(NEURON))} "
        f"/var/lib/tritonfleet/build/{image_ref(host_config(NEURON)).rsplit(':', 1)[1]}"]


def test_hashed_requirements_build_with_require_hashes(monkeypatch, tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text(f"emoji==2.14.0 \\\n    --hash=sha256:{H}\n")
    rec = run_deploys(triton, {**GPU, "triton_python_requirements": str(path)}, "ubuntu2204", monkeypatch)
    (dockerfile,) = [v for k, v in rec.uploads.items() if k.endswith("/Dockerfile")]
    assert "--require-hashes" in dockerfile
    (reqs,) = [v for k, v in rec.uploads.items() if k.endswith("/requirements.txt")]
    assert f"emoji==2.14.0 --hash=sha256:{H}" in reqs


@pytest.mark.parametrize("data, field, says", [
    ({"triton_python_requirements": ["emoji==2.14.0", "requests"]}, "triton_python_requirements",
     "entry 2 'requests': not pinned"),
    ({"triton_python_requirements": ["emoji>=2"]}, "triton_python_requirements", "entry 1 'emoji>=2': not an exact pin"),
    ({"triton_python_requirements": [f"emoji==2.14.0 --hash=sha256:{H}", "requests==2.32.3"]},
     "triton_python_requirements", "entry 2 'requests==2.32.3' has no --hash while entry 1 has one"),
    ({"triton_python_requirements": "no/such/requirements.txt"}, "triton_python_requirements",
     "no/such/requirements.txt: no such requirements file"),
    ({"triton_python_requirements": REQS, "triton_pip_index": "ftp://mirror/simple"}, "triton_pip_index",
     "is not an http(s) URL of a package index"),
    ({"triton_python_requirements": REQS, "triton_pip_index": "https://bob:hunter2@pypi.example.com/simple"},
     "triton_pip_index", "credentials in the index URL would be kept in the image's build history"),
])
def test_bad_requirements_stop_the_run_before_anything_runs(monkeypatch, data, field, says):
    seen = recording(monkeypatch)
    with pytest.raises(PreflightError) as caught:
        run_deploys(triton, {**GPU, **data}, "ubuntu2204", monkeypatch)
    message = str(caught.value)
    assert message.startswith("preflight failed, nothing was changed:\n  ")
    (line,) = message.splitlines()[1:]
    assert line.strip().startswith(f"@fake/h1: {field}") and says in line, line
    assert "hunter2" not in message
    assert not any("docker" in c or "triton-swap" in c for c in seen)


def test_a_file_requirement_is_read_in_the_directory_pyinfra_runs_in(monkeypatch, tmp_path):
    (tmp_path / "reqs.txt").write_text("emoji==2.14.0\n")
    monkeypatch.chdir(tmp_path)
    rec = run_deploys(triton, {**GPU, "triton_python_requirements": "reqs.txt"}, "ubuntu2204", monkeypatch)
    (reqs,) = [v for k, v in rec.uploads.items() if k.endswith("/requirements.txt")]
    assert "emoji==2.14.0" in reqs


def test_the_tag_follows_the_set_not_its_spelling_or_order():
    def tag(reqs, index=None, **data):
        return serving_image(c := host_config({**GPU, **data, "triton_python_requirements": reqs,
                                               "triton_pip_index": index}), image_ref(c))

    a = tag(["emoji==2.14.0", "requests==2.32.3"])
    assert a.startswith("tritonfleet/tritonserver-python:")
    assert tag(["Requests == 2.32.3  # http", "EMOJI == 2.14.0"]) == a  # order, case, spacing, comments
    assert tag(["emoji==2.14.1", "requests==2.32.3"]) != a
    assert tag(["emoji==2.14.0"]) != a
    assert tag(["emoji==2.14.0", "requests==2.32.3"], INDEX) != a
    assert tag(["emoji==2.14.0", "requests==2.32.3"], triton_base_image="nvcr.io/nvidia/tritonserver:24.09-py3") != a
    assert tag(None) == NGC and tag([]) == NGC


NO_VERSION = [
    "Step 3/4 : RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir -r /opt/x.txt",
    " ---> Running in 0c1d2e3f",
    "Looking in indexes: http://10.0.0.5:8080/simple/",
    "ERROR: Could not find a version that satisfies the requirement emoji==99.0 (from versions: 2.13.2, 2.14.0)",
    "ERROR: No matching distribution found for emoji==99.0",
    "The command '/bin/sh -c PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install' returned a non-zero code: 1",
]


def test_a_failed_pip_install_is_one_line_and_no_container_is_swapped(monkeypatch, tmp_path):
    seen = recording(monkeypatch)
    with pytest.raises((AssertionError, PyinfraError)):
        run_deploys(triton, {**GPU, "triton_python_requirements": ["emoji==99.0"]}, "ubuntu2204", monkeypatch,
                    responses={"docker build -t tritonfleet/tritonserver-python:": {"success": False,
                                                                                    "stdout": NO_VERSION}})
    assert failures(seen) == [
        "ERROR: python packages (triton_python_requirements) did not install: emoji==99.0: no such version (the "
        "index has: 2.13.2, 2.14.0); the running servers are unchanged"]
    assert not swaps(seen)  # the old server keeps serving
    # on a host: the build's output goes to build.log, and a failure prints it back for the line above
    (build,) = [c for c in seen if "docker build -t tritonfleet/tritonserver-python:" in c]
    bin_dir, build_dir = tmp_path / "bin", tmp_path / "build"
    bin_dir.mkdir()
    build_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(map(shlex.quote, NO_VERSION)) + "\nexit 1\n")
    (bin_dir / "docker").chmod(0o755)
    local = re.sub(r"/var/lib/tritonfleet/build/[0-9a-f]{16}", str(build_dir), build)
    proc = subprocess.run(["sh", "-c", local], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert proc.returncode == 1 and (build_dir / "build.log").read_text().splitlines() == NO_VERSION
    assert pyreqs.pip_failure(proc.stdout) == "emoji==99.0: no such version (the index has: 2.13.2, 2.14.0)"


def test_a_python_model_missing_a_module_gets_a_hint_naming_the_setting(monkeypatch, tmp_path):
    (tmp_path / "emoji_echo" / "1").mkdir(parents=True)
    (tmp_path / "emoji_echo" / "config.pbtxt").write_text('name: "emoji_echo"\nbackend: "python"\n')
    gate_output = {"success": False, "stderr": [
        "loading emoji_echo",
        "ERROR: model emoji_echo did not load (HTTP 400): {\"error\":\"load failed for model 'emoji_echo': "
        "version 1 is at UNAVAILABLE state: Internal: ModuleNotFoundError: No module named 'emoji'\"}",
        "ERROR: took the new model emoji_echo out of the live repository (a restart would fail on it)"]}
    data = {**GPU, "models_source": str(tmp_path)}
    seen = recording(monkeypatch)
    with pytest.raises((AssertionError, PyinfraError)):
        run_deploys(triton, data, "ubuntu2204", monkeypatch, ready=False,
                    responses={re.compile(r"' triton-models\.sh "): gate_output})
    assert failures(seen) == ["ERROR: model emoji_echo: python backend: No module named 'emoji': add it to "
                              "triton_python_requirements (pinned, e.g. emoji==<version>)"]
    # listed but not in the image the server runs: the image was not rebuilt with it
    seen.clear()
    with pytest.raises((AssertionError, PyinfraError)):
        run_deploys(triton, {**data, "triton_python_requirements": ["emoji==2.14.0"]}, "ubuntu2204", monkeypatch,
                    ready=False, responses={re.compile(r"' triton-models\.sh "): gate_output})
    (hint,) = failures(seen)
    assert "emoji is in triton_python_requirements but not in the image the server runs" in hint


def test_a_gate_failure_without_a_missing_module_adds_nothing(monkeypatch, tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\n')
    seen = recording(monkeypatch)
    with pytest.raises((AssertionError, PyinfraError)):
        run_deploys(triton, {**GPU, "models_source": str(tmp_path)}, "ubuntu2204", monkeypatch, ready=False,
                    responses={re.compile(r"' triton-models\.sh "): {
                        "success": False, "stderr": ["ERROR: model m did not load (HTTP 400): bad config"]}})
    assert failures(seen) == [] and any("' triton-models.sh " in c for c in seen)


# --------------------------------------------------------------- S3 models and a new image: the sync waits

S3 = {"models_s3_uri": "s3://models-bucket/prod", "models_s3_region": "eu-west-1"}
AGENT = {"sys.version_info": ["3.11", "x86_64", "none"]}
RUNNING = 's|^|$n |'  # what the NamedContainers fact's command holds


def _order(rec) -> tuple[int, int]:
    """(index of the agent's sync, index of the container swap) among the run's commands."""
    sync = [i for i, c in enumerate(rec.commands) if "tritonfleet-agent sync" in c and "--dry-run" not in c]
    swap = [i for i, c in enumerate(rec.commands) if "' triton-swap.sh " in c]
    assert len(sync) == 1 and len(swap) == 1, (sync, swap)
    return sync[0], swap[0]


@pytest.mark.usefixtures("small_wheelhouse")
@pytest.mark.parametrize("host_type", [NEURON, GPU])
def test_a_new_python_image_is_swapped_in_before_the_s3_sync_loads_new_models(monkeypatch, host_type):
    """A model that needs a package new in this run must load on the image that has it: with the running
    container on another image, the S3 sync (and its live reload) comes after the swap."""
    from tests.fake.test_roles import SERVE_DEPLOY

    data = {**host_type, **S3, "triton_python_requirements": REQS}
    rec = run_deploys(SERVE_DEPLOY, data, "ubuntu2204", monkeypatch,
                      responses={**AGENT, RUNNING: ['triton true {} "tritonfleet/plain:1"']})
    sync, swap = _order(rec)
    assert swap < sync


@pytest.mark.usefixtures("small_wheelhouse")
@pytest.mark.parametrize("running", [None, "wanted"])
def test_the_s3_sync_comes_first_on_a_new_host_and_when_the_image_stays(monkeypatch, running):
    from tests.fake.test_roles import SERVE_DEPLOY

    data = {**GPU, **S3, "triton_python_requirements": REQS}
    cfg = host_config(data)
    wanted = serving_image(cfg, image_ref(cfg))
    responses = {**AGENT, RUNNING: [f'triton true {{}} "{wanted}"'] if running else []}
    rec = run_deploys(SERVE_DEPLOY, data, "ubuntu2204", monkeypatch, responses=responses)
    sync, swap = _order(rec)
    assert sync < swap


AGENT_SYNC_FAILED = {"success": False, "stderr": [
    "tritonfleet-agent: error: model emoji_echo did not load (load failed for model 'emoji_echo': version 1 is at "
    "UNAVAILABLE state: Internal: ModuleNotFoundError: No module named 'emoji'); switched back to "
    "000001-20261127T091900Z"]}


@pytest.mark.usefixtures("small_wheelhouse")
def test_an_s3_sync_whose_reload_fails_on_a_missing_module_names_the_setting(monkeypatch):
    from roles.agent import agent
    from roles.models import models

    seen = recording(monkeypatch)
    with pytest.raises((AssertionError, PyinfraError)):
        run_deploys([agent, models], {**GPU, **S3}, "ubuntu2204", monkeypatch,
                    responses={**AGENT, re.compile(r"tritonfleet-agent sync (?!.*--dry-run)"): AGENT_SYNC_FAILED})
    assert failures(seen) == ["ERROR: model emoji_echo: python backend: No module named 'emoji': add it to "
                              "triton_python_requirements (pinned, e.g. emoji==<version>)"]


def test_a_new_container_failing_its_gate_on_a_missing_module_names_the_setting(monkeypatch):
    from tests.unit.test_pyreqs import SWAP_GATE

    seen = recording(monkeypatch)
    with pytest.raises((AssertionError, PyinfraError)):
        run_deploys(triton, GPU, "ubuntu2204", monkeypatch,
                    responses={re.compile(r"' triton-swap\.sh "): {"success": False,
                                                                   "stderr": SWAP_GATE.splitlines()}})
    assert [f.split(": ")[1] for f in failures(seen)] == ["model emoji_echo", "model tabled"]
