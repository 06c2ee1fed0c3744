"""The host watchdog's runtime: the ``tritonfleet-watchdog`` service loop (``tritonfleet-agent watchdog``). Every
interval it reads the host (:class:`WatchRun.probe`), hands the samples to the decision core
(:class:`.watchdog.Watchdog`, its rules in :mod:`.watchpolicy`) and carries out the actions it returns
(:class:`WatchRun.act`), then writes the textfile metric and the state file. Standard library and boto3 only
(Python 3.9), like the rest of the agent. What it reads the host with is in :mod:`.watchprobe`: the config file,
the host's tools and files, the parsers of their answers, and the few names of :mod:`tritonfleet.hostcontract`
the watchdog needs (the agent cannot import it); this module re-exports them (``__all__``).

Everything it runs goes through one injectable *runner* (``argv, timeout -> (rc, stdout, stderr)``: 127 when the
tool is not on this host, 124 when it ran past its timeout, with what it printed until then) and every HTTP
request through one injectable *fetcher* (``method, url, headers, body, timeout -> (status, text)``, an OSError
when nothing answers), files through a *reader* (by default :func:`.watchprobe.run_command`,
:func:`.watchprobe.fetch` and :func:`.watchprobe.read_text`); so tests drive whole passes with recorded
output. A probe whose tool is missing is skipped; a probe that fails is a :class:`.watchpolicy.ProbeError` recorded in the
state file (and one journal line when its status changes), and the sample carries the last value it had (a
counter that stands still is no growth). Nothing a probe or an action raises stops the loop, and the loop
always sleeps between passes.

**Probes**, per Triton server (the containers labelled ``com.tritonfleet.role=triton``, running or not; a
server whose container is gone is no longer watched: the host records in ``/var/lib/tritonfleet/servers``
outlive the containers a new placement removes, so they are not read):

- readiness: ``GET /v2/health/ready`` on the server's own port (its ``com.tritonfleet.endpoint`` label; a
  wildcard bind address is reached on loopback), 3 s;
- models: ``POST /v2/repository/index`` with the restricted-API header (``--header-file``, as the sync's live
  reload sends it), 3 s, asked only while the server is ready. A version READY makes the model ready; one
  UNAVAILABLE for another reason than ``unloaded`` makes it not ready; one that is loading or unloading (a
  live reload in flight), unloaded or never loaded leaves it out (for the core: not listed, not judged);
- restart count and process: one ``docker ps`` and one ``docker inspect`` for every container (its format asks
  for the fields below and never the command line, which carries the repository secret);
- memory: the container's cgroup (``/proc/<pid>/cgroup`` of its process, then ``memory.stat``): ``anon +
  shmem`` (cgroup v2; ``total_rss + total_shmem`` on v1), what the server's processes allocated, the
  python-backend stubs' and its ``/dev/shm`` included. Not ``memory.current``, nor ``docker stats`` (which is
  usage less inactive page cache): both count the page cache, which grows as models are read and is given
  back under pressure, so a server that loads models would look like a leak; and ``docker stats --no-stream``
  takes a second or two of the daemon's time per call, where this is two file reads. A container that is not
  running has no memory: its last reading is repeated (a flat line is no growth; 0 before any reading).

Per host:

- Neuron error counters. The monitoring role already runs ``neuron-monitor | neuron-monitor-prometheus.py``
  (``tritonfleet-neuron-monitor.service``), and AWS's exporter adds every report's per-period counts into
  counters: with ``--neuron-exporter URL`` (``http://127.0.0.1:<port>/metrics``) the watchdog reads
  ``hardware_ecc_events_total`` and ``execution_errors_total`` there, and starts no monitor of its own. Only when
  that URL is not given or does not answer it runs ``neuron-monitor`` once, for 3 s, with a config of one-second
  periods and only those two groups: that sees only the errors counted during its own 3 s (it catches a device
  that keeps failing, and can miss a single event), so deploy the exporter for complete counts. Either way
  the watchdog adds the *growth* it saw into counters of its own, so a change of source is neither growth nor
  loss (the exporter's first reading, and its first after the fallback ran, is a baseline);
- NeuronCores held by processes that are not ours: ``neuron-ls --json-output``, its pids compared with every
  process of our containers (their cgroups' ``cgroup.procs``). When the processes of a running container of
  ours cannot be read, this probe fails for the pass rather than call them foreign;
- GPU: ``nvidia-smi --query-gpu=<probes.GPU_QUERY_FIELDS> --format=csv,noheader,nounits`` (uncorrected ECC,
  volatile), and the kernel's ``NVRM: Xid`` lines (``journalctl -k``, from the cursor of the last look; at most
  10000 lines a look), on hosts that have nvidia-smi.

**Effects** of the core's actions, each bounded in time:

- ``report``: the action's journal line (stdout: the service's journal) and the textfile metric;
- ``restart``: the drain hook first when the config has one (``drain_command``, below), then
  ``docker restart --time 30 <container>`` (90 s at most);
- ``replace``: ``SetInstanceHealth(InstanceId, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False)`` on
  the Auto Scaling group, with the instance profile's credentials (boto3's default chain); the instance id and
  region from IMDSv2 (``AWS_EC2_METADATA_SERVICE_ENDPOINT`` moves it, as it does for boto3), ``--region`` and
  ``--endpoint-url`` override them;
- ``free-cores``: SIGTERM to each foreign process, SIGKILL after 10 s if it is still there; only when the
  policy allows it (the core already asks for it only then; the runtime checks again), never to pid 1, itself
  or a process of our containers.

Every action (and whether it was carried out) is one journal line and goes to the textfile metric
``tritonfleet_watchdog_actions_total{server,reason,action}`` in ``<textfile dir>/tritonfleet_watchdog.prom``.

**The config file** (``--policy``, ``/etc/tritonfleet/watchdog.json``): the policy data of
:meth:`.watchpolicy.Policy.from_data`, plus the runtime's own keys (``drain_command``, the load-balancer hook
run before each restart, and ``drain_timeout_seconds``); its format is described, and read, in
:mod:`.watchprobe` (:func:`.watchprobe.read_config`).

**The state file** (``--state``, ``/var/lib/tritonfleet/watchdog/last.json``; mode 0644, written whole under a
temporary name and renamed, for ``tritonfleet status``)::

    {"schema": 1, "at": 1764000000.5, "interval": 30, "started": 1763990000.0,
     "servers": {"triton-0": {"container": "triton-0", "url": "http://127.0.0.1:8000", "ready": true,
                              "restarts": 0, "rss_bytes": 1073741824, "models": {"bert": true},
                              "restarts_last_hour": 0, "problems": []}},
     "host": {"neuron_errors": {"device0.mem_ecc_uncorrected": 0}, "foreign_core_pids": {"4242": [0, 1]},
              "gpu_xid": 0, "gpu_ecc_dbe": 0,
              "probes": {"docker": "ok", "neuron-ls": "skipped: not on this host", "nvidia-smi": "error: ..."}},
     "actions": [{"at": 1764000000.5, "kind": "restart", "server": "triton-0", "reason": "leak",
                  "detail": "rss grew ...", "outcome": "done"}]}

``at``: the end of the last pass (Unix seconds); ``servers``: what that pass saw of each server (``problems``:
its probes' errors); ``host.probes``: each host probe's status (``ok``, ``skipped: <why>`` or
``error: <one line>``); ``actions``: the last 50 actions, oldest first, carried over a restart of the service
(``outcome``: ``done`` or ``failed: <one line>``). The restart budget and the hysteresis are not: a restarted
service starts them afresh.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import aws, probes
from .watchdog import Watchdog, textfile, write_textfile
from .watchpolicy import Action, HostSample, PolicyError, ProbeError, ServerSample

# the readers (and the host contract's names) live in .watchprobe; imported here for the service, and
# re-exported (``__all__``) because the CLI, the roles and the tests reach them as ``watchrun.<name>``
from .watchprobe import (
    DRAIN_TIMEOUT,
    INSPECT_FORMAT,
    LABEL_ENDPOINT,
    LABEL_SERVER,
    MAX_BODY,
    NEURON_BIN,
    POLICY_FILE,
    REPOSITORY_HEADER_FILE,
    RUNTIME_KEYS,
    TRITON_FILTER,
    Config,
    _line,
    autoscaling_client,
    cgroup_path,
    describe_error,
    endpoint_url,
    fetch,
    load_config,
    memory_from_stat,
    model_states,
    parse_exporter,
    parse_inspect,
    read_config,
    read_text,
    run_command,
)

if TYPE_CHECKING:  # the injectable parts (see the module's docstring)
    from .watchprobe import Fetcher, Reader, Runner

__all__ = [
    # the service (this module)
    "STATE_FILE", "TEXTFILE", "STATE_SCHEMA", "HTTP_TIMEOUT", "IMDS_TOKEN_TTL", "TOOL_TIMEOUT",
    "DOCKER_STOP_SECONDS", "RESTART_TIMEOUT", "KILL_GRACE", "ONESHOT_SECONDS", "KERNEL_LINES", "RECENT_ACTIONS",
    "ONESHOT_CONFIG", "QUEUE_TIME_PERIOD", "QUEUE_TIME_STATE", "Options", "QueueTimeOptions", "WatchRun", "main",
    # re-exported from .watchprobe: the host contract, the config file, the host's tools, the readings
    "LABEL_SERVER", "LABEL_ENDPOINT", "TRITON_FILTER", "REPOSITORY_HEADER_FILE", "POLICY_FILE", "NEURON_BIN",
    "DRAIN_TIMEOUT", "MAX_BODY", "INSPECT_FORMAT", "RUNTIME_KEYS", "Config", "read_config", "load_config",
    "run_command", "fetch", "read_text", "autoscaling_client", "describe_error", "parse_inspect", "endpoint_url",
    "model_states", "cgroup_path", "memory_from_stat", "parse_exporter",
    # re-exported from .watchpolicy
    "PolicyError", "ProbeError",
]

# -- the service's own files and bounds (the host contract's names: .watchprobe) ---------------------------
STATE_FILE = "/var/lib/tritonfleet/watchdog/last.json"
TEXTFILE = "tritonfleet_watchdog.prom"
STATE_SCHEMA = 1

HTTP_TIMEOUT = 3.0
IMDS_TOKEN_TTL = 60  # seconds: the watchdog asks the instance metadata once, for a replace
TOOL_TIMEOUT = 10.0
DOCKER_STOP_SECONDS = 30  # docker restart --time: SIGTERM, then SIGKILL after this
RESTART_TIMEOUT = 90.0
KILL_GRACE = 10.0
ONESHOT_SECONDS = 3.0  # the fallback neuron-monitor's run (one-second periods)
KERNEL_LINES = 10000
RECENT_ACTIONS = 50

ONESHOT_CONFIG = {"period": "1s",
                  "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": "execution_stats"}]}],
                  "system_metrics": [{"type": "neuron_hw_counters"}]}


# -- the service -----------------------------------------------------------------------------------------

@dataclass
class Options:
    """The service's command line (``tritonfleet-agent watchdog``)."""

    config: Config = field(default_factory=Config)
    interval: float = 30.0
    textfile_dir: str | None = None
    state: str | None = None
    header_file: str | None = None
    neuron_exporter: str | None = None
    endpoint_url: str | None = None
    region: str | None = None
    proc: str = "/proc"
    cgroup_root: str = "/sys/fs/cgroup"
    kill_grace: float = KILL_GRACE
    #: the queue time per request for the fleet's scaling policy (:mod:`.queuetime`): published every
    #: :data:`QUEUE_TIME_PERIOD` seconds when set
    queue_time: QueueTimeOptions | None = None


#: seconds between two queue-time publications (CloudWatch's target-tracking alarms look at one-minute periods)
QUEUE_TIME_PERIOD = 60.0
QUEUE_TIME_STATE = "/var/lib/tritonfleet/watchdog/queue-time.json"


@dataclass(frozen=True)
class QueueTimeOptions:
    """What :func:`.queuetime.main_once` needs: the servers' metrics URLs, the dimensions, its state file."""

    urls: tuple[str, ...]
    fleet: str
    family: str
    state: str = QUEUE_TIME_STATE


@dataclass
class _Server:
    name: str
    container: str = ""
    url: str | None = None
    pid: int = 0
    running: bool = False
    restarts: int = 0
    rss: int = 0
    procs: set[int] | None = field(default_factory=set)  # None: not readable this pass
    view: dict[str, Any] = field(default_factory=dict)


class WatchRun:
    """The loop's state between passes, and one pass (:meth:`once`): probe, decide, act, write."""

    def __init__(self, options: Options, runner: Runner = run_command, fetcher: Fetcher = fetch,
                 reader: Reader = read_text, clock: Callable[[], float] = time.time,
                 out: Any = None, killer: Callable[[int, int], None] = os.kill,
                 autoscaling: Callable[[str, str | None], Any] = autoscaling_client,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.options = options
        self.watchdog = Watchdog(options.config.policy)
        self.run, self.fetch, self.read, self.clock = runner, fetcher, reader, clock
        self.out = out
        self.kill, self.autoscaling, self.sleep = killer, autoscaling, sleep
        self.stop = threading.Event()
        self.started = clock()
        self.servers: dict[str, _Server] = {}
        self.probes: dict[str, str] = {}
        self.neuron_totals: dict[str, int] = {}
        self.exporter_last: dict[str, int] | None = None
        self.gpu_xid = 0
        self.gpu_ecc: int | None = None
        self.kernel_cursor: str | None = None
        self.foreign: dict[int, list[int]] = {}
        self.instance: tuple[str, str] | None = None  # (instance id, region) from IMDS
        self.actions: deque[dict[str, Any]] = deque(maxlen=RECENT_ACTIONS)
        self._oneshot_config: str | None = None
        self._load_recent()

    # ... the journal

    def say(self, line: str) -> None:
        stream = self.out or sys.stdout
        stream.write(_line(line, 1000) + "\n")
        stream.flush()

    def _status(self, probe: str, status: str) -> None:
        """Record a probe's status; a change to or from an error is one journal line."""
        before = self.probes.get(probe)
        self.probes[probe] = status
        if status != before and (status.startswith("error") or (before or "").startswith("error")):
            self.say(f"watchdog: probe {probe}: {status}")

    # ... the probes

    def _tool(self, probe: str, argv: Sequence[str], timeout: float = TOOL_TIMEOUT,
              partial: bool = False) -> str | None:
        """The tool's stdout; None when the tool is not on this host (skipped). ProbeError when it fails
        (``partial``: output cut short by the timeout is what was asked for)."""
        rc, out, err = self.run(list(argv), timeout)
        if rc == 127:
            self._status(probe, "skipped: not on this host")
            return None
        if rc != 0 and not (partial and rc == 124):
            first = next((x for x in err.splitlines() if x.strip()), "") or f"exit status {rc}"
            raise ProbeError(f"{argv[0]}: {_line(first)}")
        return out

    def _containers(self) -> list[dict[str, Any]] | None:
        ids = self._tool("docker", ["docker", "ps", "-aq", "--filter", TRITON_FILTER])
        if ids is None:
            return None
        found = ids.split()
        if not found:
            return []
        argv = ["docker", "inspect", "--format", INSPECT_FORMAT, *found]
        rc, out, err = self.run(argv, TOOL_TIMEOUT)
        containers = parse_inspect(out) if rc in (0, 1) else []
        if rc != 0 and not containers:  # rc 1 with output: a container removed since the list
            first = next((x for x in err.splitlines() if x.strip()), "") or f"exit status {rc}"
            raise ProbeError(f"docker inspect: {_line(first)}")
        return containers

    def _discover(self) -> None:
        """Which servers there are, their containers, processes and restart counts (docker). When docker does
        not answer, what the last pass knew stands (with live-restore the containers run on meanwhile)."""
        try:
            containers = self._containers()
            if containers is not None:
                self._status("docker", "ok")
        except Exception as exc:  # noqa: BLE001
            self._status("docker", f"error: {describe_error(exc)}")
            containers = None
        for s in self.servers.values():
            s.view = {"problems": []}
        if containers is None:
            return
        seen = set()
        for c in containers:
            labels = c.get("Labels") or {}
            container = str(c["Name"]).lstrip("/")
            name = str(labels.get(LABEL_SERVER) or container)
            s = self.servers.setdefault(name, _Server(name, view={"problems": []}))
            s.container = container
            s.url = endpoint_url(str(labels.get(LABEL_ENDPOINT, ""))) or s.url
            pid = c.get("Pid")
            s.pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else 0
            s.running = c.get("Running") is True and s.pid > 0
            count = c.get("RestartCount")
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                s.restarts = count
            seen.add(name)
        for name in set(self.servers) - seen:
            del self.servers[name]  # its container was removed (a new placement): no longer watched

    def _cgroup(self, s: _Server) -> tuple[str, str]:
        text = self.read(f"{self.options.proc}/{s.pid}/cgroup")
        found = cgroup_path(text)
        if found is None:
            raise ProbeError(f"/proc/{s.pid}/cgroup: no memory cgroup in it")
        version, path = found
        root = self.options.cgroup_root
        return version, (f"{root}{path}" if version == "v2" else f"{root}/memory{path}").rstrip("/")

    def _memory(self, s: _Server) -> None:
        """The container's memory and processes from its cgroup (kept as they were when it is not running)."""
        if not s.running:
            s.procs = set()
            return
        try:
            version, where = self._cgroup(s)
            s.rss = memory_from_stat(version, self.read(f"{where}/memory.stat"))
            s.procs = {int(p) for p in self.read(f"{where}/cgroup.procs").split() if p.isdigit()} | {s.pid}
        except Exception as exc:  # noqa: BLE001 - a memory not known this pass: the last one stands
            s.procs = None
            s.view["problems"].append(f"memory: {describe_error(exc)}")

    def _header(self) -> dict[str, str]:
        path = self.options.header_file
        if not path:
            return {}
        from .live import read_header
        from .manifest import SyncError

        try:
            name, value = read_header(path)
        except SyncError as exc:
            self._status("repository header", f"error: {exc}")
            return {}
        self._status("repository header", "ok")
        return {name: value}

    def _ready(self, s: _Server, header: Mapping[str, str]) -> tuple[bool, dict[str, bool]]:
        if not s.url:
            s.view["problems"].append("no endpoint known")
            return False, {}
        try:
            code, _ = self.fetch("GET", f"{s.url}/v2/health/ready", {}, None, HTTP_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - no answer (OSError) or a broken one (http.client's)
            s.view["problems"].append(f"readiness: {describe_error(exc)}")
            return False, {}
        if code != 200:
            return False, {}
        try:
            code, body = self.fetch("POST", f"{s.url}/v2/repository/index", dict(header), b"{}", HTTP_TIMEOUT)
            if code != 200:
                raise ProbeError(f"HTTP {code}: {_line(body, 120)}")
            return True, model_states(body)
        except Exception as exc:  # noqa: BLE001 - the server answers, its models are not known this pass
            s.view["problems"].append(f"repository index: {describe_error(exc)}")
            return True, {}

    def _server_samples(self) -> list[ServerSample]:
        header = self._header() if self.servers else {}
        samples = []
        for name, s in sorted(self.servers.items()):
            self._memory(s)
            ready, models = self._ready(s, header)
            at = self.clock()
            samples.append(ServerSample(name, at, ready, s.restarts, s.rss, models))
            s.view.update({"container": s.container, "url": s.url, "ready": ready, "restarts": s.restarts,
                           "rss_bytes": s.rss, "models": models})
        return samples

    def _neuron(self) -> bool:
        """Neuron counters (exporter, else one neuron-monitor run) and foreign cores; False: no Neuron tools."""
        try:
            text = self._tool("neuron-ls", ["neuron-ls", "--json-output"])
            if text is None:
                self.foreign = {}
                return False
            held = probes.parse_neuron_ls_pids(text)
            unknown = [s.name for s in self.servers.values() if s.running and s.procs is None]
            if unknown and held:
                raise ProbeError(f"neuron-ls: the processes of server {', '.join(sorted(unknown))} cannot be "
                                 "read, so which cores are foreign is not known")
            ours = {p for s in self.servers.values() for p in (s.procs or ())} | \
                {s.pid for s in self.servers.values() if s.pid}
            self.foreign = probes.foreign(held, ours)
            self._status("neuron-ls", "ok")
        except Exception as exc:  # noqa: BLE001
            self.foreign = {}
            self._status("neuron-ls", f"error: {describe_error(exc)}")
        try:
            self._neuron_counters()
        except Exception as exc:  # noqa: BLE001 - a probe that fails is its status, not the pass's end
            self._status("neuron-monitor", f"error: {describe_error(exc)}")
        return True

    def _neuron_counters(self) -> None:
        url = self.options.neuron_exporter
        if url:
            try:
                code, body = self.fetch("GET", url, {}, None, HTTP_TIMEOUT)
                if code != 200:
                    raise ProbeError(f"neuron exporter: HTTP {code}")
                now = parse_exporter(body)
            except Exception as exc:  # noqa: BLE001 - then neuron-monitor itself, once
                self.exporter_last = None  # its next answer is a baseline: what the fallback saw is counted
                self._status("neuron exporter", f"error: {describe_error(exc)}")
            else:
                last, self.exporter_last = self.exporter_last, now
                grown = {} if last is None else {
                    k: (v - last.get(k, 0) if v >= last.get(k, 0) else v) for k, v in now.items()}
                self._add_neuron(now, grown)
                self._status("neuron exporter", "ok")
                self._status("neuron-monitor", "ok (from the exporter)")
                return
        text = self._tool("neuron-monitor", ["neuron-monitor", "-c", self._oneshot()], ONESHOT_SECONDS,
                          partial=True)
        if text is None:
            return
        counts = probes.parse_neuron_monitor(text)
        self._add_neuron(counts, counts)
        self._status("neuron-monitor", "ok (one run)")

    def _add_neuron(self, names: Mapping[str, int], grown: Mapping[str, int]) -> None:
        for name in names:
            self.neuron_totals.setdefault(name, 0)
        self.neuron_totals = probes.accumulate(self.neuron_totals, grown)

    def _oneshot(self) -> str:
        if self._oneshot_config is None:
            directory = os.path.dirname(os.path.abspath(self.options.state or STATE_FILE))
            path = os.path.join(directory, "neuron-monitor-oneshot.json")
            os.makedirs(directory, exist_ok=True)
            write_textfile(path, json.dumps(ONESHOT_CONFIG) + "\n")
            self._oneshot_config = path
        return self._oneshot_config

    def _gpu(self) -> None:
        try:
            fields = ",".join(probes.GPU_QUERY_FIELDS)
            text = self._tool("nvidia-smi", ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
            if text is None:
                return
            self.gpu_ecc = probes.gpu_ecc_total(probes.parse_nvidia_smi_errors(text))
            self._status("nvidia-smi", "ok")
        except Exception as exc:  # noqa: BLE001
            self._status("nvidia-smi", f"error: {describe_error(exc)}")
        try:
            self._kernel_log()
        except Exception as exc:  # noqa: BLE001
            self._status("kernel log", f"error: {describe_error(exc)}")

    def _kernel_log(self) -> None:
        where = [f"--after-cursor={self.kernel_cursor}"] if self.kernel_cursor else [f"--since=@{int(self.started)}"]
        text = self._tool("kernel log", ["journalctl", "-k", "-q", "--no-pager", "-o", "cat", "--show-cursor",
                                         "-n", str(KERNEL_LINES), *where])
        if text is None:
            return
        lines = text.splitlines()
        if lines and lines[-1].startswith("-- cursor: "):
            self.kernel_cursor = lines.pop()[len("-- cursor: "):].strip()
        self.gpu_xid += probes.count_xids(probes.parse_xid_events("\n".join(lines)))
        self._status("kernel log", "ok")

    def probe(self) -> tuple[list[ServerSample], HostSample]:
        """This pass's samples (never raises for a probe: see the module's docstring)."""
        self._discover()
        samples = self._server_samples()
        self._neuron()
        self._gpu()
        host = HostSample(self.clock(), dict(self.neuron_totals), dict(self.foreign), self.gpu_xid,
                          self.gpu_ecc or 0)
        return samples, host

    # ... the effects

    def act(self, action: Action) -> str:
        """Carry out one action: ``done`` or ``failed: <why>`` (journal lines for both)."""
        self.say(action.journal_line())
        try:
            if action.kind == "restart":
                self._restart(action)
            elif action.kind == "replace":
                self._replace()
            elif action.kind == "free-cores":
                self._free_cores(action)
            outcome = "done"
        except Exception as exc:  # noqa: BLE001 - an action that fails is a journal line, not the end
            outcome = f"failed: {describe_error(exc)}"
            self.say(f"watchdog: {action.kind} {'server ' + action.server if action.server else 'host'} failed: "
                     f"{describe_error(exc)}")
        self.actions.append({"at": self.clock(), "kind": action.kind, "server": action.server,
                             "reason": action.reason, "detail": action.detail, "outcome": outcome})
        return outcome

    def _restart(self, action: Action) -> None:
        s = self.servers.get(action.server or "")
        if s is None or not s.container:
            raise ProbeError(f"no container known for server {action.server}")
        drain = self.options.config.drain_command
        if drain:
            port = (s.url or "").rpartition(":")[2]
            argv = [a.format(server=s.name, container=s.container, port=port) for a in drain]
            rc, _, err = self.run(argv, self.options.config.drain_timeout_seconds)
            if rc != 0:
                why = _line(next((x for x in err.splitlines() if x.strip()), f"exit status {rc}"))
                self.say(f"watchdog: drain of server {s.name} failed ({why}); restarting it anyway")
        rc, _, err = self.run(["docker", "restart", "--time", str(DOCKER_STOP_SECONDS), s.container],
                              RESTART_TIMEOUT)
        if rc != 0:
            raise ProbeError(f"docker restart {s.container}: "
                             f"{_line(next((x for x in err.splitlines() if x.strip()), f'exit status {rc}'))}")

    def _imds(self) -> tuple[str, str]:
        """(instance id, region) from IMDSv2 (:class:`.aws.Imds` through the fetcher), asked once; ProbeError (one
        line naming the metadata's address) when it does not answer them."""
        if self.instance is None:
            def fetch(method: str, url: str, headers: dict[str, str], timeout: float) -> tuple[int, str]:
                return self.fetch(method, url, headers, b"" if method == "PUT" else None, timeout)

            try:
                self.instance = aws.Imds(timeout=HTTP_TIMEOUT, fetch=fetch, token_ttl=IMDS_TOKEN_TTL).identity()
            except aws.ImdsError as exc:
                raise ProbeError(str(exc)) from None
        return self.instance

    def _replace(self) -> None:
        instance_id, region = self._imds()
        client = self.autoscaling(self.options.region or region, self.options.endpoint_url)
        client.set_instance_health(InstanceId=instance_id, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False)
        self.say(f"watchdog: instance {instance_id} marked Unhealthy in its Auto Scaling group")

    def _gone(self, pid: int) -> bool:
        try:
            self.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:
            with open(f"{self.options.proc}/{pid}/stat", encoding="utf-8", errors="replace") as f:
                state = f.read().rpartition(")")[2].split()
        except OSError:
            return True
        return bool(state) and state[0] in ("Z", "X")  # a zombie holds no device any more

    def _free_cores(self, action: Action) -> None:
        if not self.options.config.policy.allow_free_cores:
            raise ProbeError("free-cores not allowed (allow_free_cores is false)")
        ours = {p for s in self.servers.values() for p in (s.procs or ())} | \
            {s.pid for s in self.servers.values() if s.pid}
        refused = [p for p in action.pids if p <= 1 or p == os.getpid() or p in ours]
        if refused:
            raise ProbeError(f"refused to end pid {', '.join(map(str, refused))} (ours, init or this service)")
        for pid in action.pids:
            try:
                self.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + self.options.kill_grace
            while not self._gone(pid) and time.monotonic() < deadline:
                self.sleep(0.1)
            if not self._gone(pid):
                self.say(f"watchdog: pid {pid} still there {self.options.kill_grace:g} s after SIGTERM: SIGKILL")
                try:
                    self.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # ... one pass, the files, the loop

    def once(self) -> list[Action]:
        """One pass: probe, decide, act, write the textfile and the state file."""
        samples, host = self.probe()
        actions = self.watchdog.observe(samples, host)
        for action in actions:
            self.act(action)
        now = self.clock()
        for s in self.servers.values():
            if s.view:
                s.view["restarts_last_hour"] = self.watchdog.restarts_in_last_hour(s.name, now)
        self._write(now)
        return actions

    def state(self, now: float) -> dict[str, Any]:
        return {"schema": STATE_SCHEMA, "at": now, "interval": self.options.interval, "started": self.started,
                "servers": {n: s.view for n, s in sorted(self.servers.items()) if s.view},
                "host": {"neuron_errors": dict(sorted(self.neuron_totals.items())),
                         "foreign_core_pids": {str(p): c for p, c in sorted(self.foreign.items())},
                         "gpu_xid": self.gpu_xid, "gpu_ecc_dbe": self.gpu_ecc or 0,
                         "probes": dict(sorted(self.probes.items()))},
                "actions": list(self.actions)}

    def _write(self, now: float) -> None:
        if self.options.textfile_dir:
            try:
                write_textfile(os.path.join(self.options.textfile_dir, TEXTFILE),
                               textfile(self.watchdog.counts, self.watchdog.last_run or now))
            except OSError as exc:
                self._status("textfile", f"error: {_line(exc)}")
        if self.options.state:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(self.options.state)), exist_ok=True)
                write_textfile(self.options.state, json.dumps(self.state(now), indent=1, sort_keys=True) + "\n")
            except OSError as exc:
                self._status("state file", f"error: {_line(exc)}")

    def _load_recent(self) -> None:
        """The recent actions of the state file a previous run left (none when it cannot be read)."""
        if not self.options.state:
            return
        try:
            with open(self.options.state, encoding="utf-8") as f:
                before = json.load(f)
        except (OSError, ValueError):
            return
        if isinstance(before, dict) and isinstance(before.get("actions"), list):
            self.actions.extend(a for a in before["actions"] if isinstance(a, dict))

    def loop(self, once: bool = False) -> None:
        """Pass after pass, ``interval`` apart (at least a tenth of it between the end of one and the start of
        the next), until :attr:`stop` is set (SIGTERM); a pass that fails is a journal line."""
        published = -math.inf
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.once()
            except Exception as exc:  # noqa: BLE001 - the loop outlives any pass
                self.say(f"watchdog: pass failed: {describe_error(exc)}")
            if self.options.queue_time and (once or started - published >= QUEUE_TIME_PERIOD - 1):
                published = started
                self.publish_queue_time()
            if once:
                return
            interval = self.options.interval
            self.stop.wait(max(interval - (time.monotonic() - started), interval / 10))


    def publish_queue_time(self) -> None:
        """The servers' queue time per request to CloudWatch (:func:`.queuetime.main_once`); its lines go to the
        journal only when something failed (a healthy host says nothing every minute)."""
        from . import queuetime

        q = self.options.queue_time
        assert q is not None
        try:
            code, lines = queuetime.main_once(q.urls, q.fleet, q.family, q.state, region=self.options.region,
                                              endpoint_url=self.options.endpoint_url)
        except Exception as exc:  # noqa: BLE001 - the loop outlives any publication
            code, lines = 1, [describe_error(exc)]
        if code != 0:
            self.say("watchdog: queue time: " + "; ".join(lines))


def main(options: Options, once: bool) -> int:
    """The service: SIGTERM and SIGINT end it after the pass in flight."""
    run = WatchRun(options)

    def stop(signum, frame) -> None:
        run.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    policy = options.config.policy
    run.say(f"watchdog: started, every {options.interval:g} s; restarts at most {policy.max_restarts_per_hour} an "
            f"hour per server; free-cores {'allowed' if policy.allow_free_cores else 'not allowed'}; drain hook "
            f"{'set' if options.config.drain_command else 'none'}")
    run.loop(once=once)
    return 0
