"""Repository keys, checked against a pinned fingerprint before anything is written."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from roles.facts.system import KeyringFingerprints
from roles.operations.common import script


@operation()
def keyring(src: str, dest: str, fingerprint: str, armored: bool = False):
    """
    Install an OpenPGP key for ``signed-by=`` (binary keyring) or rpm (``armored``) after checking
    its fingerprint.

    + src: URL of the (armored or binary) public key
    + dest: keyring path, e.g. /etc/apt/keyrings/neuron.gpg
    + fingerprint: expected 40-hex fingerprint; a mismatch fails before anything is written
    + armored: keep the key as downloaded (rpm ``gpgkey=file://`` wants ASCII armor)

    **Examples:**

    .. code:: python

        # apt: a binary keyring for signed-by=
        keys.keyring(
            name="Neuron key (fingerprint checked)",
            src="https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB",
            dest="/etc/apt/keyrings/neuron.gpg",
            fingerprint=host.data.neuron_key_fingerprint,
        )

        # dnf: the armored key for gpgkey=file://
        keys.keyring(
            name="Neuron key (fingerprint checked)",
            src="https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB",
            dest="/etc/pki/rpm-gpg/RPM-GPG-KEY-neuron",
            fingerprint=host.data.neuron_key_fingerprint,
            armored=True,
        )
    """
    fingerprint = fingerprint.replace(" ", "").upper()
    if fingerprint in host.get_fact(KeyringFingerprints, path=dest):
        host.noop(f"keyring {dest} holds {fingerprint}")
        return
    yield script("keyring.sh", src, dest, fingerprint, int(armored))
