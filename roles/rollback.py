"""Roll a host back to what it served before a change: the rollout (``tritonfleet rollout``) records each
server's spec and the model version before it applies a change, and hands that point back here when the
host fails a gate (``deploys/rollback.py`` with ``--data rollback_point='{...}'``).

- Containers: a server whose spec differs from the point is swapped back to the spec in its host record
  (``/var/lib/tritonfleet/servers/<name>.json``: the record itself or its ``previous``), through the same
  swap and health gate as any change. The record holds the command with the secret redacted; the secret
  of the host data is put back.
- Models (S3 sync): ``current`` is switched back to the recorded version, which the agent kept on disk,
  and the running servers reload what differs, each only the models it loads: those of the spec it is
  rolled back to (its ``--load-model`` flags, :attr:`~tritonfleet.hostcontract.ServerRecord.models`), else
  those of the host data.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pyinfra import host
from pyinfra.api import deploy

from roles import models as models_role
from roles import operations as ops
from roles.context import config_for
from roles.facts.docker import DockerState
from tritonfleet import hostcontract as hc
from tritonfleet.config import Role, RoleSettings


class RollbackPoint(BaseModel):
    """What a host served: each server's spec hash, and the model repository version (S3 sync)."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, str] = {}
    models_version: str | None = None

    @field_validator("models_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^\d{6,}-\d{8}T\d{6}Z$", v):
            raise ValueError("expected a version id like 000004-20261126T080630Z")
        return v


class Settings(RoleSettings):
    point: RollbackPoint | None = Field(None, description=(
        "What to roll back to (set by `tritonfleet rollout` on a failed host; JSON on the command line)."))

    @field_validator("point", mode="before")
    @classmethod
    def _json(cls, v):
        return json.loads(v) if isinstance(v, str) else v


ROLE = Role("rollback", Settings, "roll a host back to the point a rollout recorded before changing it", order=90)


def _target(records: dict, name: str, spec: str) -> hc.ServerRecord | None:
    record = records.get(name)
    for candidate in (record, record.previous if record else None):
        if candidate is not None and candidate.spec == spec:
            return candidate
    return None


def _unredact(values: list[str], secret: str | None) -> list[str]:
    return [v.replace("<redacted>", secret) for v in values] if secret else list(values)


@deploy("Rollback")
def rollback() -> None:
    cfg = config_for()
    point = cfg.rollback.point
    if point is None:
        host.noop("rollback_point is not set: nothing to roll back to")
        return
    t = cfg.triton
    docker = host.get_fact(DockerState, images=())
    urls = {p.name: p.local_url for p in t.placements}
    models = {p.name: p.models for p in t.placements}  # what each server loads, after the rollback
    for name, spec in sorted(point.servers.items()):
        current = docker["containers"].get(name)
        target = _target(docker["records"], name, spec)
        if target is not None:
            models[name] = target.models
        if current and current["spec"] == spec and current["running"]:
            host.noop(f"{name} runs the spec it ran before")
            continue
        if target is None:
            ops.triton.refuse(name=f"Triton server {name} back to spec {spec}",
                              message=f"{name}: the host record holds no spec {spec} to roll back to")
            continue
        ops.triton.container(name=f"Triton server {name} back to spec {spec}", container=name,
                             image=target.image, spec_hash=target.spec,
                             run_args=_unredact(target.run_args, t.repository_secret),
                             command=_unredact(target.command, t.repository_secret),
                             url=urls.get(name, "http://127.0.0.1:8000"), models=[], timeout=t.health_timeout,
                             secret=t.repository_secret)
    if point.models_version and models_role.sync_mode(cfg):
        cmd = [hc.AGENT, "switch", "--dest", cfg.models.dir, "--to", point.models_version,
               "--timeout", str(t.health_timeout)]
        if t.model_control_mode == "explicit":
            cmd += [a for p in t.placements for a in ("--server", f"{p.name}={p.local_grpc_url}")]
            cmd += models_role.server_models_args((p.name, models[p.name]) for p in t.placements)
            if models_role.repository_header(cfg):
                cmd += ["--header-file", hc.REPOSITORY_HEADER_FILE]
        ops.models.switch_version(name=f"Model repository back to {point.models_version}", dest=cfg.models.dir,
                                  version=point.models_version, command=cmd)

