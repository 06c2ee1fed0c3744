"""Example: inf1 hosts. The driver stays on aws-neuronx-dkms 2.24.* (the last line that supports
Inferentia 1); the runtime ships inside the framework (torch-neuron) in the image.

    pyinfra inventories/inf1.py deploys/neuron.py     # host preparation only
"""

import os

inf1 = [
    ("inf1-a.example.internal", {
        "ssh_user": "ubuntu",
        "_sudo": True,
        "instance_type": "inf1.6xlarge",
        "neuron_key_fingerprint": os.environ.get("NEURON_KEY_FINGERPRINT"),
        # Four servers, one Inferentia device (4 NeuronCores) each.
        "triton_servers": [{"devices": [0]}, {"devices": [1]}, {"devices": [2]}, {"devices": [3]}],
    }),
]
