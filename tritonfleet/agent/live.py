"""Live reload: after ``current`` is switched, Triton servers load what changed, without a restart.

A sync given servers (``--server NAME=URL``, explicit model-control mode) does, under the repository lock:

1. Before the switch: every server must answer ``/v2/health/ready`` (waited for up to ``--timeout``); a
   server that refuses connections is not running and loads ``current`` when it starts, so it is skipped.
   Then ``DIR/.reload-pending.json`` records the version the servers serve (``served``).
2. After the switch: each server loads the models added or changed between ``served`` and ``current``
   (Triton's repository API: ``RepositoryModelLoad``); models that left the repository are unloaded.
   Unchanged models are not touched. Then the pending record is removed. A server given its models
   (``--server-models NAME=MODEL,...``: the ones it loads, ``triton_servers[].models``) loads, unloads and
   rolls back only those; one without them serves every model of the repository.
3. A model that fails to load: Triton keeps serving the version it had, and ``current`` is switched back to
   ``served``; the models that had loaded the new version on any server are loaded again from ``served``
   (added ones unloaded), so every server serves ``served`` and the disk says so. The sync fails with
   Triton's reason for each model.

A sync killed between switch and reload leaves the pending record: the next run (even one with nothing
new in S3) reloads from ``served`` to ``current`` first. ``--dry-run`` reports a pending reload.

What a client of a server sees while an update is in flight, a kill at any point included (tested with a
kill at every step, against the real Triton: tests/genmodel/test_live_kill_triton.py): a model the update
does not touch never fails; a changed model never fails, answering from the old files, then the new ones;
an added model is unknown until it is ready, then stays ready; a removed model serves until it is unloaded.
Each model is loaded on all the host's servers at once (a thread each), so a client spread over them sees
it arrive everywhere within the spread of one load, and a kill once the requests are out leaves no server
behind: Triton finishes a load whose caller died. (A failed load is not such an update: the rollback below
unloads what had loaded.)

A server is ``grpc://HOST:PORT`` (what the models role passes) or ``http://HOST:PORT``. Over gRPC
(tritonclient, the agent's ``live`` extra) a load holds up nobody; over HTTP, Triton 2.51 holds up the HTTP
requests of other clients, to models the load does not touch, for the whole load (measured in
tests/genmodel/test_live_reload_triton.py, README "Model repositories"), so HTTP is for servers without a
reachable gRPC port only.

The restricted-API header comes from a root-only file (``--header-file``, one line ``name: value``, mode
0600); it is never an argument, never logged and never in the JSON output.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .layout import Repo
from .manifest import SyncError, diff, model_changes

PENDING = ".reload-pending.json"
GRPC_PREFIX = "triton-grpc-protocol-"  # Triton's prefix for the restricted-protocol header over gRPC


@dataclass
class Server:
    name: str
    url: str  # http://127.0.0.1:8000
    models: frozenset[str] | None = None  # the models it loads; None: every model in the repository

    def serves(self, model: str) -> bool:
        return self.models is None or model in self.models


@dataclass
class Outcome:
    """What the reload did (the ``reload`` object of ``--json``)."""

    servers: list[str] = field(default_factory=list)  # servers reloaded
    skipped: list[str] = field(default_factory=list)  # not running: they load ``current`` when they start
    loaded: list[str] = field(default_factory=list)  # models loaded (added or changed)
    unloaded: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # model -> Triton's reason
    rolled_back: bool = False
    pending: bool = False  # a reload is owed (dry run) or could not be finished


def read_header(path: str) -> tuple[str, str]:
    """``(name, value)`` from a ``name: value`` file that only its owner, this user, can read. The checks are
    made on the file as opened (``fstat``), so a file swapped in after a check is never the one read; a
    symlink is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        why = "a symlink (refused)" if exc.errno == errno.ELOOP else exc.strerror
        raise SyncError(f"header file {path}: {why}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SyncError(f"header file {path} is not a regular file")
    with os.fdopen(fd, encoding="utf-8") as f:
        if st.st_uid != os.geteuid():
            raise SyncError(f"header file {path} is owned by uid {st.st_uid}, not by this user ({os.geteuid()}); "
                            "chown it")
        if st.st_mode & 0o077:
            raise SyncError(f"header file {path} is readable by others (mode {st.st_mode & 0o777:o}); chmod 600 it")
        try:
            line = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SyncError(f"header file {path}: {getattr(exc, 'strerror', None) or 'not text'}") from None
    name, sep, value = line.partition(":")
    if not sep or not name.strip() or not value.strip():
        raise SyncError(f"header file {path}: expected one line 'name: value'")
    return name.strip(), value.strip()


class Triton:
    """The HTTP endpoints a reload needs (standard library only: the agent has no HTTP client dependency)."""

    def __init__(self, server: Server, header: tuple[str, str] | None, timeout: float) -> None:
        self.server = server
        self.header = header
        self.timeout = timeout
        self.call_timeout = max(timeout, 60)  # a load can take a while

    def _call(self, method: str, path: str, timeout: float) -> tuple[int, str]:
        req = urllib.request.Request(self.server.url.rstrip("/") + path, method=method,
                                     data=b"" if method == "POST" else None)
        if self.header and method == "POST":
            req.add_header(*self.header)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) URLs from data
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")

    def state(self) -> str:
        """"ready", "down" (connection refused: no server) or "starting" (anything else)."""
        try:
            code, _ = self._call("GET", "/v2/health/ready", 5)
        except urllib.error.URLError as exc:
            refused = isinstance(exc.reason, ConnectionRefusedError)
            return "down" if refused else "starting"
        except OSError:
            return "starting"
        return "ready" if code == 200 else "starting"

    def wait_ready(self) -> bool:
        """True once ready; False when it is not running at all. Raises after the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            state = self.state()
            if state != "starting":
                return state == "ready"
            if time.monotonic() > deadline:
                raise SyncError(f"server {self.server.name} ({self.server.url}) not ready after "
                                f"{self.timeout:.0f} s; nothing was switched")
            time.sleep(1)

    def load(self, model: str) -> str | None:
        """None when loaded, else Triton's reason."""
        return self._repository(f"models/{model}/load")

    def unload(self, model: str) -> str | None:
        return self._repository(f"models/{model}/unload")

    def _repository(self, path: str) -> str | None:
        try:
            code, body = self._call("POST", f"/v2/repository/{path}", self.call_timeout)
        except OSError as exc:
            return f"no answer from {self.server.url}: {exc}"
        if code == 200:
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        reason = (doc.get("error") if isinstance(doc, dict) else None) or body  # JSON, but maybe no object
        return f"HTTP {code}: {' '.join(str(reason).split())}"


class GrpcTriton(Triton):
    """The same calls over gRPC (``grpc://HOST:PORT``). The header travels as gRPC metadata: Triton wants the
    key ``triton-grpc-protocol-<name>`` for ``--grpc-restricted-protocol=...:<name>=<value>`` (gRPC metadata keys
    are lowercase). "down" is a refused TCP connection to the port, as over HTTP."""

    def __init__(self, server: Server, header: tuple[str, str] | None, timeout: float) -> None:
        super().__init__(server, header, timeout)
        try:
            from tritonclient.grpc import InferenceServerClient
        except ImportError:
            raise SyncError(f"server {server.name} ({server.url}): the agent has no gRPC client (its 'live' "
                            "extra: tritonclient[grpc]); install tritonfleet-agent[live], or give an http:// URL") from None
        self.address = server.url.split("://", 1)[1].rstrip("/")
        self.headers = {f"{GRPC_PREFIX}{header[0].lower()}": header[1]} if header else None
        self.client = InferenceServerClient(self.address)

    def state(self) -> str:
        host, _, port = self.address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except ConnectionRefusedError:
            return "down"
        except (OSError, ValueError):
            return "starting"
        from tritonclient.utils import InferenceServerException

        try:
            return "ready" if self.client.is_server_ready(headers=self.headers, client_timeout=5) else "starting"
        except InferenceServerException:
            return "starting"

    def load(self, model: str) -> str | None:
        return self._call_grpc(self.client.load_model, model)

    def unload(self, model: str) -> str | None:
        return self._call_grpc(self.client.unload_model, model)

    def _call_grpc(self, call, model: str) -> str | None:
        from tritonclient.utils import InferenceServerException

        try:
            call(model, headers=self.headers, client_timeout=self.call_timeout)
        except InferenceServerException as exc:
            status = str(exc.status() or "").removeprefix("StatusCode.")
            return f"gRPC {status or 'error'}: {' '.join(str(exc.message()).split())}"
        return None


def client_for(server: Server, header: tuple[str, str] | None, timeout: float) -> Triton:
    """The client for a server's URL: gRPC for ``grpc://``, HTTP for ``http(s)://``."""
    return (GrpcTriton if server.url.startswith("grpc://") else Triton)(server, header, timeout)


class Live:
    """The reload half of a sync (see the module docstring); called by ``sync`` under the lock."""

    def __init__(self, servers: list[Server], header: tuple[str, str] | None, timeout: float) -> None:
        self.clients = [client_for(s, header, timeout) for s in servers]
        self.running: list[Triton] = []
        self.outcome = Outcome()
        self.repaired: list[str] = []  # models whose damaged files the new version puts right: loaded again

    def reset(self) -> None:
        """Forget the last sync's reload (its outcome, the servers found running): a resident agent (``pull``)
        keeps one ``Live``, and its clients, for every sync."""
        self.running = []
        self.outcome = Outcome()
        self.repaired = []

    def bound(self, models: int) -> float:
        """Seconds the reload may take at most: each server's readiness wait, then a load (and, for a
        rollback, a second one) of each changed model, each call bounded by its own timeout."""
        return sum(c.timeout + 2 * max(models, 1) * c.call_timeout for c in self.clients)

    @staticmethod
    def served(repo: Repo, current: str | None) -> str | None:
        """The version the servers serve: the pending record's, else ``current``."""
        try:
            with open(os.path.join(repo.root, PENDING), encoding="utf-8") as f:
                served = json.load(f).get("served")
        except (OSError, ValueError, AttributeError):
            return current
        return served if served and os.path.isdir(repo.path(served)) else current

    def owed(self, repo: Repo, current: str | None) -> bool:
        return self.served(repo, current) != current

    def before_switch(self, repo: Repo, served: str | None) -> None:
        """Wait for the running servers, then record what they serve (kept if already recorded)."""
        self.running = [c for c in self.clients if c.wait_ready()]
        self.outcome.skipped = [c.server.name for c in self.clients if c not in self.running]
        if self.running and served:
            _write_json(os.path.join(repo.root, PENDING), {"served": served})

    def after_switch(self, repo: Repo, served: str | None, current: str, back: bool = False) -> None:
        """Reload ``served`` -> ``current`` on the running servers; roll back on a failed load. ``back``: the
        switch goes back to an older version (a rollback), whose changed models are unloaded before they
        are loaded, so the server cannot keep the newer ones (this host is out of service meanwhile)."""
        if not self.running or not served or served == current:
            _remove(os.path.join(repo.root, PENDING))
            return
        old, new = repo.manifest(served), repo.manifest(current)
        changes = model_changes(old, new, diff(old, new))
        top = {p.split("/", 1)[0] for p in new if "/" in p}
        changes["changed"] = sorted(set(changes["changed"]) | (set(self.repaired) & top & {
            p.split("/", 1)[0] for p in old if "/" in p}))
        _fresh(repo, current, changes["added"] + changes["changed"])
        out = self.outcome
        out.servers = [c.server.name for c in self.running]
        loaded: set[str] = set()
        for model in changes["added"] + changes["changed"]:
            if back and model in changes["changed"]:
                self._everywhere("unload", model)
            for c, reason in self._everywhere("load", model):
                if reason is None:
                    loaded.add(model)
                else:
                    out.failed[model] = reason if len(self.running) == 1 else f"{c.server.name}: {reason}"
        if out.failed:
            self._roll_back(repo, served, changes, loaded)
            _remove(os.path.join(repo.root, PENDING))
            raise SyncError("; ".join(f"model {m} did not load ({r})" for m, r in sorted(out.failed.items()))
                            + f"; switched back to {served}, which the servers keep serving")
        out.loaded = sorted(loaded)
        for model in changes["removed"]:
            results = self._everywhere("unload", model)
            for _c, reason in results:
                if reason is not None:
                    out.failed[model] = f"unload: {reason}"
            if results:
                out.unloaded.append(model)
        _remove(os.path.join(repo.root, PENDING))
        if out.failed:
            raise SyncError("; ".join(f"model {m}: {r}" for m, r in sorted(out.failed.items())))

    def _everywhere(self, action: str, model: str) -> list[tuple[Triton, str | None]]:
        """``client.<action>(model)`` ("load" or "unload") on every running server that serves ``model``, at
        once (a thread each), in the servers' order: a model arrives on all the host's servers together (a
        client spread over them sees it everywhere within the spread of one load, not one load per server
        later), and a kill of the agent once the requests are out leaves no server behind (Triton finishes a
        load whose caller died). A server that does not serve ``model`` is not asked."""
        servers = [c for c in self.running if c.server.serves(model)]
        if len(servers) <= 1:
            return [(c, getattr(c, action)(model)) for c in servers]
        with ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix="tf-reload") as pool:
            reasons = list(pool.map(lambda c: getattr(c, action)(model), servers))
        return list(zip(servers, reasons))  # noqa: B905 - the agent runs on Python 3.9 (no strict=)

    def _roll_back(self, repo: Repo, served: str, changes: dict[str, list[str]], loaded: set[str]) -> None:
        _fresh(repo, served, sorted(loaded | set(changes["changed"])))
        repo.switch(served, durable=True)
        self.outcome.rolled_back = True
        problems = []
        for model in sorted(loaded | set(changes["changed"])):  # failed changed ones too: make sure
            if model in changes["added"]:
                results = self._everywhere("unload", model)
            else:
                if model in loaded:  # it runs the newer files: make the servers drop them
                    self._everywhere("unload", model)
                results = self._everywhere("load", model)
            problems += [f"{c.server.name} {model}: {reason}" for c, reason in results if reason is not None]
        if problems:
            self.outcome.pending = True
            raise SyncError(f"model(s) {', '.join(sorted(self.outcome.failed))} did not load "
                            f"({'; '.join(self.outcome.failed.values())}); switching back to {served} left "
                            f"problems: {'; '.join(problems)}")


def _fresh(repo: Repo, version: str, models: list[str]) -> None:
    """Make each model's directory in ``version``, and the directories under it, newer than anything Triton
    has loaded: Triton reloads a model only when its directory tree is newer than when it last loaded it,
    and keeps a loaded model version whose own directory is not newer (Triton 2.51, seen with a model whose
    code alone changed, tests/genmodel/test_live_reload_triton.py); an older version's files (switching back)
    are older. Directories are per version (files are shared hard links), so only ``version`` is touched."""
    for model in models:
        path = os.path.join(repo.path(version), model)
        for root, _dirs, _files in os.walk(path):
            os.utime(root)


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def switch_to(root: str, version: str, live: Live | None) -> tuple[str | None, Outcome | None]:
    """Point ``root/current`` at the complete version ``version`` (a rollback to a kept version), reloading
    the servers ``live`` names like a sync does; returns (the version before, what the reload did)."""
    repo = Repo(root)
    with repo.locked():
        current = repo.current()
        if version not in repo.complete():
            kept = ", ".join(repo.complete()) or "none"
            raise SyncError(f"no complete version {version} in {root} (kept: {kept})")
        served = live.served(repo, current) if live else current
        if version != current or served != version:
            if live:
                live.before_switch(repo, served)
            repo.switch(version, durable=True)
            if live:
                live.after_switch(repo, served, version, back=True)
    return current, (live.outcome if live else None)
