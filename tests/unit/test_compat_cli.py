"""`tritonfleet compat` (tritonfleet/face/compat.py): the matrix from gathered host data (pure), the probe's
output read back, which image and versions a host's data names, the S3 repository read with Range GETs (moto),
and the command from the outside with stand-in SSH sessions: the table, the summary, the exit code, one-line
errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from roles import all_roles
from tritonfleet import compat as rules
from tritonfleet import hostcontract as hc
from tritonfleet import imagespec
from tritonfleet.agent import artifacts
from tritonfleet.agent.artifacts import ArtifactInfo
from tritonfleet.config import load_host_config
from tritonfleet.face import compat as fc
from tritonfleet.face.cli import main
from tritonfleet.sandbox import neffgen

FPR = "A" * 40
COMMON = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}
KERNEL = "6.8.0-1015-aws"
NEURONX = {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"}


def neuron_host(**over: Any) -> dict[str, Any]:
    """Gathered data of a healthy inf2 host on the default release (what :func:`fc.gathered` returns)."""
    g = {"host": "inf2-a", "instance_type": "inf2.xlarge", "accelerator": "neuron", "neuron_arch": "inf2",
         "unreachable": None, "loads": None, "image": "tritonfleet/tritonserver-neuron:0123456789abcdef",
         "image_present": True, "image_from": "on the host; runtime from its label, frameworks from its label",
         "kernel": KERNEL, "driver_package": "2.30.2.0", "driver_loaded": "2.30.2.0", "dkms_built": True,
         "planned_driver": "2.30.2.0*", "runtime": "2.34.10.0", "frameworks": dict(NEURONX)}
    return {**g, **over}


def verdicts(findings: list[rules.Finding]) -> dict[tuple[str, str], str]:
    return {(f.subject, f.link): f.verdict for f in findings}


def lines(findings: list[rules.Finding]) -> list[str]:
    return [str(f) for f in findings]


def art(compiler_version: str | None, neff: str | None = "2.0", path: str = "1/model.neff") -> ArtifactInfo:
    return ArtifactInfo(path, "neff", artifacts.compiler_of(compiler_version), compiler_version, neff,
                        "NEFF header; compiler from info.json", "header")


# -- the matrix (pure) ------------------------------------------------------------------------------------------

def test_a_healthy_neuron_host_is_ok_on_every_link():
    found = fc.host_findings(neuron_host(), {"bert": [art("2.27.5334.0")]})
    assert verdicts(found) == {
        ("image", fc.IMAGE): "ok", ("host inf2-a", rules.KERNEL_DRIVER): "ok",
        ("host inf2-a", rules.DRIVER_RUNTIME): "ok", ("image", rules.FRAMEWORK_RUNTIME): "ok",
        ("model bert", rules.RUNTIME_MODEL): "ok"}
    assert rules.worst(found) == rules.OK


def test_the_issues_example_a_model_compiled_for_a_newer_runtime_fails_with_its_fix():
    found = fc.host_findings(neuron_host(runtime="2.21.0", frameworks=None), {"bert": [art("2.16.345.0")]})
    (model,) = [f for f in found if f.subject == "model bert"]
    assert str(model) == (
        "model bert: compiled by neuronx-cc 2.16.345.0 (NEFF 2.0), needs runtime >= 2.23 (Neuron SDK 2.21.0); the "
        "image has 2.21.0: set neuron_sdk_release to 2.21.0 or later, or recompile with the image's compiler")
    assert model.verdict == rules.FAIL


@pytest.mark.parametrize(("over", "link", "verdict", "text"), [
    ({"dkms_built": False}, rules.KERNEL_DRIVER, "fail", "aws-neuronx-dkms 2.30.2.0 is not built for kernel"),
    ({"kernel": "6.18.0-1004-aws", "driver_package": "2.26.5.0", "planned_driver": "2.26.5.0*",
      "runtime": "2.30.50.0", "dkms_built": False},
     rules.KERNEL_DRIVER, "fail", "needs aws-neuronx-dkms 2.26.10.0 or later"),
    ({"kernel": "6.18.0-1004-aws", "driver_package": "2.26.5.0", "planned_driver": "2.26.5.0*",
      "runtime": "2.30.50.0"}, rules.KERNEL_DRIVER, "warn", "DKMS built it all the same"),
    ({"kernel": "5.15.0-1066-aws"}, rules.KERNEL_DRIVER, "warn", "kernel 5.15 is not one aws-neuronx-dkms"),
    ({"kernel": None}, rules.KERNEL_DRIVER, "warn", "the running kernel is unknown"),
    ({"driver_package": "2.29.8.0", "planned_driver": "2.29.*", "runtime": "2.32.31.0", "frameworks": None},
     rules.DRIVER_RUNTIME, "fail", "needs aws-neuronx-runtime-lib >= 2.33"),
    ({"runtime": "2.40.1.0"}, rules.DRIVER_RUNTIME, "warn", "newer than any release in the compatibility table"),
    ({"runtime": None}, rules.DRIVER_RUNTIME, "warn", "runtime-lib version is unknown"),
    ({"frameworks": None}, rules.FRAMEWORK_RUNTIME, "warn", "framework versions are unknown"),
    ({"frameworks": {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"}, "runtime": "2.30.50.0",
      "driver_package": "2.26.10.0", "planned_driver": "2.26.10.0*"},
     rules.FRAMEWORK_RUNTIME, "fail", "newer than runtime 2.30.50.0"),
])
def test_each_link_fails_or_warns_with_its_line(over, link, verdict, text):
    found = [f for f in fc.host_findings(neuron_host(**over)) if f.link == link and f.verdict != rules.OK]
    assert found, lines(fc.host_findings(neuron_host(**over)))
    assert found[0].verdict == verdict and text in found[0].line, lines(found)
    assert found[0].fix, "a failure or a warning says what to do"


def test_a_driver_the_deploy_would_change_is_judged_as_installed_and_as_planned():
    found = fc.host_findings(neuron_host(driver_package="2.26.10.0", driver_loaded="2.26.10.0"))
    after = "host inf2-a, after deploys/serve.py (aws-neuronx-dkms 2.30.2.0*)"
    assert verdicts(found)[("host inf2-a", rules.DRIVER_RUNTIME)] == "fail"  # 2.26 cannot run runtime 2.34
    assert verdicts(found)[(after, rules.DRIVER_RUNTIME)] == "ok"
    assert verdicts(found)[(after, rules.KERNEL_DRIVER)] == "ok"


def test_no_driver_yet_is_a_warning_and_the_planned_one_is_judged():
    found = fc.host_findings(neuron_host(driver_package=None, driver_loaded=None, dkms_built=None))
    assert [f.verdict for f in found if f.subject == "host inf2-a"] == ["warn"]
    assert {f.link for f in found if "after deploys/serve.py" in f.subject} == {rules.KERNEL_DRIVER,
                                                                                 rules.DRIVER_RUNTIME}


def test_a_loaded_module_older_than_the_package_warns():
    found = fc.host_findings(neuron_host(driver_loaded="2.26.10.0"))
    assert any("the loaded neuron module is 2.26.10.0" in f.line and f.verdict == "warn" for f in found)


def test_inf1_runs_the_runtime_of_its_framework():
    g = neuron_host(host="inf1-a", neuron_arch="inf1", driver_package="2.24.13.0", driver_loaded=None,
                    planned_driver="2.24.*", runtime=None,
                    frameworks=hc.parse_frameworks_label(hc.frameworks_label(rules.FRAMEWORK_PINS["inf1"])))
    found = fc.host_findings(g, {"resnet": [art("1.24.0.0", "1.0")], "bert": [art("2.27.5334.0")]})
    v = verdicts(found)
    assert v[("host inf1-a", rules.DRIVER_RUNTIME)] == "ok"
    assert v[("host inf1-a", rules.KERNEL_DRIVER)] == "warn"  # 2.24's tested kernels were never published
    assert v[("image", rules.FRAMEWORK_RUNTIME)] == "warn"  # wildcard pins: no version to judge
    assert v[("model resnet", rules.RUNTIME_MODEL)] == "ok"
    assert v[("model bert", rules.RUNTIME_MODEL)] == "fail"  # a neuronx-cc model on inf1
    too_new = fc.host_findings({**g, "driver_package": "2.30.2.0"})
    assert verdicts(too_new)[("host inf1-a", rules.DRIVER_RUNTIME)] == "fail"


def test_models_the_host_loads_and_what_their_artifacts_say():
    repo = {"bert": [art("2.27.5334.0")], "cpu": [], "unknown": [
        ArtifactInfo("1/model.pt", "unknown", None, None, None, "a zip archive without Neuron members", "unknown")]}
    found = fc.host_findings(neuron_host(loads=["bert", "cpu", "unknown", "gone"]), repo)
    v = verdicts(found)
    assert [v[(f"model {m}", rules.RUNTIME_MODEL)] for m in ("bert", "cpu", "unknown", "gone")] == \
        ["ok", "ok", "warn", "warn"]
    only = fc.host_findings(neuron_host(loads=["bert"]), repo)
    assert [f.subject for f in only if f.link == rules.RUNTIME_MODEL] == ["model bert"]


@pytest.mark.parametrize(("driver", "image", "verdict"), [
    ("560.35.03", "nvcr.io/nvidia/tritonserver:24.10-py3", "ok"),
    ("535.183.01", "nvcr.io/nvidia/tritonserver:24.10-py3", "ok"),  # CUDA forward compatibility
    ("530.30.02", "nvcr.io/nvidia/tritonserver:24.10-py3", "fail"),
    ("560.35.03", "registry.example.com/triton:latest", "warn"),
    (None, "nvcr.io/nvidia/tritonserver:24.10-py3", "warn"),
])
def test_gpu_hosts_judge_the_driver_against_the_image(driver, image, verdict):
    g = {"host": "g5-a", "instance_type": "g5.xlarge", "accelerator": "gpu", "neuron_arch": None, "unreachable": None,
         "loads": None, "image": image, "image_present": True, "image_from": "on the host", "runtime": None,
         "frameworks": None, "nvidia_driver": driver, "nvidia_error": None if driver else "nvidia-smi not found"}
    found = fc.host_findings(g, {"bert": [art("2.27.5334.0")]})
    assert verdicts(found)[("host g5-a", rules.GPU_DRIVER_IMAGE)] == verdict
    assert not any(f.link == rules.RUNTIME_MODEL for f in found)  # NEFFs are no concern of a GPU


def test_an_unreachable_host_is_one_failed_row():
    (f,) = fc.host_findings(neuron_host(unreachable="ssh: timed out"))
    assert (f.link, f.verdict, f.line) == (fc.SSH, "fail", "not reachable: ssh: timed out")


# -- the probe and the data -------------------------------------------------------------------------------------

def cfg(itype: str = "inf2.xlarge", **data: Any):
    return load_host_config("h", {**COMMON, "instance_type": itype, **data}, all_roles())


def probe_text(os_line: str = "ubuntu 22.04", neuron: list[str] | None = None, nvidia: list[str] | None = None,
               images: dict[str, dict | None] | None = None, pip: dict[str, list] | None = None) -> str:
    out = ["%%os", os_line]
    if neuron is not None:
        out += ["%%neuron", *neuron]
    if nvidia is not None:
        out += ["%%nvidia", *nvidia]
    for image, labels in (images or {}).items():
        out += [f"%%image {image}", "", "(absent)" if labels is None else json.dumps(labels)]
    for image, listed in (pip or {}).items():
        out += [f"%%pip {image}", json.dumps(listed)]
    return "\n".join(out) + "\n"


def neuron_lines(driver: str | None = "2.30.2.0", kernel: str = KERNEL, built_for: str | None = None) -> list[str]:
    built = [f"aws-neuronx/{driver}, {built_for or kernel}, x86_64: installed"] if driver else []
    loaded = [driver] if driver and built_for in (None, kernel) else []  # a module not built is not loaded
    return ["@devices", "neuron0", "@pkg", *([driver] if driver else []), "@module", *(["yes"] if loaded else []),
            "@loaded", *loaded, "@headers", "yes", "@kernel", kernel, "@dkms", "(dkms)", *built, "@modfile",
            "@neuronls"]


def test_the_image_is_the_one_the_triton_role_builds_on_the_hosts_platform():
    c = cfg()
    apt = imagespec.image_ref(c, imagespec.keyring_file_name("neuron", "apt"))
    dnf = imagespec.image_ref(c, imagespec.keyring_file_name("neuron", "dnf"))
    assert apt != dnf and apt.startswith("tritonfleet/tritonserver-neuron:")
    labels = {hc.LABEL_IMAGE_RUNTIME: "2.34.10.0", hc.LABEL_IMAGE_FRAMEWORKS: hc.frameworks_label(
        rules.FRAMEWORK_PINS["neuronx"])}
    ubuntu = fc.gathered("h", c, fc.parse_probe(probe_text(neuron=neuron_lines(), images={apt: labels, dnf: None})))
    assert (ubuntu["image"], ubuntu["image_present"], ubuntu["runtime"]) == (apt, True, "2.34.10.0")
    assert ubuntu["frameworks"] == NEURONX and ubuntu["dkms_built"] is True and ubuntu["planned_driver"] == "2.30.2.0*"
    al = fc.gathered("h", c, fc.parse_probe(probe_text("amzn 2023", neuron_lines(), images={apt: None, dnf: None})))
    assert (al["image"], al["image_present"]) == (dnf, False)
    assert al["runtime"] == "2.34.10.0" and al["frameworks"] == NEURONX  # from the Dockerfile it will build
    assert "the deploy builds it" in al["image_from"]
    assert fc.host_findings(al)[0].verdict == "ok"


def test_without_a_framework_label_the_versions_come_from_pip_list_in_the_image():
    image = "registry.example.com/triton-neuron:1"
    c = cfg(triton_image_source="pull", triton_image=image)
    listed = [{"name": "torch_neuronx", "version": "2.9.0.2.15.32035"}, {"name": "numpy", "version": "1.26.4"}]
    g = fc.gathered("h", c, fc.parse_probe(probe_text(neuron=neuron_lines(), images={image: {}},
                                                      pip={image: listed})))
    assert g["frameworks"] == {"torch-neuronx": "2.9.0.2.15.32035"} and "pip list" in g["image_from"]
    assert g["runtime"] == "2.34.10.0" and "runtime from host data" in g["image_from"]
    absent = fc.gathered("h", c, fc.parse_probe(probe_text(neuron=neuron_lines(), images={image: None})))
    assert absent["frameworks"] is None and verdicts(fc.host_findings(absent))[("image", fc.IMAGE)] == "warn"


def test_the_probe_command_reads_the_neuron_stack_and_each_images_labels():
    command = fc.probe_command(["a/b:1", "a/b:2"], neuron=True, gpu=False)
    assert "echo '@kernel'" in command and "dkms status" in command and "nvidia-smi" not in command
    assert command.count("docker image inspect --format '{{json .Config.Labels}}'") == 2
    assert f'index .Config.Labels "{hc.LABEL_IMAGE_FRAMEWORKS}"' in command and "--network none" in command
    gpu = fc.probe_command(["nvcr.io/nvidia/tritonserver:24.10-py3"], neuron=False, gpu=True)
    assert "nvidia-smi --query-gpu=name,memory.total,driver_version" in gpu and "docker run" not in gpu
    assert ".Config.Cmd" not in command and ".Args" not in command  # never a container's command line


def test_the_probe_command_is_valid_shell_here():
    """Run where no Docker and no Neuron stack are: every part answers, images read as absent."""
    import subprocess

    out = subprocess.run(["sh", "-c", fc.probe_command(["a/b:1"], neuron=True, gpu=True)], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    parsed = fc.parse_probe(out.stdout)
    assert parsed["images"] == {"a/b:1": None} and parsed["neuron"]["kernel"]
    assert parsed["nvidia"]["driver"] is None


def test_the_framework_label_round_trips():
    pins = ["torch-neuron==1.13.1.*", "neuron-cc[tensorflow]==1.*", "Torch_Neuronx==2.9.0.2.15.32035"]
    assert hc.parse_frameworks_label(hc.frameworks_label(pins)) == {
        "torch-neuron": "1.13.1.*", "neuron-cc": "1.*", "torch-neuronx": "2.9.0.2.15.32035"}
    assert hc.parse_frameworks_label(None) == {} and hc.parse_frameworks_label("junk,x==") == {}


def test_the_built_image_carries_the_framework_label():
    text = imagespec.dockerfile(cfg())
    assert f'{hc.LABEL_IMAGE_FRAMEWORKS}="torch-neuronx==2.9.0.2.15.32035,neuronx-cc==2.27.5334.0"' in text
    odd = imagespec.dockerfile(cfg(triton_neuron_frameworks=['x==1; python_version>"3" and $HOME']))
    assert f'{hc.LABEL_IMAGE_FRAMEWORKS}="x==1; python_version>\\"3\\" and \\$HOME"' in odd


# -- model repositories -----------------------------------------------------------------------------------------

def _with_weights_after_the_model(archive: bytes, big: int) -> bytes:
    """A TorchScript zip with ``big`` bytes of stored weights between data.pkl (first) and the rest, so that
    neither the archive's start nor its end holds everything the reader looks at."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(archive)) as src:
        members = [(i, src.read(i)) for i in src.infolist()]
    first = [m for m in members if m[0].filename.endswith("/data.pkl")]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info, data in first + [(zipfile.ZipInfo("model/extra/weights.bin"), b"\x07" * big)] + \
                [m for m in members if m not in first]:
            dst.writestr(info, data)
    return out.getvalue()


def make_repo(root: Path, big: int = 0) -> Path:
    neffgen.write_neff(root / "bert" / "1" / "model.neff", "2.16.345.0")
    (root / "resnet" / "1").mkdir(parents=True)
    (root / "resnet" / "1" / "model.pt").write_bytes(_with_weights_after_the_model(
        neffgen.torchscript_neuronx_bytes("2.27.5334.0"), big))
    (root / "resnet" / "config.pbtxt").write_text('name: "resnet"\n')
    (root / "addsub" / "1").mkdir(parents=True)
    (root / "addsub" / "1" / "model.py").write_text("print()\n")
    return root


def test_a_local_repository_is_scanned_per_model(tmp_path):
    repo = fc.scan_repository(str(make_repo(tmp_path / "repo")))
    assert sorted(repo) == ["addsub", "bert", "resnet"] and repo["addsub"] == []
    assert artifacts.summarize(repo["bert"]).compiler_version == "2.16.345.0"
    with pytest.raises(fc.CompatError, match="no such model repository directory"):
        fc.scan_repository(str(tmp_path / "missing"))


@pytest.fixture
def s3_env(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    from moto import mock_aws

    with mock_aws():
        yield


def test_an_s3_repository_reads_what_the_local_one_does_with_a_few_range_gets(tmp_path, s3_env, monkeypatch):
    """A 40 MiB torch-neuronx archive (its weights stored before the code and the end of the zip) and a NEFF:
    only their starts, the zip's end and its members' starts are fetched, and the reader finds the same
    versions as in the local copy."""
    import boto3

    local = make_repo(tmp_path / "repo", big=40 * (1 << 20))
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="models")
    for f in local.rglob("*"):
        if f.is_file():
            s3.put_object(Bucket="models", Key=f"fleet/{f.relative_to(local)}", Body=f.read_bytes())
    fetched: list[tuple[str, int, int]] = []
    real_get = fc._get

    def counting(client, bucket, key, path, start, end):
        fetched.append((key, start, end))
        return real_get(client, bucket, key, path, start, end)

    monkeypatch.setattr(fc, "_get", counting)
    from_s3 = fc.scan_repository("s3://models/fleet/", region="us-east-1")
    by_local = fc.scan_repository(str(local))
    assert sorted(from_s3) == sorted(by_local) == ["addsub", "bert", "resnet"]
    assert artifacts.summarize(by_local["resnet"]).compiler_version == "2.27.5334.0"
    for name in by_local:
        mine, theirs = artifacts.summarize(from_s3[name]), artifacts.summarize(by_local[name])
        assert (mine and (mine.compiler_version, mine.neff_version, mine.kind)) == \
            (theirs and (theirs.compiler_version, theirs.neff_version, theirs.kind)), (from_s3[name], by_local[name])
    per_key: dict[str, int] = {}
    for key, start, end in fetched:
        per_key[key] = per_key.get(key, 0) + end - start + 1
    assert set(per_key) == {"fleet/bert/1/model.neff", "fleet/resnet/1/model.pt"}  # artifacts only
    assert per_key["fleet/resnet/1/model.pt"] < 20 * (1 << 20)  # a few MiB of the 40
    with pytest.raises(fc.CompatError, match="no objects under this prefix"):
        fc.scan_repository("s3://models/nothing/", region="us-east-1")


# -- the command ------------------------------------------------------------------------------------------------

class FakeSession:
    """An SSH session that answers the probe with a host's canned output."""

    def __init__(self, name: str, output: str) -> None:
        self.name, self.output, self.commands = name, output, []

    def run(self, command: str, **kwargs: Any) -> tuple[int, str, str]:
        self.commands.append((command, kwargs))
        return 0, self.output, ""

    def close(self) -> None:
        pass


def _inventory(tmp_path: Path, hosts: list[tuple[str, dict]]) -> str:
    inv = tmp_path / "prod.py"
    inv.write_text(f"hosts = ({hosts!r}, {COMMON!r})\n")
    return str(inv)


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """inf2-a (healthy), inf2-b (rebooted into a kernel DKMS did not build for), g5-a, a balancer, down-1."""
    from tritonfleet.access import ssh

    c = cfg()
    apt = imagespec.image_ref(c, imagespec.keyring_file_name("neuron", "apt"))
    labels = {hc.LABEL_IMAGE_RUNTIME: "2.34.10.0",
              hc.LABEL_IMAGE_FRAMEWORKS: hc.frameworks_label(rules.FRAMEWORK_PINS["neuronx"])}
    outputs = {
        "inf2-a": probe_text(neuron=neuron_lines(), images={apt: labels}),
        "inf2-b": probe_text(neuron=neuron_lines(kernel="6.18.0-1004-aws", built_for=KERNEL), images={apt: labels}),
        "g5-a": probe_text(nvidia=["NVIDIA A10G, 23028 MiB, 560.35.03"],
                           images={"nvcr.io/nvidia/tritonserver:24.10-py3": {}}),
    }
    sessions: dict[str, FakeSession] = {}

    def connect(name, data, timeout=10):
        if name not in outputs:
            raise ssh.HostUnreachable("ssh: [Errno 111] Connection refused")
        sessions[name] = FakeSession(name, outputs[name])
        return sessions[name]

    monkeypatch.setattr(ssh, "connect", connect)
    hosts = [("inf2-a", {"instance_type": "inf2.xlarge"}), ("inf2-b", {"instance_type": "inf2.xlarge"}),
             ("g5-a", {"instance_type": "g5.xlarge"}), ("lb-1", {"instance_type": "c6i.large"})]
    return _inventory(tmp_path, hosts), sessions, outputs


def run(*args: str):
    return CliRunner().invoke(main, ["compat", *args])


def test_the_matrix_names_every_link_its_verdict_and_fix(fleet, tmp_path):
    inv, sessions, _ = fleet
    result = run("--inventory", inv, "--models", str(make_repo(tmp_path / "repo")))
    assert result.exit_code == 1, result.output  # inf2-b fails; bert needs a runtime the image has (2.34 >= 2.23)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.output.splitlines()
            if line.startswith("│")]
    assert ["inf2-b", "host", "kernel→driver", "fail", "aws-neuronx-dkms 2.30.2.0 is not built for kernel "
            "6.18.0-1004-aws: install the kernel headers (linux-headers-$(uname -r)) and reinstall"] in rows
    assert [r[:4] for r in rows if r[0] == "g5-a"] == [["g5-a", "image", "image", "ok"],
                                                      ["g5-a", "host", "gpu driver→image", "ok"]]
    assert ["inf2-a", "model bert", "runtime→model", "ok"] in [r[:4] for r in rows]
    assert "lb-1" not in result.output and sorted(sessions) == ["g5-a", "inf2-a", "inf2-b"]
    assert result.output.strip().splitlines()[-1] == "3 host(s), 3 model(s): 15 ok, 0 warn, 1 fail"
    command, kwargs = sessions["inf2-a"].commands[0]
    assert kwargs["root"] is True and "dkms status" in command  # docker needs root; one command per host


def test_json_and_a_clean_fleet_exits_zero(fleet):
    inv, _, outputs = fleet
    outputs["inf2-b"] = outputs["inf2-a"]
    result = run("--inventory", inv, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["summary"] == {"hosts": 3, "models": 0, "ok": 10, "warn": 0, "fail": 0}
    assert {r["host"] for r in data["findings"]} == {"inf2-a", "inf2-b", "g5-a"}
    assert set(data["findings"][0]) == {"host", "subject", "link", "verdict", "line", "fix"}


def test_an_unreachable_host_is_a_failed_row_and_one_line_naming_it(fleet, tmp_path):
    inv = _inventory(tmp_path, [("inf2-a", {"instance_type": "inf2.xlarge"}),
                                ("down-1", {"instance_type": "inf2.xlarge"})])
    result = run("--inventory", inv, "--json")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.splitlines() == ["Error: down-1: not reachable: ssh: [Errno 111] Connection refused"]
    rows = [r for r in json.loads(result.stdout)["findings"] if r["host"] == "down-1"]
    assert [(r["link"], r["verdict"]) for r in rows] == [("ssh", "fail")]


@pytest.mark.parametrize(("hosts", "args", "expected"), [
    ([("h", {"instance_type": "nope.large"})], [], "h: instance_type 'nope.large': unknown"),
    ([("h", {"instance_type": "inf2.xlarge", "docker_ulimit_stack": 0})], [],
     "h: docker_ulimit_stack 0: expected -1 (unlimited) or a positive limit"),
    ([("h", {"instance_type": "inf2.xlarge"})], ["--models", "/nonexistent/repo"],
     "/nonexistent/repo: no such model repository directory"),
    ([("h", {"instance_type": "c6i.large"})], [], "no host with an accelerator"),
])
def test_bad_input_is_one_line(tmp_path, hosts, args, expected):
    result = run("--inventory", _inventory(tmp_path, hosts), *args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: ") and expected in line


def test_no_such_inventory_is_one_line(tmp_path):
    result = run("--inventory", str(tmp_path / "missing.py"))
    assert result.exit_code == 1 and "cannot read inventory" in result.output
