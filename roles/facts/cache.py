"""Facts read once per host until something changes there.

pyinfra 3 reads a fact again each time an operation asks for it, and asks again when it re-evaluates
every operation at execute time, so a run that changes nothing reads the same facts two or more times.
This cache keeps each fact value of a host (key: fact, arguments) until a command that is not a fact
read runs on that host, or a file is uploaded to it; then the host's facts are read afresh. It is
installed on every host by preflight, once per run.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import importlib
import inspect
import json
import os
import stat
import types
import typing
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api import FactBase

_MARK = "_tritonfleet_fact_cache"


class _HostCache:
    def __init__(self) -> None:
        self.values: dict[tuple, Any] = {}
        self.reading = 0
        self.asked: dict[tuple, list[str]] = {}  # the facts this run asked (the next run's plan)
        self.plan: Path | None = None  # where it is kept (known while the deploy file runs)


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
            if key not in _cache.asked and _plannable(name_or_cls, args):
                _cache.asked[key] = [name_or_cls.__module__, name_or_cls.__qualname__, repr(kwargs)]
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



# -- the fact plan: a no-op run reads its facts in one command per host ---------------------------------------------
#
# A converge run asks the same facts every time (the deploy and the host data are the same). Each fact a run
# asks is recorded (class and arguments) in a plan per deploy file and host, under the controller's cache; the
# next run of that deploy reads every planned fact in one command per host, for all hosts at once, before any
# operation is built, and seeds this cache with the results. A fact the plan lacks, or one whose command failed
# in the batch, is read the usual way; a changed host drops the seeded values like any cached ones. Plans live in
# $TRITONFLEET_FACT_PLANS (default ~/.cache/tritonfleet/factplans); TRITONFLEET_FACT_PLANS=off turns them off.

_MARK = "@@tritonfleet-fact"


def _plan_file(state, host) -> Path | None:
    deploy = getattr(state, "current_exec_filename", None)
    if not deploy:
        return None  # API mode (tests): no deploy file to key a plan by
    where = os.environ.get("TRITONFLEET_FACT_PLANS", "")
    if where == "off":
        return None  # every fact read on its own (debugging, or measuring the cost without plans)
    key = hashlib.sha256(f"{os.path.abspath(deploy)}\0{host.name}".encode()).hexdigest()[:24]
    base = Path(where) if where else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tritonfleet" / "factplans"
    return base / f"{key}.json"


def _plannable(cls, args: tuple) -> bool:
    # facts that guard their command with another (requires_command) or need another shell are read one by one
    return (not args and isinstance(cls, type) and issubclass(cls, FactBase)
            and cls.requires_command is FactBase.requires_command and cls.shell_executable is None
            and callable(cls.command))


# A plan is data, never code: it may name only the fact classes of roles/facts/ (the module each is defined
# in, no other module is imported), with arguments that the fact's command() takes, of the types it declares
# (checked strictly); anything else is skipped. And it is trusted only from a file and a directory of this
# user that nobody else can write: otherwise it is ignored with a warning and the facts are read one by one.
FACT_PACKAGE = "roles.facts"


def _untrusted(path: Path) -> str | None:
    """Why the plan at ``path`` (its directory, then the file) is not to be trusted; None when it is."""
    for p in (path.parent, path):
        try:
            st = os.lstat(p)
        except OSError as exc:
            return f"{p}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return f"{p} is a symlink"
        if st.st_uid != os.getuid():
            return f"{p} is owned by uid {st.st_uid}, not by this user ({os.getuid()})"
        if st.st_mode & 0o022:
            return f"{p} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _fact_class(module: str, qualname: str) -> type | None:
    """The fact class ``module.qualname`` when it is one of roles/facts/ and can be planned."""
    if not isinstance(module, str) or not isinstance(qualname, str) or not qualname.isidentifier() \
            or not (module == FACT_PACKAGE or module.startswith(FACT_PACKAGE + ".")) \
            or not all(part.isidentifier() for part in module.split(".")):
        return None
    try:
        cls = getattr(importlib.import_module(module), qualname, None)
    except ImportError:
        return None
    if not (isinstance(cls, type) and issubclass(cls, FactBase) and cls.__module__ == module):
        return None
    return cls if _plannable(cls, ()) else None


def _arguments_fit(cls: type[FactBase], values: dict) -> bool:
    """``values`` are arguments of ``cls.command`` (all it needs), each of the type it declares."""
    from pydantic import TypeAdapter, ValidationError

    try:
        params = {n: p for n, p in inspect.signature(cls.command).parameters.items() if n != "self"}
        hints = typing.get_type_hints(cls.command)
    except (TypeError, ValueError, NameError):
        return False
    if not set(values) <= set(params) or any(
            p.default is inspect.Parameter.empty and n not in values for n, p in params.items()):
        return False
    for name, value in values.items():
        if name not in hints:
            return False
        try:
            TypeAdapter(hints[name]).validate_python(value, strict=True)
        except ValidationError:
            return False
    return True


def _load_plan(path: Path) -> list[tuple[type, dict]]:
    why = _untrusted(path)
    if why:
        logger.warning(f"fact plan {path} ignored ({why}): its facts are read one by one; remove it, or fix its "
                       "owner and mode (0600, in a directory only you can write)")
        return []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as f:
            entries = json.load(f)
    except (OSError, ValueError):
        return []
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if not (isinstance(entry, list) and len(entry) == 3):
            continue
        module, qualname, kwargs = entry
        cls = _fact_class(module, qualname)
        try:
            values = ast.literal_eval(kwargs) if cls and isinstance(kwargs, str) else None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if cls and isinstance(values, dict) and _arguments_fit(cls, values):
            out.append((cls, values))
    return out


def _save_plans(state) -> None:
    for host in state.inventory:
        cache = getattr(host, _MARK, None)
        if cache is None or cache.plan is None or not cache.asked:
            continue
        path = cache.plan
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(list(cache.asked.values())))
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except OSError:
            pass  # a plan is an optimisation: a controller that cannot keep one just reads facts one by one


def _prefetch_host(state, host, plan: list[tuple[type, dict]]) -> int:
    """Read the planned facts of ``host`` in one command and seed the cache; returns how many were seeded."""
    from pyinfra.api import StringCommand
    from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
    from pyinfra.api.facts import _handle_fact_kwargs, _make_command

    cache = getattr(host, _MARK)
    parts: list = []
    wanted: list = []
    executor_kwargs = None
    for cls, kwargs in plan:
        key = (cls, repr(()), repr(sorted(kwargs.items())))
        if key in cache.values:
            continue
        fact = cls()
        if fact.check_preconditions(state, host):
            continue
        fact_kwargs, global_kwargs = _handle_fact_kwargs(state, host, cls, (), dict(kwargs))
        if executor_kwargs is None:
            executor_kwargs = {k: v for k, v in global_kwargs.items() if k in CONNECTOR_ARGUMENT_KEYS}
        command = _make_command(fact.command, fact_kwargs)
        i = len(wanted)
        wanted.append((key, fact))
        # every fact at once (they only read), each into its own file; printed in order below
        parts += ["{", "(", command, ")", f'>"$d/{i}" 2>/dev/null;', f'echo $? >"$d/{i}.rc";', "}", "&"]
    if not wanted:
        return 0
    indices = " ".join(str(i) for i in range(len(wanted)))
    parts = ['d=$(mktemp -d) || exit 1;', *parts, "wait;", f"for i in {indices}; do echo \"{_MARK} $i\";",
             'cat "$d/$i";', '[ -s "$d/$i" ] && [ -n "$(tail -c1 "$d/$i")" ] && echo;',  # a last line without \n
             f'echo "{_MARK}-rc $i $(cat "$d/$i.rc")"; done;', 'rm -rf "$d"']
    if not host.connected:
        host.connect(reason="to read its facts", raise_exceptions=True)
    cache.reading += 1
    try:
        status, output = host.run_shell_command(StringCommand(*parts), print_output=state.print_fact_output,
                                                print_input=state.print_fact_input, **(executor_kwargs or {}))
    except Exception:  # noqa: BLE001 - the facts are then read one by one, with pyinfra's own error handling
        return 0
    finally:
        cache.reading -= 1
    if not status:
        return 0
    seeded, current = 0, None
    lines: list[str] = []
    for line in output.stdout_lines:
        if line.startswith(f"{_MARK}-rc "):
            _, index, rc = line.split()
            if current is not None and int(index) == current and rc == "0":
                key, fact = wanted[current]
                try:
                    cache.values[key] = fact.process(lines) if lines else fact.default()
                    seeded += 1
                except Exception:  # noqa: BLE001 - read again the usual way, which reports it
                    pass
            current, lines = None, []
        elif line.startswith(f"{_MARK} "):
            current, lines = int(line.split()[1]), []
        elif current is not None:
            lines.append(line)
    return seeded


def prefetch(state, hosts) -> None:
    """Seed every host's cache from its plan (one command per host, all hosts at once) and save this run's plans
    when the run ends."""
    import gevent

    jobs = []
    for host in hosts:
        path = _plan_file(state, host)
        getattr(host, _MARK).plan = path
        plan = _load_plan(path) if path is not None and path.exists() else []
        if plan:
            jobs.append(gevent.spawn(_prefetch_host, state, host, plan))
    if jobs:
        gevent.joinall(jobs, raise_error=False)
    if not getattr(state, "_tritonfleet_plans_saved", False):
        state._tritonfleet_plans_saved = True
        atexit.register(_save_plans, state)
