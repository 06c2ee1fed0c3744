"""EFA (Elastic Fabric Adapter) on the Neuron instance types that have it (trn1.32xlarge, trn1n, trn2),
installed with the AWS installer after its GPG signature is verified against a pinned key."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy

from roles import operations as ops
from roles.context import config_for
from tritonfleet.config import MISSING, FieldProblem, HostConfig, Role, RoleSettings, checked, http_url
from tritonfleet.fingerprints import fingerprint


class Settings(RoleSettings):
    install: Literal["auto", "always", "never"] = Field("auto", description=(
        '"auto" on Neuron instance types that have EFA (trn1.32xlarge, trn1n, trn2), "always" or "never".'))
    installer_url: str = Field("https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz",
                               description="EFA installer tarball.")
    signature_url: str | None = Field(None, description="Its detached signature; None = <installer_url>.sig.")
    key_url: str = Field("https://efa-installer.amazonaws.com/aws-efa-installer.key",
                         description="The key the signature is checked with.")
    key_fingerprint: str | None = Field(None, description="Expected fingerprint of that key (required where EFA is installed).")

    _urls = field_validator("installer_url", "signature_url", "key_url")(lambda v: http_url(v))
    _fpr = field_validator("key_fingerprint")(lambda v: fingerprint(v))

    def effective_signature_url(self) -> str:
        return self.signature_url or self.installer_url + ".sig"


def wanted(cfg: HostConfig) -> bool:
    """EFA goes on Neuron hosts whose instance type has it (or all Neuron hosts with "always")."""
    if not cfg.instance.is_neuron:
        return False
    return cfg.efa.install == "always" or (cfg.efa.install == "auto" and cfg.instance.efa)


def _checks(cfg: HostConfig) -> None:
    if cfg.efa.install == "always" and not (cfg.instance.is_neuron and cfg.instance.efa):
        raise FieldProblem("efa_install", "always", f"{cfg.instance.name} has no EFA interface "
                                                    "(EFA is installed on trn1.32xlarge, trn1n and trn2)")
    if wanted(cfg) and not cfg.efa.key_fingerprint:
        raise FieldProblem("efa_key_fingerprint", MISSING,
                           f"required because {cfg.instance.name} installs EFA (or set efa_install: never)")


ROLE = Role("efa", Settings, "EFA installer (signature verified) where the instance type has EFA",
            checks=_checks, order=25)


@deploy("EFA")
def efa() -> None:
    cfg = config_for()
    if not wanted(cfg):
        host.noop(f"{cfg.instance.name}: no EFA")
        return
    e: Settings = cfg.efa
    ops.accelerators.efa_installer(name="EFA (installer signature verified)", installer_url=e.installer_url,
                                   signature_url=e.effective_signature_url(), key_url=e.key_url,
                                   fingerprint=checked(e.key_fingerprint, "efa_key_fingerprint"))
