"""pyinfra roles: one module per concern.

A role module declares its pydantic ``Settings`` (every field with a default and a one-line
description), its cross-checks, its ``@deploy``, and registers them as ``ROLE = Role(...)``. The role
set is the set of modules in this package that define ``ROLE``: adding a role is one new file plus one
line in a deploy. Preflight, the README tables and the docs read :func:`all_roles`.
"""

from __future__ import annotations

import importlib
import pkgutil

from tritonfleet.config import Role


def all_roles() -> list[Role]:
    """Every registered role, in their documented order."""
    found: list[Role] = []
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg or info.name.startswith("_"):
            continue
        role = getattr(importlib.import_module(f"{__name__}.{info.name}"), "ROLE", None)
        if isinstance(role, Role):
            found.append(role)
    return sorted(found, key=lambda r: (r.order, r.name))
