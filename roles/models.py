"""Model repository on the host. Today: a copy of a controller-side directory (``models_source``);
the S3 sync agent replaces this with incremental, verified, atomic syncs."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from roles.preflight import config_for

DEFAULTS = {
    # Controller-side model repository to copy to the host (None: leave models_dir as it is).
    "models_source": None,
    # Model repository on the host, mounted read-only into every Triton container at /models.
    "models_dir": "/opt/tritonfleet/models",
}


@deploy("Models", data_defaults=DEFAULTS)
def models() -> None:
    cfg = config_for()
    files.directory(name="Model repository directory", path=cfg.models.dir, mode="755")
    if cfg.models.source:
        files.sync(name="Model repository (from the controller)", src=cfg.models.source, dest=cfg.models.dir,
                   delete=True, exclude=["*.pyc", "__pycache__"], exclude_dir=["__pycache__"])
    else:
        host.noop("models_source not set; the model repository is managed elsewhere")
