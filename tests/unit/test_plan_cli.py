"""`tritonfleet plan` from the outside: a table per host and server from an inventory file and a model repository
on disk, the one-line error when a server's models do not fit, and `--pack` proposing triton_servers that the
placement accepts; bad input is one line and exit code 1."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from tritonfleet import catalog
from tritonfleet.face.cli import main
from tritonfleet.face.plan import server_models
from tritonfleet.footprint import MIB
from tritonfleet.placement import ServerSpec, place

FPR = "A" * 40
COMMON = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}
DECLARE = 'parameters {{ key: "tritonfleet_memory_mib" value: {{ string_value: "{mib}" }} }}\n'


def _inventory(tmp_path: Path, hosts: list[tuple[str, dict]], name: str = "prod") -> str:
    inv = tmp_path / f"{name}.py"
    inv.write_text(f"hosts = ({hosts!r}, {COMMON!r})\n")
    return str(inv)


def _model(repo: Path, name: str, config: str = "", files: dict[str, int] | None = None) -> Path:
    d = repo / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    for rel, size in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(b"\0" * size)
    return d


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    _model(r, "bert", 'backend: "python"\ninstance_group [ { kind: KIND_MODEL count: 2 } ]\n' + DECLARE.format(mib=12288),
           {"1/model.py": 100})
    _model(r, "resnet", 'platform: "pytorch_libtorch"\n', {"1/model.pt": 4 * MIB, "2/model.pt": 8 * MIB})
    _model(r, "add_sub", 'backend: "python"\n', {"1/model.py": 100})
    return r


def run(*args: str):
    return CliRunner().invoke(main, ["plan", *args])


def _one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


# -- the inventory's servers ----------------------------------------------------------------------------------

def test_a_row_per_host_and_server_with_capacity_models_and_free(tmp_path, repo):
    inv = _inventory(tmp_path, [
        ("inf2-a", {"instance_type": "inf2.24xlarge", "triton_models": ["bert", "resnet"],
                    "triton_servers": [{"name": "left", "devices": [0]}, {"name": "right", "devices": [1, 2]}]}),
        ("g5-a", {"instance_type": "g5.12xlarge", "triton_servers": [{"gpus": [0, 1]}]}),
        ("lb-a", {"instance_type": "m5.large"}),  # no accelerator: no server to plan
    ])
    result = run("--inventory", inv, "--models", str(repo))
    assert result.exit_code == 0, result.output
    out = result.output
    # left: 1 device, 29491 MiB usable; bert 2 x 12288 + resnet (8 MiB, version 2) x 1.25 = 10 MiB
    assert re.search(r"inf2-a\s.*left\s.*\b0\s.*0-1\s.*29491 \(32768 - 10%\).*bert 2 x 12288 MiB \(declared\)"
                     r".*\b24586\b.*\b4905\b", out)
    assert re.search(r"right\s.*1-2\s.*2-5\s.*58982 \(65536 - 10%\).*\b24586\b.*\b34396\b", out)
    assert "resnet 1 x 10 MiB (estimated)" in out
    # the GPU server loads every model (no triton_models): bert is KIND_MODEL (2 instances); resnet and add_sub
    # have no instance_group: one instance on each of its 2 GPUs, resnet 8 MiB each (GPU: the artifacts' size)
    assert re.search(r"g5-a\s.*triton\s.*gpu 0-1\s.*44236 \(49152 - 10%\).*bert 2 x 12288 MiB", out)
    assert "resnet 2 x 8 MiB (estimated)" in out and "add_sub 2 x 0 MiB (estimated)" in out
    assert "lb-a" not in out
    assert "x 1.25 (neuron)" in out and "x 1 (gpu)" in out  # the footprints' sources


def test_models_that_do_not_fit_are_an_error_line_and_exit_code_1(tmp_path, repo):
    (repo / "bert" / "config.pbtxt").write_text(
        'name: "bert"\ninstance_group [ { kind: KIND_MODEL count: 2 } ]\n' + DECLARE.format(mib=15360))
    inv = _inventory(tmp_path, [("inf2-1", {"instance_type": "inf2.xlarge", "triton_models": ["bert", "resnet"]})])
    result = run("--inventory", inv, "--models", str(repo))
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert ("Error: inf2-1: server triton: models need 30730 MiB (bert 2 x 15360 MiB, resnet 1 x 10 MiB) but its "
            "1 device(s) hold 32768 MiB less 10% headroom = 29491 MiB") in result.output
    assert "-1239" in result.output  # the free column
    # more headroom taken off, or less: the headroom option
    assert run("--inventory", inv, "--models", str(repo), "--headroom", "5").exit_code == 0


def test_the_hosts_models_source_is_the_default_repository(tmp_path, repo):
    inv = _inventory(tmp_path, [("inf2-1", {"instance_type": "inf2.xlarge", "models_source": str(repo),
                                            "triton_models": ["resnet"]})])
    result = run("--inventory", inv)
    assert result.exit_code == 0, result.output
    assert "resnet 1 x 10 MiB" in result.output and "bert" not in result.output


def test_models_option_stands_in_for_the_hosts_models_source(tmp_path, repo):
    inv = _inventory(tmp_path, [("inf2-1", {"instance_type": "inf2.xlarge", "models_source": str(tmp_path / "gone"),
                                            "triton_models": ["resnet"]})])
    assert "models_source" in _one_line_error(run("--inventory", inv))
    result = run("--inventory", inv, "--models", str(repo))
    assert result.exit_code == 0, result.output
    assert "resnet 1 x 10 MiB" in result.output


def test_an_s3_repository_is_planned_from_its_listing_and_configs(tmp_path, repo, monkeypatch):
    """The artifacts' sizes come from the S3 listing (sparse stand-ins, nothing downloaded but config.pbtxt), the
    declared footprints from the configs: the same plan as the local repository it was uploaded from (moto)."""
    import boto3
    from moto import mock_aws

    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="models")
        for f in repo.rglob("*"):
            if f.is_file():
                s3.put_object(Bucket="models", Key=f"fleet/{f.relative_to(repo)}", Body=f.read_bytes())
        inv = _inventory(tmp_path, [("inf2-1", {"instance_type": "inf2.xlarge", "triton_models": ["bert", "resnet"],
                                                "models_s3_uri": "s3://models/fleet", "models_s3_region": "us-east-1"})])
        from_s3 = run("--inventory", inv)
        given = run("--inventory", inv, "--models", "s3://models/fleet/")
        missing = run("--inventory", inv, "--models", "s3://models/nothing-here")
    local = run("--inventory", inv, "--models", str(repo))
    assert "resnet 1 x 10 MiB (estimated)" in local.output and "bert 2 x 12288 MiB" in local.output
    table = lambda r: [line for line in r.output.splitlines() if "MiB" in line]  # noqa: E731
    assert table(from_s3) == table(local) == table(given), from_s3.output
    assert from_s3.exit_code == local.exit_code
    assert _one_line_error(missing) == "Error: s3://models/nothing-here: no objects under this prefix"


@pytest.mark.parametrize(("hosts", "args", "expected"), [
    ([("h", {"instance_type": "inf2.xlarge"})], [], "h: no model repository: give --models DIR"),
    ([("h", {"instance_type": "inf2.xlarge"})], ["--models", "/nonexistent/repo"],
     "/nonexistent/repo: no such model repository directory"),
    ([("h", {"instance_type": "inf2.xlarge", "triton_models": ["bert", "gpt"]})], ["--models", "REPO"],
     "h: server triton: model(s) gpt not in the repository"),
    ([("h", {"instance_type": "inf2.xlarge", "triton_servers": [{"devices": [0, 1]}]})], ["--models", "REPO"],
     "h: triton_servers[0].devices [0, 1]: device 1 not on inf2.xlarge"),
    ([("h", {"instance_type": "nope.large"})], ["--models", "REPO"], "h: instance_type 'nope.large': unknown"),
])
def test_bad_input_is_one_line(tmp_path, repo, hosts, args, expected):
    args = [str(repo) if a == "REPO" else a for a in args]
    line = _one_line_error(run("--inventory", _inventory(tmp_path, hosts), *args))
    assert expected in line


def test_no_such_inventory_is_one_line(tmp_path):
    line = _one_line_error(run("--inventory", str(tmp_path / "missing.py")))
    assert "cannot read inventory" in line


def test_which_models_a_server_loads():
    cfg = SimpleNamespace(triton=SimpleNamespace(servers=[SimpleNamespace(models=["a"]), SimpleNamespace()],
                                                 models=["h1", "h2"]))
    # placements that do not resolve models (before per-server models): the server entry's, else the host's
    assert server_models(cfg, SimpleNamespace(index=0)) == ["a"]
    assert server_models(cfg, SimpleNamespace(index=1)) == ["h1", "h2"]
    assert server_models(cfg, SimpleNamespace(index=2)) == ["h1", "h2"]
    assert server_models(SimpleNamespace(triton=SimpleNamespace(servers=[], models=[])),
                         SimpleNamespace(index=0)) is None  # every model of the repository
    # placements that resolve them: taken as they are (None: every model; (): none)
    assert server_models(cfg, SimpleNamespace(index=0, models=("x",))) == ["x"]
    assert server_models(cfg, SimpleNamespace(index=0, models=None)) is None
    assert server_models(cfg, SimpleNamespace(index=0, models=())) == []


# -- packing --------------------------------------------------------------------------------------------------

PACK_HOSTS = [
    ("inf2-b", {"instance_type": "inf2.24xlarge"}),
    ("trn-a", {"instance_type": "trn1.2xlarge"}),
    ("g5-a", {"instance_type": "g5.12xlarge"}),
    ("lb-a", {"instance_type": "m5.large"}),
]


def _proposal(output: str) -> dict[str, list[dict]]:
    """The printed ``"triton_servers": [...]`` literal of each host, evaluated as Python."""
    out: dict[str, list[dict]] = {}
    for match in re.finditer(r'^# (\S+) \(\S+\)\n"triton_servers": (\[\n.*?\n\]),$', output, re.M | re.S):
        out[match.group(1)] = ast.literal_eval(match.group(2))
    return out


def test_pack_proposes_triton_servers_that_placement_accepts(tmp_path, repo):
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump({"models": [
        {"name": "bert", "footprint_mib": 20000, "replicas": 3, "neuron_arch": "inf2"},
        {"name": "llama", "footprint_mib": 25000, "neuron_arch": "trn1"},
        {"name": "vit", "footprint_mib": 15000, "replicas": 2, "gpu_only": True},
        {"path": "repo/resnet", "neuron_arch": "inf2", "replicas": 2},
    ]}))
    result = run("--inventory", _inventory(tmp_path, PACK_HOSTS), "--pack", str(models))
    assert result.exit_code == 0, result.output
    proposal = _proposal(result.output)
    # llama 25000 first (inf2-b device 0), bert 20000 x 3 (devices 1, 2, 3), resnet 10 x 2 (devices 0, 1)
    assert proposal == {
        "inf2-b": [{"devices": [0], "models": ["llama", "resnet"]}, {"devices": [1], "models": ["bert", "resnet"]},
                   {"devices": [2], "models": ["bert"]}, {"devices": [3], "models": ["bert"]}],
        "g5-a": [{"gpus": [0], "models": ["vit"]}, {"gpus": [1], "models": ["vit"]}],
    }
    for host, itype in (("inf2-b", "inf2.24xlarge"), ("g5-a", "g5.12xlarge")):
        specs = [ServerSpec(**{k: v for k, v in e.items() if k in ServerSpec.model_fields}) for e in proposal[host]]
        assert len(place(catalog.get(itype), specs)) == len(specs)
    assert "# trn-a (trn1.2xlarge): nothing placed" in result.output
    assert re.search(r"inf2-b\s.*\b0\s.*inf2\s.*29491\s.*25010\s.*4481\s.*84\.8%\s.*llama \(25000\), resnet \(10\)",
                     result.output)
    assert "unplaced" not in result.output


def test_pack_lists_unplaced_replicas_with_their_reason_and_exits_1(tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump([
        {"name": "huge", "footprint_mib": 90000},
        {"name": "old", "footprint_mib": 1000, "neuron_arch": "inf1"},
        {"name": "small", "footprint_mib": 10, "replicas": 2},
    ]))
    result = run("--inventory", _inventory(tmp_path, [("trn-a", {"instance_type": "trn1.2xlarge"})]),
                 "--pack", str(models))
    assert result.exit_code == 1
    out = " ".join(result.output.split())  # the table wraps long reasons
    assert "too big for any device: needs 90000 MiB, the largest compatible device holds 29491 MiB" in out
    assert "no compatible device (compiled for inf1, runs on inf1; the fleet has trn1)" in out
    assert "already holds a replica of small" in out
    assert "Error: 3 replica(s) unplaced" in result.output
    assert _proposal(result.output) == {"trn-a": [{"devices": [0], "models": ["small"]}]}


def test_pack_as_yaml(tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text("- {name: a, footprint_mib: 100, gpu_only: true}\n")
    hosts = [("g", {"instance_type": "g5.xlarge"}), ("i", {"instance_type": "inf2.xlarge"})]
    result = run("--inventory", _inventory(tmp_path, hosts), "--pack", str(models), "--format", "yaml")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    text = "\n".join(lines[1:next(i for i, line in enumerate(lines) if "utilisation per device" in line)])
    assert yaml.safe_load(text) == {"g": {"triton_servers": [{"gpus": [0], "models": ["a"]}]}}
    assert "# i (inf2.xlarge): nothing placed" in text


def test_pack_estimates_a_named_model_from_the_models_directory(tmp_path, repo):
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - name: resnet\n    gpu_only: true\n")
    result = run("--inventory", _inventory(tmp_path, [("g", {"instance_type": "g5.xlarge"})]), "--pack", str(models),
                 "--models", str(repo))
    assert result.exit_code == 0, result.output
    assert "resnet (8)" in result.output  # GPU: the artifacts' size


@pytest.mark.parametrize(("text", "expected"), [
    ("models: [{name: a, footprint_mib: 1, colour: red}]", "models[0].colour: Extra inputs are not permitted"),
    ("models: [{name: a, footprint_mib: -1}]", "models[0].footprint_mib: Input should be greater than or equal to 0"),
    ("models: [{name: a, footprint_mib: '12'}]", "models[0].footprint_mib: Input should be a valid integer"),
    ("models: [{name: a, footprint_mib: 1, replicas: 0}]", "models[0].replicas"),
    ("models: [{name: a, footprint_mib: 1, neuron_arch: inf3}]", "models[0].neuron_arch"),
    ("models: [{name: a, footprint_mib: 1, neuron_arch: inf2, gpu_only: true}]", "exclude each other"),
    ("models: [{name: a, footprint_mib: 1, path: x}]", "models[0]: give footprint_mib or path, not both"),
    ("models: [{name: a}]", "models[0]: give footprint_mib, or path (or a name and --models DIR)"),
    ("models: [{footprint_mib: 5}]", "models[0]: name: missing"),
    ("models: [{path: nowhere}]", "nowhere: no config.pbtxt (not a model directory)"),
    ("models: [{name: a, footprint_mib: 1}, {name: a, footprint_mib: 2}]", "model(s) a listed more than once"),
    ("models: []", "models: List should have at least 1 item"),
    ("models: [a, b", "not valid YAML"),
    ("42", "Input should be a valid dictionary"),
])
def test_pack_bad_models_file_is_one_line(tmp_path, text, expected):
    models = tmp_path / "models.yaml"
    models.write_text(text)
    line = _one_line_error(run("--inventory", _inventory(tmp_path, PACK_HOSTS), "--pack", str(models)))
    assert line.startswith(f"Error: {models}") and expected in line


@pytest.mark.parametrize(("hosts", "expected"), [
    ([("h", {})], "h: instance_type: missing"),
    ([("h", {"instance_type": "inf9.large"})], "h: instance_type 'inf9.large'"),
    ([("lb", {"instance_type": "m5.large"})], "no host with an accelerator"),
])
def test_pack_bad_inventory_is_one_line(tmp_path, hosts, expected):
    models = tmp_path / "models.yaml"
    models.write_text("- {name: a, footprint_mib: 1}\n")
    assert expected in _one_line_error(run("--inventory", _inventory(tmp_path, hosts), "--pack", str(models)))


def test_pack_no_such_models_file_is_one_line(tmp_path):
    line = _one_line_error(run("--inventory", _inventory(tmp_path, PACK_HOSTS), "--pack", str(tmp_path / "no.yaml")))
    assert "cannot read" in line
