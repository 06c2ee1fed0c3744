"""Defaults for every host (lowest priority after the role DEFAULTS).

Role defaults are documented in README "Provisioning hosts" and "Serving"; set here only what your
fleet changes for all hosts. Keep secrets out of git: read them from the environment.
"""

import os

# Per-fleet secret guarding Triton's model-repository API (load/unload). Required.
triton_repository_secret = os.environ.get("TRITONFLEET_REPOSITORY_SECRET")
