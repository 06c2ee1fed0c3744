"""@fake runs of the monitoring role on every platform: which exporters a host gets, their config, and what
preflight refuses (AL2023 without a node exporter tarball)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pyinfra.api.exceptions import PyinfraError

from roles.monitoring import monitoring
from tests.fake.fakehost import PLATFORMS
from tests.fake.fakehost import run_deploys as _run_deploys
from tritonfleet import wheelhouse

FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
DATA = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}
TARBALL = {"monitoring_node_exporter_url": "https://example.com/node_exporter-1.8.2.linux-amd64.tar.gz",
           "monitoring_node_exporter_sha256": "a" * 64}
DROPIN = "/etc/systemd/system/prometheus-node-exporter.service.d/tritonfleet.conf"
NEURON_UNIT = "/etc/systemd/system/tritonfleet-neuron-monitor.service"


def run_deploys(deploys, data, os_key, monkeypatch, **kw):
    """Neuron hosts want the host agent (its Python runs the Neuron exporter): preflight asks for its Python
    and builds the wheelhouse, here a stand-in (the real build is tested in tests/unit/test_wheelhouse)."""
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), "d" * 64, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)
    return _run_deploys(deploys, data, os_key, monkeypatch, responses={"sys.version_info": ["3.11", "x86_64", "none"]},
                        **kw)


def _extra(os_key: str) -> dict:
    return TARBALL if os_key == "al2023" else {}


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_neuron_host_gets_node_exporter_and_neuron_monitor(monkeypatch, os_key):
    rec = run_deploys(monitoring, {**DATA, **_extra(os_key), "instance_type": "inf2.xlarge"}, os_key, monkeypatch)
    args = "--web.listen-address=0.0.0.0:9100 --collector.textfile.directory=/var/lib/prometheus/node-exporter"
    if os_key == "al2023":  # no package: the release tarball, checked, and a unit of ours
        unit = rec.uploads["/etc/systemd/system/prometheus-node-exporter.service"]
        assert f"ExecStart=/usr/local/bin/node_exporter {args}" in unit and "DynamicUser=yes" in unit
        assert any("a" * 64 in c for c in rec.commands), "the tarball's sha256 is checked"
        assert DROPIN not in rec.uploads
    else:
        assert "prometheus-node-exporter" in rec.text
        assert f"ExecStart=/usr/bin/prometheus-node-exporter {args}" in rec.uploads[DROPIN]
    unit = rec.uploads[NEURON_UNIT]
    assert ("{ /opt/aws/neuron/bin/neuron-monitor -c /etc/tritonfleet/neuron-monitor.json; kill $$; } | "
            "/opt/tritonfleet/venv/bin/python /opt/aws/neuron/bin/neuron-monitor-prometheus.py --port 9010") in unit
    config = json.loads(rec.uploads["/etc/tritonfleet/neuron-monitor.json"])
    assert config["period"] == "5s"
    assert [m["type"] for m in config["neuron_runtimes"][0]["metrics"]][0] == "neuroncore_counters"
    assert {m["type"] for m in config["system_metrics"]} == {"neuron_hw_counters", "vcpu_usage", "memory_info"}
    assert "systemctl daemon-reload" in rec.text
    # new settings: restarted, then running (the fake host's systemd knows neither unit: each is a start)
    assert rec.commands.count("systemctl start prometheus-node-exporter.service") == 2
    assert rec.commands.count("systemctl start tritonfleet-neuron-monitor.service") == 2
    assert "dcgm" not in rec.text


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_gpu_host_gets_the_dcgm_exporter_with_its_gpus(monkeypatch, os_key):
    rec = run_deploys(monitoring, {**DATA, **_extra(os_key), "instance_type": "g5.xlarge",
                                   "monitoring_bind_address": "10.0.0.5", "monitoring_dcgm_port": 9500},
                      os_key, monkeypatch)
    run = next(c for c in rec.commands if c.startswith("docker run") and "tritonfleet-dcgm-exporter" in c)
    assert "--gpus '\"device=0\"'" in run and "-p 10.0.0.5:9500:9400" in run and "--restart unless-stopped" in run
    assert "--privileged" not in run and "SYS_ADMIN" not in run
    assert "docker pull -q nvcr.io/nvidia/k8s/dcgm-exporter:" in rec.text
    assert NEURON_UNIT not in rec.uploads


def test_profiling_metrics_add_only_sys_admin(monkeypatch):
    rec = run_deploys(monitoring, {**DATA, "instance_type": "g5.xlarge", "monitoring_dcgm_profiling": True},
                      "debian12", monkeypatch)
    run = next(c for c in rec.commands if c.startswith("docker run"))
    assert "--cap-add SYS_ADMIN" in run and "--privileged" not in run


def test_switched_off_exporters_are_removed(monkeypatch):
    rec = run_deploys(monitoring, {**DATA, "instance_type": "inf2.xlarge", "monitoring_neuron_exporter": False,
                                   "monitoring_node_exporter": False}, "debian12", monkeypatch)
    assert NEURON_UNIT not in rec.uploads and DROPIN not in rec.uploads
    assert "prometheus-node-exporter" not in rec.text


def test_al2023_without_a_tarball_is_refused_by_preflight(monkeypatch):
    with pytest.raises(PyinfraError) as exc:
        run_deploys(monitoring, {**DATA, "instance_type": "inf2.xlarge"}, "al2023", monkeypatch)
    text = str(exc.value)
    assert "monitoring_node_exporter_url" in text and "Amazon Linux 2023 has no node exporter package" in text


def test_textfile_directory_is_shared_with_qa(monkeypatch):
    from roles.qa import qa_schedule

    rec = run_deploys([monitoring, qa_schedule], {**DATA, "instance_type": "trn1.2xlarge",
                                                  "monitoring_textfile_dir": "/srv/textfiles",
                                                  "qa_suites": "tritonfleet/sandbox/qa"}, "debian12", monkeypatch)
    assert "--collector.textfile.directory=/srv/textfiles" in rec.uploads[DROPIN]
    assert "/srv/textfiles/tritonfleet_qa.prom" in rec.uploads["/opt/tritonfleet/qa/qa-scheduled.sh"]


def test_neuron_exporter_without_a_python_for_it_is_refused_before_anything_runs(monkeypatch):
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), "d" * 64, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)
    with pytest.raises(PyinfraError) as exc:
        _run_deploys(monitoring, {**DATA, "instance_type": "inf2.xlarge"}, "debian12", monkeypatch,
                     responses={"sys.version_info": ["none", "x86_64", "none"]})
    text = str(exc.value)
    assert "@fake/h1: agent_python 'python3': the host agent needs Python 3.9 to 3.12" in text and "Traceback" not in text


@pytest.mark.parametrize("switch", [True, False])
def test_serve_includes_monitoring_only_behind_its_switch(monkeypatch, switch):
    from tests.fake.test_roles import SERVE_DEPLOY

    rec = run_deploys(SERVE_DEPLOY, {**DATA, "instance_type": "g5.xlarge", "monitoring_with_serve": switch},
                      "ubuntu2204", monkeypatch)
    assert (DROPIN in rec.uploads) is switch
    assert any(c.startswith("docker run") and "tritonfleet-dcgm-exporter" in c for c in rec.commands) is switch


# -- AL2023: the node exporter from the release tarball is restarted when its binary changes, and only then --------

TARBALL_PATH = "/opt/tritonfleet/node_exporter-1.8.2.linux-amd64.tar.gz"
NODE_UNIT_FILE = "/etc/systemd/system/prometheus-node-exporter.service"
RESTART = "systemctl restart prometheus-node-exporter.service"
GPU_ONLY_NODE = {**DATA, **TARBALL, "instance_type": "g5.xlarge", "monitoring_dcgm_exporter": False}


def _al2023(unit_text: str, tarballs: dict[str, str]) -> dict:
    """fake_responses of an AL2023 host whose node exporter runs from ``unit_text``, with the release tarballs
    ``{path: sha256}`` in /opt/tritonfleet."""
    responses = {"-p LoadState prometheus-node-exporter.service": [
        "Id=prometheus-node-exporter.service", "ActiveState=active", "UnitFileState=enabled", "LoadState=loaded"]}
    responses[f"for f in {NODE_UNIT_FILE}; do"] = [f"{hashlib.sha256(unit_text.encode()).hexdigest()} 644 {NODE_UNIT_FILE}"]
    for path, sha in tarballs.items():
        responses[f"test -e {path} && ( sha256sum"] = [f"{sha}  {path}"]
        responses[f"! (test -e {path} "] = [
            f"user=root group=root mode=-rw-r--r-- atime=1764000000 mtime=1764000000 ctime=1764000000 size=9 '{path}'"]
    return responses


@pytest.fixture(scope="module")
def node_unit():
    """The unit the role writes for GPU_ONLY_NODE (from a first run on a bare host)."""
    mp = pytest.MonkeyPatch()
    try:
        return _run_deploys(monitoring, GPU_ONLY_NODE, "al2023", mp).uploads[NODE_UNIT_FILE]
    finally:
        mp.undo()


def test_al2023_node_exporter_with_the_same_binary_and_unit_is_not_restarted(monkeypatch, node_unit):
    rec = _run_deploys(monitoring, GPU_ONLY_NODE, "al2023", monkeypatch,
                       responses=_al2023(node_unit, {TARBALL_PATH: "a" * 64}))
    assert not [c for c in rec.commands if "curl" in c and "node_exporter" in c]  # not fetched again
    assert not [c for c in rec.commands if c.startswith("tar -xzf")] and NODE_UNIT_FILE not in rec.uploads
    assert not [c for c in rec.commands if c.startswith(("systemctl restart", "systemctl start", "systemctl daemon"))]


@pytest.mark.parametrize("release", ["new version", "same name, other sha256"])
def test_al2023_node_exporter_is_restarted_when_its_binary_changes(monkeypatch, node_unit, release):
    data = dict(GPU_ONLY_NODE)
    if release == "new version":  # the host has the old tarball; the data names a new one
        data.update(monitoring_node_exporter_url="https://example.com/node_exporter-1.9.0.linux-amd64.tar.gz",
                    monitoring_node_exporter_sha256="b" * 64)
        tarballs = {TARBALL_PATH: "a" * 64}
    else:  # the same file name, but not the file the data names (replaced upstream, or corrupted)
        tarballs = {TARBALL_PATH: "c" * 64}
    rec = _run_deploys(monitoring, data, "al2023", monkeypatch, responses=_al2023(node_unit, tarballs))
    assert NODE_UNIT_FILE not in rec.uploads  # the unit is the same: only the binary changed
    tarball = TARBALL_PATH.replace("1.8.2", "1.9.0") if release == "new version" else TARBALL_PATH
    extract = f"tar -xzf {tarball} -C /usr/local/bin --strip-components=1 --wildcards '*/node_exporter'"
    assert extract in rec.commands
    assert rec.commands.count(RESTART) == 1 and rec.commands.index(RESTART) > rec.commands.index(extract)


def test_al2023_node_exporter_is_restarted_when_its_unit_changes(monkeypatch, node_unit):
    rec = _run_deploys(monitoring, {**GPU_ONLY_NODE, "monitoring_node_exporter_port": 9101}, "al2023", monkeypatch,
                       responses=_al2023(node_unit, {TARBALL_PATH: "a" * 64}))
    assert "--web.listen-address=0.0.0.0:9101" in rec.uploads[NODE_UNIT_FILE]
    assert not [c for c in rec.commands if c.startswith("tar -xzf")]
    assert rec.commands.count(RESTART) == 1
    assert rec.commands.index("systemctl daemon-reload") < rec.commands.index(RESTART)


# -- the DCGM exporter container: its spec label covers the image and every `docker run` argument ------------------

DCGM_RUN = "docker run -d --name tritonfleet-dcgm-exporter"


def _dcgm(monkeypatch, data: dict | None = None, run_args: list[str] | None = None) -> dict:
    """What the role asks of monitoring.exporter_container for the DCGM exporter on a g5.xlarge with ``data``
    (``run_args``: what dcgm_run_args returns instead of the role's own)."""
    from roles import all_roles
    from roles import monitoring as role
    from roles import operations as ops
    from tritonfleet.config import load_host_config

    cfg = load_host_config("h1", {**DATA, "instance_type": "g5.xlarge", **(data or {})}, all_roles())
    asked: dict = {}
    monkeypatch.setattr(ops.docker, "image", lambda **kwargs: None)
    monkeypatch.setattr(ops.monitoring, "exporter_container", lambda **kwargs: asked.update(kwargs))
    if run_args is not None:
        monkeypatch.setattr(role, "dcgm_run_args", lambda cfg: list(run_args))
    role._dcgm_exporter(cfg)
    return asked


@pytest.mark.parametrize("data", [
    {"monitoring_dcgm_image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.8-3.6.0-ubuntu22.04"},
    {"monitoring_dcgm_port": 9401},
    {"monitoring_bind_address": "10.0.0.5"},
    {"monitoring_bind_address": "::"},
    {"instance_type": "g5.12xlarge"},  # four GPUs
    {"monitoring_dcgm_profiling": True},
], ids=["image", "port", "bind address", "ipv6 wildcard", "gpus", "profiling"])
def test_every_dcgm_setting_changes_the_spec(monkeypatch, data):
    base, again, changed = _dcgm(monkeypatch), _dcgm(monkeypatch), _dcgm(monkeypatch, data)
    assert base["spec_hash"] == again["spec_hash"] and len(base["spec_hash"]) == 16  # the same data: the same spec
    assert (changed["image"], changed["run_args"]) != (base["image"], base["run_args"])
    assert changed["spec_hash"] != base["spec_hash"]


def _changed_args(base: list[str]) -> list[tuple[str, list[str]]]:
    out = [(f"{i}:{arg}", [*base[:i], arg + "x", *base[i + 1:]]) for i, arg in enumerate(base)]
    out += [("one more", [*base, "--env", "DCGM_EXPORTER_INTERVAL=5000"]), ("one less", base[:-1]),
            ("reordered", [*base[2:], *base[:2]])]
    return out


def test_any_changed_run_argument_changes_the_spec(monkeypatch):
    base = _dcgm(monkeypatch)
    assert {"--restart", "unless-stopped", "--gpus", "-p", "--label"} <= set(base["run_args"])
    seen = {base["spec_hash"]: "as the role has them"}
    for what, args in _changed_args(base["run_args"]):
        asked = _dcgm(monkeypatch, run_args=args)
        assert asked["run_args"] == args
        assert asked["spec_hash"] not in seen, f"{what}: the same spec as {seen.get(asked['spec_hash'])}"
        seen[asked["spec_hash"]] = what


def _dcgm_container(spec: str) -> dict:
    """fake_responses of a GPU host running the DCGM exporter container labelled with ``spec``."""
    labels = json.dumps({"com.tritonfleet.spec": spec, "com.tritonfleet.role": "dcgm-exporter"})
    return {"for n in tritonfleet-dcgm-exporter; do docker inspect": [
        f'tritonfleet-dcgm-exporter true {labels} "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"']}


@pytest.mark.parametrize("data", [{}, {"monitoring_dcgm_port": 9401}, {"monitoring_dcgm_profiling": True}],
                         ids=["unchanged", "port", "profiling"])
def test_the_dcgm_container_is_recreated_only_when_its_spec_changes(monkeypatch, data):
    spec = _dcgm(monkeypatch)["spec_hash"]  # what the running container was started with
    wanted = _dcgm(monkeypatch, data)["spec_hash"]
    monkeypatch.undo()
    rec = _run_deploys(monitoring, {**DATA, "instance_type": "g5.xlarge", **data}, "debian12", monkeypatch,
                       responses=_dcgm_container(spec))
    runs = [c for c in rec.commands if c.startswith(DCGM_RUN)]
    if not data:
        assert runs == [] and "docker rm -f tritonfleet-dcgm-exporter >/dev/null" not in rec.commands
        return
    assert len(runs) == 1 and f"--label com.tritonfleet.spec={wanted} " in runs[0] and wanted != spec
    assert rec.commands.index("docker rm -f tritonfleet-dcgm-exporter >/dev/null") < rec.commands.index(runs[0])


def test_a_load_balancer_gets_the_node_exporter_only(monkeypatch):
    """A general-purpose host of the lb group: node metrics (HAProxy exports its own), no accelerator exporter."""
    rec = run_deploys(monitoring, {**DATA, "instance_type": "c6i.large"}, "debian12", monkeypatch, groups=("lb",))
    assert "prometheus-node-exporter" in rec.text and DROPIN in rec.uploads
    assert NEURON_UNIT not in rec.uploads and "dcgm" not in rec.text
