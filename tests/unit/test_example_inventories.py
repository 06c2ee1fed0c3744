"""The documented example inventories are valid: every host passes preflight validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostconfigs import host_config
from tritonfleet.access.inventory import load_inventory

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"

FPR = "C" * 40


@pytest.mark.parametrize("name", ["inf1", "inf2", "trn1", "gpu"])
def test_example_inventory_hosts_validate(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # models_source is relative to where pyinfra runs
    for model in ("bert_base", "resnet50"):  # the models the inventories load (preflight checks they are there)
        (tmp_path / "models" / model / "1").mkdir(parents=True)  # a version (empty: 0 MiB by the memory check)
    for var in ("NEURON_KEY_FINGERPRINT", "EFA_KEY_FINGERPRINT", "NVIDIA_KEY_FINGERPRINT"):
        monkeypatch.setenv(var, FPR)
    monkeypatch.setenv("TRITONFLEET_REPOSITORY_SECRET", "fleet-secret-0123456789")
    hosts = load_inventory(INVENTORIES / f"{name}.py")
    assert hosts
    for host, data in hosts:
        cfg = host_config(data, name=host)
        assert cfg.instance.name == data["instance_type"]
        assert cfg.triton.placements


def test_example_inventory_without_fingerprint_fails_preflight(monkeypatch):
    monkeypatch.delenv("NEURON_KEY_FINGERPRINT", raising=False)
    monkeypatch.setenv("TRITONFLEET_REPOSITORY_SECRET", "fleet-secret-0123456789")
    (host, data), *_ = load_inventory(INVENTORIES / "inf2.py")
    with pytest.raises(ValueError, match="neuron_key_fingerprint"):
        host_config(data, name=host)


def test_inventory_data_priority_matches_pyinfra(tmp_path):
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text("a = 'all'\nb = 'all'\nc = 'all'\n_private = 1\n")
    (tmp_path / "group_data" / "web.py").write_text("b = 'web'\nc = 'web'\n")
    (tmp_path / "prod.py").write_text("web = ['h1', ('h2', {'c': 'host'})]\ndb = (['h3'], {'a': 'db-group'})\n")
    hosts = dict(load_inventory(tmp_path / "prod.py"))
    assert hosts["h1"] == {"a": "all", "b": "web", "c": "web"}
    assert hosts["h2"] == {"a": "all", "b": "web", "c": "host"}
    assert hosts["h3"] == {"a": "db-group", "b": "all", "c": "all"}
