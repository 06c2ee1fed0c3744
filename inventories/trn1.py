"""Example: trn1 hosts. trn1.32xlarge gets EFA (installer signature verified against a pinned key)."""

import os

trn1 = [
    ("trn1-a.example.internal", {
        "ssh_user": "ubuntu",
        "_sudo": True,
        "instance_type": "trn1.32xlarge",
        "neuron_key_fingerprint": os.environ.get("NEURON_KEY_FINGERPRINT"),
        "efa_key_fingerprint": os.environ.get("EFA_KEY_FINGERPRINT"),
        # Two servers of 8 devices (16 NeuronCores) each, on separate ports 8000-8002 and 8010-8012.
        "triton_servers": [{"devices": list(range(0, 8))}, {"devices": list(range(8, 16))}],
    }),
    ("trn1-b.example.internal", {
        "ssh_user": "ubuntu",
        "_sudo": True,
        "instance_type": "trn1.2xlarge",
        "neuron_key_fingerprint": os.environ.get("NEURON_KEY_FINGERPRINT"),
    }),
]
