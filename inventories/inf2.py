"""Example: two inf2 serving hosts on EC2 (Ubuntu 24.04 Neuron-ready AMI or plain Ubuntu).

    pyinfra inventories/inf2.py deploys/serve.py

Hosts authenticate to AWS with their instance profile; no AWS keys go into host data. The expected
repository key fingerprints are facts you verify once (gpg --show-keys --with-colons KEYFILE) and pin
here; a key that does not match fails the deploy before anything is installed.
"""

import os

_common = {
    "ssh_user": "ubuntu",
    "_sudo": True,
    # Expected fingerprint of https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB.
    "neuron_key_fingerprint": os.environ.get("NEURON_KEY_FINGERPRINT"),
    # Neuron-enabled Triton image, built on each host from the NGC base (see README "Serving").
    "triton_image_source": "build",
    "triton_base_image": "nvcr.io/nvidia/tritonserver:24.10-py3",
    # Model repository copied from the controller until the S3 sync lands.
    "models_source": "models/",
    "triton_models": ["bert_base", "resnet50"],
}

inf2 = [
    # One server with both NeuronCores of the single Inferentia2 device.
    ("inf2-a.example.internal", {**_common, "instance_type": "inf2.xlarge"}),
    # inf2.48xlarge split into three servers of 4 devices / 8 NeuronCores each.
    ("inf2-b.example.internal", {**_common, "instance_type": "inf2.48xlarge",
                                 "triton_servers": [{}, {}, {}]}),
]
