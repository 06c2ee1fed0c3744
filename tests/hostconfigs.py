"""Build validated HostConfigs in tests, with every registered role and a platform, no hosts needed."""

from __future__ import annotations

from roles import all_roles
from tritonfleet.config import HostConfig, load_host_config
from tritonfleet.platforms import PLATFORMS

BY_KEY = {p.key: p for p in PLATFORMS.values()}


def host_config(data: dict, name: str = "h1", platform: str = "ubuntu2204", **kwargs) -> HostConfig:
    return load_host_config(name, data, all_roles(), platform=BY_KEY[platform], **kwargs)
