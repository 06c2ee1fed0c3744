"""Custom pyinfra operations, one module per subject, as in pyinfra's own tree.

Each reads a fact, then either does nothing (``host.noop``) or yields exactly the commands needed, so a
second run of any deploy changes nothing. Checks that must see the state *after* earlier operations
(device counts, image compatibility, health) act at execute time, when pyinfra re-evaluates operations
with fresh facts; a failed check yields a command that prints the reason and exits 1. Shell programs
live in ``templates/scripts/`` and run through :func:`roles.operations.common.script`.

Names follow pyinfra's: ``<subject>.<what it does>``, never repeating the subject (``docker.image``,
``packages.install``, ``triton.container``), and each docstring lists its arguments (``+ arg: meaning``) and
ends with an ``**Example:**`` block (``tests/unit/test_operation_docs.py`` checks both). Roles call them as
``ops.<subject>.<operation>`` (``from roles import operations as ops``), since the subjects' names
(``files``, ``docker``, ``models``...) are also pyinfra's operation modules or the roles' own deploys.
"""

from roles.operations import (
    accelerators,
    docker,
    files,
    haproxy,
    keys,
    models,
    monitoring,
    packages,
    qa,
    services,
    system,
    triton,
)

__all__ = ["accelerators", "docker", "files", "haproxy", "keys", "models", "monitoring", "packages", "qa", "services",
           "system", "triton"]
