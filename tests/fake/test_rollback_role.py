"""@fake runs of the rollback role: a server whose spec changed is swapped back to the spec its host
record remembers (secret put back), the models are switched back, and a spec nobody remembers fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roles.preflight import PreflightError
from roles.rollback import rollback
from tests.fake.fakehost import run_deploys
from tests.fake.test_roles import DATA, SECRET
from tritonfleet import hostcontract as hc
from tritonfleet import wheelhouse

OLD = hc.ServerRecord(name="triton", image="img:v1", spec="spec-v1", run_args=["--label", "x=1"],
                      command=["tritonserver", "--http-restricted-api=model-repository:h=<redacted>"])
NEW = hc.ServerRecord(name="triton", image="img:v2", spec="spec-v2", run_args=["--label", "x=2"],
                      command=["tritonserver"], previous=OLD)


def docker_answer(spec: str, record: hc.ServerRecord) -> list[str]:
    container = {"Id": "c1", "Name": "/triton", "Image": "sha256:1", "RestartCount": 0,
                 "Config": {"Image": record.image, "Labels": {hc.LABEL_SPEC: spec, hc.LABEL_ROLE: "triton"}, "Env": []},
                 "State": {"Running": True, "Status": "running", "StartedAt": "2026-11-26T08:00:00Z"},
                 "HostConfig": {"Devices": []}}
    return ["@@containers", json.dumps(container), f"@@record {hc.record_path('triton')}", record.to_json()]


def run(monkeypatch, point: dict, spec: str = "spec-v2", record: hc.ServerRecord = NEW, **extra):
    data = {**DATA, "instance_type": "inf2.xlarge", "rollback_point": json.dumps(point), **extra}
    built = wheelhouse.Wheelhouse(Path("/nonexistent"), "d" * 64, "0.1.0+t")  # the agent is installed already
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)
    return run_deploys(rollback, data, "debian12", monkeypatch,
                       responses={"@@containers": docker_answer(spec, record),
                                  "sys.version_info": ["3.11", "x86_64", "d" * 64]})


def test_a_changed_server_goes_back_to_the_recorded_spec_with_the_secret(monkeypatch):
    rec = run(monkeypatch, {"servers": {"triton": "spec-v1"}})
    (swap,) = [c for c in rec.commands if "triton-swap.sh" in c]
    # the container runs the recorded command with the secret put back; the record written stays redacted
    assert f"img:v1 tritonserver --http-restricted-api=model-repository:h={SECRET}" in swap
    assert '"image": "img:v1"' in swap and "model-repository:h=<redacted>" in swap


def test_a_server_already_on_its_spec_is_left_alone(monkeypatch):
    rec = run(monkeypatch, {"servers": {"triton": "spec-v2"}})
    assert not any("triton-swap.sh" in c for c in rec.commands)


def test_a_spec_the_record_does_not_hold_fails_naming_it(monkeypatch):
    run_deploys_failures = ("the host record holds no spec spec-v0",)
    data = {**DATA, "instance_type": "inf2.xlarge", "rollback_point": json.dumps({"servers": {"triton": "spec-v0"}})}
    run_deploys(rollback, data, "debian12", monkeypatch, responses={"@@containers": docker_answer("spec-v2", NEW)},
                expect_failures=run_deploys_failures)


def test_models_are_switched_back_through_the_agent(monkeypatch):
    rec = run(monkeypatch, {"servers": {}, "models_version": "000003-20261126T080000Z"},
              models_s3_uri="s3://model-bucket/prod")
    (switch,) = [c for c in rec.commands if "tritonfleet-agent switch" in c and "readlink" not in c]
    assert "--to 000003-20261126T080000Z" in switch and "--server triton=grpc://127.0.0.1:8001" in switch


@pytest.mark.parametrize("point,message", [
    ('{"servers": {"triton": 5}}', "rollback_point.servers.triton"),
    ('{"models_version": "latest"}', "expected a version id"),
    ("not json", "rollback_point"),
])
def test_a_bad_point_is_a_preflight_error(monkeypatch, point, message):
    with pytest.raises(PreflightError, match=message):
        run_deploys(rollback, {**DATA, "instance_type": "inf2.xlarge", "rollback_point": point}, "debian12",
                    monkeypatch)
