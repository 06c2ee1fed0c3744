"""Model repository on the host. Today: a copy of a controller-side directory (``models_source``);
the S3 sync agent (host-side room) takes over with incremental, verified, atomic syncs."""

from __future__ import annotations

import os

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from roles.context import config_for
from roles.operations.files import sync_tree
from roles.operations.models import models_switch
from tritonfleet import hostcontract as hc
from tritonfleet.config import FieldProblem, HostConfig, Role, RoleSettings, http_url, matching

_S3_URI = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"
_REGION = r"^[a-z]{2}(-[a-z]+)+-\d+$"


class Settings(RoleSettings):
    source: str | None = Field(None, description=(
        "Controller-side model repository to copy to the host (None: leave models_dir as it is)."))
    dir: str = Field("/opt/tritonfleet/models", description=(
        "Model repository on the host, mounted read-only into every Triton container at /models."))
    s3_uri: str | None = Field(None, description="s3://bucket/prefix of the model repository (S3 sync).")
    s3_endpoint: str | None = Field(None, description="S3 endpoint URL; None = AWS's for the region.")
    s3_region: str | None = Field(None, description="S3 region, e.g. us-east-1; None = the host's default.")

    @field_validator("dir")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") in ("", "/etc", "/usr", "/var"):
            raise ValueError("expected an absolute directory of its own, e.g. /opt/tritonfleet/models")
        return v.rstrip("/")

    _uri = field_validator("s3_uri")(matching(_S3_URI, "expected s3://bucket/prefix"))
    _region = field_validator("s3_region")(matching(_REGION, "expected a region name like us-east-1"))

    _endpoint = field_validator("s3_endpoint")(lambda v: http_url(v))


def model_names(cfg: HostConfig) -> list[str]:
    """Model directories of the controller-side repository (those with a config.pbtxt)."""
    src = cfg.models.source
    if not src or not os.path.isdir(src):
        return []
    return sorted(d for d in os.listdir(src) if os.path.isfile(os.path.join(src, d, "config.pbtxt")))


def _checks(cfg: HostConfig) -> None:
    src = cfg.models.source
    if src is not None and not os.path.isdir(src):
        raise FieldProblem("models_source", src, "no such directory on the controller")


ROLE = Role("models", Settings, "the model repository on the host", checks=_checks, order=60)


@deploy("Models")
def models() -> None:
    cfg = config_for()
    files.directory(name="Model repository directory", path=cfg.models.dir, mode="755")
    if cfg.models.source:
        # A killed upload leaves a partial file in the staging copy only; the live repository is switched
        # from a complete copy, file by file with renames.
        sync_tree(name="Model repository (staged from the controller)", src=cfg.models.source,
                  dest=hc.MODELS_STAGING)
        # A new host's empty repository is filled now; a serving host's is switched by the triton role once
        # its containers pass their health gate, then each changed model is reloaded (and restored if it
        # fails), so a bad model never takes a server down.
        models_switch(name="Model repository (first fill)", staging=hc.MODELS_STAGING, live=cfg.models.dir,
                      previous=hc.MODELS_PREVIOUS, only_if_empty=True)
    else:
        host.noop("models_source not set; the model repository is managed elsewhere")
