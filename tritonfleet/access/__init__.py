"""Host access outside pyinfra: inventories loaded with pyinfra's own data semantics, SSH sessions with
strict host keys, and the Docker API over those sessions. Used by ``status`` now, and by QA and rollout.
"""
