"""Host access outside pyinfra: inventories loaded with pyinfra's own data semantics, SSH sessions with
strict host keys, ``docker inspect`` over those sessions (the format and parsing the Docker fact shares), and
the host-health reader (:mod:`tritonfleet.access.health`) that ``status``, the rollout and a watchdog share.
Nothing here imports the face (``tritonfleet/face/``: tests/unit/test_layers.py).
"""
