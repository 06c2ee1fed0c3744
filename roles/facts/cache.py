"""Facts read once per host until something changes there.

pyinfra 3 reads a fact again each time an operation asks for it, and asks again when it re-evaluates
every operation at execute time, so a run that changes nothing reads the same facts two or more times.
This cache keeps each fact value of a host (key: fact, arguments) until a command that is not a fact
read runs on that host, or a file is uploaded to it; then the host's facts are read afresh. It is
installed on every host by preflight, once per run.
"""

from __future__ import annotations

import types
from typing import Any

_MARK = "_tritonfleet_fact_cache"


class _HostCache:
    def __init__(self) -> None:
        self.values: dict[tuple, Any] = {}
        self.reading = 0


def install(state) -> None:
    """Wrap ``get_fact``, ``run_shell_command``, ``put_file`` of every host of ``state`` (idempotent)."""
    for host in state.inventory:
        if getattr(host, _MARK, None) is not None:
            continue
        cache = _HostCache()
        setattr(host, _MARK, cache)
        get_fact, run, put = host.get_fact, host.run_shell_command, host.put_file

        def cached_get_fact(self, name_or_cls, *args, _get=get_fact, _cache=cache, **kwargs):
            key = (name_or_cls, repr(args), repr(sorted(kwargs.items())))
            if key in _cache.values:
                return _cache.values[key]
            _cache.reading += 1
            try:
                value = _get(name_or_cls, *args, **kwargs)
            finally:
                _cache.reading -= 1
            _cache.values[key] = value
            return value

        def changing_run(self, *args, _run=run, _cache=cache, **kwargs):
            if not _cache.reading:
                _cache.values.clear()
            return _run(*args, **kwargs)

        def changing_put(self, *args, _put=put, _cache=cache, **kwargs):
            _cache.values.clear()
            return _put(*args, **kwargs)

        host.get_fact = types.MethodType(cached_get_fact, host)
        host.run_shell_command = types.MethodType(changing_run, host)
        host.put_file = types.MethodType(changing_put, host)

