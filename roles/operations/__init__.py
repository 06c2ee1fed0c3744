"""Custom pyinfra operations, one module per subject, as in pyinfra's own tree.

Each reads a fact, then either does nothing (``host.noop``) or yields exactly the commands needed, so a
second run of any deploy changes nothing. Checks that must see the state *after* earlier operations
(device counts, image compatibility, health) act at execute time, when pyinfra re-evaluates operations
with fresh facts; a failed check yields a command that prints the reason and exits 1. Shell programs
live in ``templates/scripts/`` and run through :func:`roles.operations.common.script`.
"""
