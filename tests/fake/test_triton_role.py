"""The Triton role's image and container specs (pure rendering + an @fake run of the build path)."""

from __future__ import annotations

from roles.triton import dockerfile, image_ref, run_args, server_command, triton
from tests.fake.fakehost import run_deploys
from tests.hostconfigs import host_config

FPR = "B" * 40
BASE = {"neuron_key_fingerprint": FPR, "triton_repository_secret": "t" * 24}


def cfg(itype, **data):
    return host_config({**BASE, "instance_type": itype, **data})


def test_dockerfile_pins_runtime_and_frameworks_per_family():
    inf2 = dockerfile(cfg("inf2.xlarge"))
    assert "FROM nvcr.io/nvidia/tritonserver:24.10-py3" in inf2
    assert "aws-neuronx-runtime-lib=2.34.10.0*" in inf2 and "aws-neuronx-collectives=2.34.10.0*" in inf2
    assert "'torch-neuronx==2.9.0.2.15.32035'" in inf2 and "'neuronx-cc==2.27.5334.0'" in inf2 and "--extra-index-url https://pip.repos" in inf2
    assert 'com.tritonfleet.neuron.runtime-lib="2.34.10.0"' in inf2
    inf1 = dockerfile(cfg("inf1.6xlarge"))
    assert "aws-neuronx-runtime-lib" not in inf1.split("LABEL")[0]  # inf1 runtime ships in torch-neuron
    assert "'torch-neuron==1.13.1.*'" in inf1 and "neuron-cc" in inf1


def test_image_tag_is_a_content_hash():
    a, b = image_ref(cfg("inf2.xlarge")), image_ref(cfg("inf2.8xlarge"))
    assert a == b and a.startswith("tritonfleet/tritonserver-neuron:")  # same Dockerfile, same tag
    assert image_ref(cfg("inf2.xlarge", triton_neuron_frameworks=["torch-neuronx==2.9.0.2.15.31000"])) != a
    assert image_ref(cfg("g5.xlarge", nvidia_key_fingerprint=FPR)) == "nvcr.io/nvidia/tritonserver:24.10-py3"


def test_container_args_are_exactly_the_placement():
    c = cfg("inf2.48xlarge", triton_servers=[{}, {}, {}])
    args = run_args(c, c.triton.placements[2])
    devices = [args[i + 1] for i, a in enumerate(args) if a == "--device"]
    assert devices == [f"/dev/neuron{i}" for i in range(8, 12)]
    assert "NEURON_RT_VISIBLE_CORES=16-23" in args and "--privileged" not in args
    assert "0.0.0.0:8020:8000" in args and "--network" not in args
    cmd = server_command(c, c.triton.placements[2])
    assert "--load-model=*" in cmd and "--model-control-mode=explicit" in cmd
    g = cfg("g5.12xlarge", nvidia_key_fingerprint=FPR, triton_servers=[{"gpus": [0, 1]}])
    gargs = run_args(g, g.triton.placements[0])
    assert gargs[gargs.index("--gpus") + 1] == '"device=0,1"' and "--device" not in gargs


def test_build_path_uploads_dockerfile_and_builds_only_missing_image(monkeypatch):
    data = {**BASE, "instance_type": "inf2.xlarge"}
    rec = run_deploys(triton, data, "ubuntu2204", monkeypatch)
    tag = image_ref(cfg("inf2.xlarge"))
    dockerfiles = [p for p in rec.uploads if p.endswith("/Dockerfile")]
    assert len(dockerfiles) == 1 and rec.uploads[dockerfiles[0]] == dockerfile(cfg("inf2.xlarge"))
    builds = [c for c in rec.commands if "docker build" in c]
    assert len(builds) == 1 and tag in builds[0]
    assert any("cp /etc/apt/keyrings/neuron.gpg" in c for c in rec.commands)
    runs = [c for c in rec.commands if "triton-swap.sh" in c]
    assert len(runs) == 1 and "--device /dev/neuron0" in runs[0]


def test_ecr_pull_uses_the_credential_helper(monkeypatch):
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/triton-neuron:2.51"
    data = {**BASE, "instance_type": "inf2.xlarge", "triton_image_source": "pull", "triton_image": image}
    rec = run_deploys(triton, data, "ubuntu2404", monkeypatch)
    assert any("amazon-ecr-credential-helper" in c and "install" in c for c in rec.commands)
    config = rec.uploads["/root/.docker/config.json"]
    assert '"123456789012.dkr.ecr.us-west-2.amazonaws.com": "ecr-login"' in config
    assert any(c.startswith("docker pull") and image in c for c in rec.commands)
    # other registries: no helper, no config
    rec = run_deploys(triton, {**data, "triton_image": "nvcr.io/nvidia/tritonserver:24.10-py3"}, "ubuntu2404",
                   monkeypatch)
    assert "/root/.docker/config.json" not in rec.uploads


def test_build_path_on_al2023_uses_the_armored_rpm_key(monkeypatch):
    rec = run_deploys(triton, {**BASE, "instance_type": "trn1.2xlarge"}, "al2023", monkeypatch)
    assert any("cp /etc/pki/rpm-gpg/RPM-GPG-KEY-neuron" in c and "neuron-archive-keyring.asc" in c
               for c in rec.commands)
    (dockerfile_text,) = [v for k, v in rec.uploads.items() if k.endswith("/Dockerfile")]
    assert "COPY neuron-archive-keyring.asc /etc/apt/keyrings/neuron-archive-keyring.asc" in dockerfile_text
    assert "signed-by=/etc/apt/keyrings/neuron-archive-keyring.asc" in dockerfile_text


def test_container_ulimits_come_from_the_documented_keys():
    c = cfg("inf2.xlarge", docker_ulimit_memlock=1048576, docker_ulimit_stack=8388608)
    args = run_args(c, c.triton.placements[0])
    ulimits = [args[i + 1] for i, a in enumerate(args) if a == "--ulimit"]
    assert ulimits == ["memlock=1048576", "stack=8388608"]
    default = cfg("inf2.xlarge")
    args = run_args(default, default.triton.placements[0])
    assert [args[i + 1] for i, a in enumerate(args) if a == "--ulimit"] == ["memlock=-1", "stack=67108864"]


def test_one_image_tag_is_one_set_of_frameworks():
    """The tag is a hash of the Dockerfile, so every framework in it is pinned to one version."""
    for itype in ("inf1.6xlarge", "inf2.xlarge", "trn1.2xlarge"):
        text = dockerfile(cfg(itype))
        pip_line = next(line for line in text.splitlines() if "pip install" in line)
        packages = [w.strip("'") for w in pip_line.split() if w.startswith("'")]
        assert packages and all("==" in p for p in packages), pip_line
    import pytest

    from tritonfleet.config import ConfigError

    with pytest.raises(ConfigError, match=r"triton_neuron_frameworks .*is not pinned"):
        cfg("inf2.xlarge", triton_neuron_frameworks=["torch-neuronx"])
