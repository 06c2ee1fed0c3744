"""The one contract for what tritonfleet leaves on a host: paths, container labels, the server record.

The Triton role writes these, the pyinfra facts and ``tritonfleet status`` read them, and rollback (the
fleet room) reads the record's ``previous``. Nothing else spells a label or a path.

The server record ``/var/lib/tritonfleet/servers/<name>.json`` (mode 0600, secrets redacted)::

    {"schema": 1, "name": "triton", "image": "...", "spec": "<hash>", "run_args": [...], "command": [...],
     "previous": {<the record of the spec this one replaced>} | null}

``previous`` changes only when a *different* spec replaces the current one; re-creating the same spec
(after ``docker rm -f``) keeps the rollback target. The models a server loads are part of its command
(``--load-model=<model>`` each, ``--load-model=*`` for every model in the repository), so of its spec:
:attr:`ServerRecord.models` reads them back, and a rollback to a spec returns the server to its models too.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

STATE_DIR = "/var/lib/tritonfleet"
SERVERS_DIR = f"{STATE_DIR}/servers"
BUILD_DIR = f"{STATE_DIR}/build"
IMAGES_DIR = f"{STATE_DIR}/images"
OPT_DIR = "/opt/tritonfleet"
#: Per server, one stamp file per model: touched when the server loaded the model's files.
LOADED_DIR = f"{STATE_DIR}/loaded"
#: The complete copy of the controller's model repository that the live one is switched from.
MODELS_STAGING = f"{STATE_DIR}/models-staging"
#: The live repository as it was before the last switch (hard links), to restore a model that fails.
MODELS_PREVIOUS = f"{STATE_DIR}/models-previous"

#: The host agent (``tritonfleet-agent``): its venv and the wheelhouse it is installed from.
AGENT_VENV = f"{OPT_DIR}/venv"
AGENT = f"{AGENT_VENV}/bin/tritonfleet-agent"
WHEELHOUSE_DIR = f"{OPT_DIR}/wheelhouse"
#: The restricted-API header line ("name: value") the agent reloads models with; root-only (0600).
REPOSITORY_HEADER_FILE = "/etc/tritonfleet/repository-header"
#: What the Neuron image's runtime loads (``tritonfleet.compat.model_limits``, JSON, 0644): the agent checks each
#: model of a version against it before it switches ``current`` (``tritonfleet-agent sync --compat``).
MODEL_COMPAT_FILE = "/etc/tritonfleet/model-compat.json"
#: Pull mode's state file (``tritonfleet-agent pull``, JSON object, 0644): the release ``current`` serves, the one
#: the pointer names, the last check and the last error (``tritonfleet status`` reads it into its release column).
PULL_STATE_FILE = f"{STATE_DIR}/models-pull.json"
#: With models from S3, Triton reads the version ``current`` points at (the models dir is mounted at /models).
S3_REPOSITORY_IN_CONTAINER = "/models/current"

#: Default header guarding Triton's restricted APIs. Lowercase: gRPC metadata keys are lowercase and
#: Triton compares them exactly (gRPC clients send "triton-grpc-protocol-<header>").
REPOSITORY_HEADER = "x-tritonfleet-repository-key"

LABEL_PREFIX = "com.tritonfleet."
LABEL_ROLE = LABEL_PREFIX + "role"
LABEL_SERVER = LABEL_PREFIX + "server"
LABEL_DEVICES = LABEL_PREFIX + "devices"
LABEL_CORES = LABEL_PREFIX + "cores"
LABEL_ENDPOINT = LABEL_PREFIX + "endpoint"
LABEL_SPEC = LABEL_PREFIX + "spec"
#: Label a built Neuron image carries: the aws-neuronx-runtime-lib version it installs.
LABEL_IMAGE_RUNTIME = LABEL_PREFIX + "neuron.runtime-lib"
#: Label a built Neuron image carries: the framework and compiler pins it installs, ``name==version`` joined by
#: commas (:func:`frameworks_label`, read back by :func:`parse_frameworks_label`).
LABEL_IMAGE_FRAMEWORKS = LABEL_PREFIX + "neuron.frameworks"
ROLE_TRITON = "triton"
#: ``docker ps --filter`` value selecting tritonfleet's Triton containers.
TRITON_FILTER = f"label={LABEL_ROLE}={ROLE_TRITON}"

#: Container ports of every Triton server (published per server on the host).
CONTAINER_PORTS = {"http_port": 8000, "grpc_port": 8001, "metrics_port": 8002}

RECORD_SCHEMA = 1


def record_path(name: str) -> str:
    return f"{SERVERS_DIR}/{name}.json"


def loaded_dir(server: str) -> str:
    return f"{LOADED_DIR}/{server}"


def container_labels(server: str, devices: str, cores: str, endpoint: str) -> dict[str, str]:
    return {LABEL_ROLE: ROLE_TRITON, LABEL_SERVER: server, LABEL_DEVICES: devices, LABEL_CORES: cores,
            LABEL_ENDPOINT: endpoint}


class ServerRecord(BaseModel):
    """What a host remembers of one Triton server: the spec it runs and the one before it."""

    model_config = ConfigDict(extra="ignore")

    schema_: int = RECORD_SCHEMA
    name: str
    image: str
    spec: str
    run_args: list[str]
    command: list[str]
    previous: ServerRecord | None = None

    @property
    def models(self) -> list[str] | None:
        """The models this spec loads (:func:`loaded_models` of its command)."""
        return loaded_models(self.command)

    def to_json(self) -> str:
        return json.dumps(_dump(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ServerRecord | None:
        """Parse a record; None for an empty, unreadable or newer-schema file."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or int(data.get("schema", 1)) > RECORD_SCHEMA:
            return None
        return cls.model_validate(_load(data))

    def succeeded_by(self, new: ServerRecord) -> ServerRecord:
        """The record to write when ``new`` replaces this one: a different spec moves this one to
        ``previous``; the same spec keeps this one's ``previous``."""
        if new.spec == self.spec:
            return new.model_copy(update={"previous": self.previous})
        return new.model_copy(update={"previous": self.model_copy(update={"previous": None})})


def loaded_models(command: list[str]) -> list[str] | None:
    """The models a tritonserver command line loads: its ``--load-model`` values in explicit model control;
    None for every model in the repository (``--load-model=*``, or the poll and none modes)."""
    if "--model-control-mode=explicit" not in command:
        return None
    models = [a.split("=", 1)[1] for a in command if a.startswith("--load-model=")]
    return None if "*" in models else models


def _dump(rec: ServerRecord) -> dict[str, Any]:
    return {"schema": rec.schema_, "name": rec.name, "image": rec.image, "spec": rec.spec,
            "run_args": rec.run_args, "command": rec.command,
            "previous": _dump(rec.previous) if rec.previous else None}


def _load(data: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in data.items() if k != "schema"}
    out["schema_"] = int(data.get("schema", 1))
    if isinstance(out.get("previous"), dict):
        out["previous"] = _load(out["previous"])
    return out


def container_summary(c: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``docker inspect`` (or the Docker API's container attrs) tritonfleet uses."""
    labels = c["Config"].get("Labels") or {}
    state = c["State"]
    return {
        "id": c["Id"],
        "image": c["Config"]["Image"],
        "image_id": c["Image"],
        "spec": labels.get(LABEL_SPEC),
        "running": state["Running"],
        "restarting": state.get("Restarting", False),
        "status": state["Status"],
        "started_at": state.get("StartedAt", ""),
        "restart_count": c.get("RestartCount", 0),
        "devices": [d["PathOnHost"] for d in c["HostConfig"].get("Devices") or []],
        "env": c["Config"].get("Env") or [],
        "labels": labels,
    }


def frameworks_label(pins: list[str]) -> str:
    """The :data:`LABEL_IMAGE_FRAMEWORKS` value of an image built with the pip requirements ``pins``
    (``["torch-neuronx==2.9.0.2.15.32035", "neuronx-cc==2.27.5334.0"]``): the pins as they are, comma-joined."""
    return ",".join(p.strip() for p in pins)


def parse_frameworks_label(text: str | None) -> dict[str, str]:
    """``{package: version}`` of a :data:`LABEL_IMAGE_FRAMEWORKS` value: names lowercased with ``_`` as ``-``
    and extras dropped (``neuron-cc[tensorflow]==1.24.0.0`` -> ``neuron-cc``); entries without ``==`` are
    left out. Empty for None or an empty label."""
    out: dict[str, str] = {}
    for entry in (text or "").split(","):
        name, sep, version = entry.partition("==")
        name = name.split("[", 1)[0].strip().lower().replace("_", "-")
        version = version.split(";", 1)[0].strip()
        if sep and name and version:
            out[name] = version
    return out


def redact(values: list[str], secret: str | None) -> list[str]:
    """``values`` with ``secret`` replaced (records and logs never hold it)."""
    return [v.replace(secret, "<redacted>") for v in values] if secret else list(values)
