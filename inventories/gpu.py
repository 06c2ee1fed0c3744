"""Example: NVIDIA GPU hosts (driver branch, nvidia-container-toolkit, Docker nvidia runtime)."""

import os

gpu = [
    ("g5-a.example.internal", {
        "ssh_user": "ubuntu",
        "_sudo": True,
        "instance_type": "g5.12xlarge",
        "nvidia_driver_branch": "550",
        # Expected fingerprint of https://nvidia.github.io/libnvidia-container/gpgkey.
        "nvidia_key_fingerprint": os.environ.get("NVIDIA_KEY_FINGERPRINT"),
        "triton_image_source": "pull",
        "triton_image": "nvcr.io/nvidia/tritonserver:24.10-py3",
        # Two servers with two GPUs each.
        "triton_servers": [{"gpus": [0, 1]}, {"gpus": [2, 3]}],
    }),
]
