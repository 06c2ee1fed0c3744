"""Inventories as pyinfra reads them, without importing pyinfra_cli (it monkey-patches the whole
process with gevent on import).

A host's data is merged like pyinfra does: ``group_data/all.py`` < the inventory file's group (its stem)
< each group it is listed in (``group_data/<group>.py``, then the group's inline data) < host data.
"""

from __future__ import annotations

import inspect
import runpy
from pathlib import Path


def _public(namespace: dict) -> dict:
    """Module-level data of an executed file: no private names, modules, functions or classes."""
    return {k: v for k, v in namespace.items() if not k.startswith("_")
            and not (inspect.ismodule(v) or inspect.isfunction(v) or inspect.isclass(v))}


def _group_data(path: Path, group: str) -> dict:
    f = path.parent / "group_data" / f"{group}.py"
    if not f.exists():
        return {}
    return _public(runpy.run_path(str(f)))


def load_inventory(path: str | Path) -> list[tuple[str, dict]]:
    """``[(host, data)]`` from a pyinfra inventory file (every module-level list or ``(hosts, data)`` tuple
    is a group), with data merged as the module docstring says."""
    return load_inventory_groups(path)[0]


def load_inventory_groups(path: str | Path) -> tuple[list[tuple[str, dict]], dict[str, list[str]]]:
    """:func:`load_inventory`'s hosts, and the hosts of each group, from one run of the inventory file (a
    dynamic inventory is asked once)."""
    path = Path(path)
    groups: dict[str, tuple[list, dict]] = {}
    for name, value in runpy.run_path(str(path)).items():
        if name.startswith("_") or not isinstance(value, (list, tuple)):
            continue
        members: list | tuple = value
        data: dict = {}
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
            members, data = value
        groups[name] = (list(members), data)
    hosts: dict[str, dict] = {}
    member_of: dict[str, list[str]] = {}
    for group, (members, _data) in groups.items():
        for entry in members:
            if isinstance(entry, str):
                hname, hdata = entry, {}
            elif isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], dict):
                hname, hdata = entry
            else:
                continue
            hosts.setdefault(hname, {}).update(hdata)
            member_of.setdefault(hname, []).append(group)
    out = []
    for hname, hdata in hosts.items():
        merged = _group_data(path, "all")
        for group in [path.stem, *member_of[hname]]:
            merged.update(_group_data(path, group))
            merged.update(groups.get(group, ([], {}))[1])
        out.append((hname, {**merged, **hdata}))
    return out, {group: [h for h in hosts if group in member_of[h]] for group in groups}
