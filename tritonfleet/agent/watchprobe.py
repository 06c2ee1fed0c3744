"""The host watchdog's readers (:mod:`.watchrun` is the service that uses them): the config file, the host's
tools and files, and the parsers of what they answer. Standard library and boto3 only (Python 3.9), like the rest
of the agent: it cannot import :mod:`tritonfleet.hostcontract`, so the few names of that contract the watchdog
needs are repeated below (a test holds them equal). Nothing here keeps state between passes or acts on the host.

The defaults of the service's injectable parts (see :mod:`.watchrun`): :func:`run_command` (the *runner*:
``argv, timeout -> (rc, stdout, stderr)``, 127 when the tool is not on this host, 124 when it ran past its
timeout, with what it printed until then), :func:`fetch` (the *fetcher*: ``method, url, headers, body, timeout
-> (status, text)``, an OSError when nothing answers), :func:`read_text` (the *reader*) and
:func:`autoscaling_client`. The parsers (:func:`parse_inspect`, :func:`endpoint_url`, :func:`model_states`,
:func:`cgroup_path`, :func:`memory_from_stat`, :func:`parse_exporter`) raise :class:`.watchpolicy.ProbeError`
(one line) for an answer they cannot read; :func:`describe_error` is the one line of any failure.

**The config file** (``--policy``, ``/etc/tritonfleet/watchdog.json``): the policy data of
:meth:`.watchpolicy.Policy.from_data`, plus the runtime's own keys::

    {"leak": ["restart", "report"], "max_restarts_per_hour": 3, ...,
     "drain_command": ["/usr/local/bin/lb-drain", "{server}", "{port}"], "drain_timeout_seconds": 60}

``drain_command`` (default none) is the load-balancer hook: run before each restart, ``{server}``,
``{container}`` and ``{port}`` (the server's HTTP port) replaced in its arguments, ``drain_timeout_seconds``
at most; when it fails the server is restarted anyway (it is failing already) and the journal says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import aws
from .queuetime import parse_exposition
from .watchpolicy import Policy, PolicyError, ProbeError

# -- the host contract (tritonfleet/hostcontract.py; the agent cannot import it: it needs pydantic) ---------
LABEL_SERVER = "com.tritonfleet.server"
LABEL_ENDPOINT = "com.tritonfleet.endpoint"
TRITON_FILTER = "label=com.tritonfleet.role=triton"
REPOSITORY_HEADER_FILE = "/etc/tritonfleet/repository-header"

POLICY_FILE = "/etc/tritonfleet/watchdog.json"
NEURON_BIN = "/opt/aws/neuron/bin"

DRAIN_TIMEOUT = 60.0  # the config's default drain_timeout_seconds
MAX_BODY = 4 << 20  # the most read of an HTTP answer or a file

# the fields of `docker inspect` the watchdog reads; never the command line (it carries the repository secret)
INSPECT_FORMAT = ('{"Id":{{json .Id}},"Name":{{json .Name}},"RestartCount":{{json .RestartCount}},'
                  '"Pid":{{json .State.Pid}},"Running":{{json .State.Running}},'
                  '"Restarting":{{json .State.Restarting}},"Labels":{{json .Config.Labels}}}')
RUNTIME_KEYS = ("drain_command", "drain_timeout_seconds")

if TYPE_CHECKING:  # the injectable parts of the service (see the module's docstring)
    Runner = Callable[[Sequence[str], float], tuple[int, str, str]]
    Fetcher = Callable[[str, str, Mapping[str, str], bytes | None, float], tuple[int, str]]
    Reader = Callable[[str], str]


def _line(text: object, limit: int = 200) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[:limit - 3] + "..."


# -- the config file -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """The config file: the policy, and the runtime's drain hook."""

    policy: Policy = field(default_factory=Policy)
    drain_command: tuple[str, ...] = ()
    drain_timeout_seconds: float = DRAIN_TIMEOUT


def read_config(data: Any) -> Config:
    """The :class:`Config` of the config file's data; :class:`.watchpolicy.PolicyError` (one line naming the
    field) when it cannot be used."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise PolicyError(f"watchdog policy: must be an object of conditions and settings, got {data!r}")
    rest = {k: v for k, v in data.items() if k not in RUNTIME_KEYS}
    drain = data.get("drain_command")
    if drain is None:
        drain = []
    if not isinstance(drain, list) or not all(isinstance(a, str) and a and "\0" not in a for a in drain):
        raise PolicyError(f"watchdog policy: drain_command: must be a list of non-empty strings (the "
                          f"command and its arguments), got {drain!r}")
    if drain and not os.path.isabs(drain[0]):
        raise PolicyError(f"watchdog policy: drain_command: the command must be an absolute path, "
                          f"got {drain[0]!r}")
    for arg in drain:
        try:
            arg.format(server="s", container="c", port=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise PolicyError(f"watchdog policy: drain_command: {arg!r}: only {{server}}, {{container}} and "
                              f"{{port}} are replaced ({_line(exc)})") from None
    timeout = data.get("drain_timeout_seconds", DRAIN_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 1 <= timeout <= 3600:
        raise PolicyError(f"watchdog policy: drain_timeout_seconds: must be 1 to 3600, got {timeout!r}")
    try:
        policy = Policy.from_data(rest)
    except PolicyError as exc:
        if "unknown field" in str(exc):
            raise PolicyError(f"{exc}; runtime: {', '.join(RUNTIME_KEYS)}") from None
        raise
    return Config(policy, tuple(drain), float(timeout))


def load_config(path: str) -> Config:
    """:func:`read_config` of a JSON file; PolicyError when it cannot be read (the command line names the file)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise PolicyError(f"watchdog policy: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PolicyError(f"watchdog policy: not valid JSON: {_line(exc)}") from None
    return read_config(data)


# -- the host's tools and files --------------------------------------------------------------------------

def run_command(argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
    """Run a tool (searched on PATH and in the Neuron tools' directory, which systemd's PATH lacks):
    ``(rc, stdout, stderr)``; 127 when it is not on this host, 124 (with its output so far) when it runs past
    ``timeout`` and is killed."""
    name = argv[0]
    search = os.pathsep.join([os.environ.get("PATH") or os.defpath, NEURON_BIN])
    exe = name if os.sep in name else shutil.which(name, path=search)
    if exe is None or not os.path.exists(exe):
        return 127, "", f"{name}: not found"
    try:
        done = subprocess.run([exe, *argv[1:]], stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, bytes) else b""
        return 124, out.decode("utf-8", "replace"), f"{name}: no answer within {timeout:g} s"
    except OSError as exc:
        return 126, "", f"{name}: {exc.strerror or exc}"
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback and IMDS: never a proxy


def fetch(method: str, url: str, headers: Mapping[str, str], body: bytes | None,
          timeout: float) -> tuple[int, str]:
    """One HTTP request: (status, text); an OSError when nothing answers."""
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read(MAX_BODY).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        try:
            text = exc.read(MAX_BODY).decode("utf-8", "replace")
        except OSError:
            text = ""
        return exc.code, text


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(MAX_BODY)


def autoscaling_client(region: str, endpoint_url: str | None) -> Any:
    """An Auto Scaling client (:func:`.aws.client`) with the instance profile's credentials (boto3's default
    chain), bounded: 5 s to connect, 15 s to answer, 3 attempts (botocore's standard retries)."""
    return aws.client("autoscaling", region=region, endpoint_url=endpoint_url, connect_timeout=5, read_timeout=15,
                      attempts=3, user_agent_extra="tritonfleet-watchdog")


def describe_error(exc: BaseException) -> str:
    """One line for a failed AWS call or anything else (no traceback)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        err = response["Error"]
        return f"{getattr(exc, 'operation_name', 'request')}: {err.get('Code', '?')}: " \
               f"{_line(err.get('Message') or 'no message')}"
    if type(exc).__name__ == "NoCredentialsError":
        return "no AWS credentials (boto3's default chain: environment, config files, instance profile)"
    return f"{type(exc).__name__}: {_line(exc)}" if not isinstance(exc, (ProbeError, OSError)) else _line(exc)


# -- readings --------------------------------------------------------------------------------------------

def parse_inspect(text: str) -> list[dict[str, Any]]:
    """The containers of ``docker inspect --format INSPECT_FORMAT`` (one JSON object a line)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            raise ProbeError(f"docker inspect: not JSON: {_line(line, 80)!r}") from None
        if isinstance(doc, dict) and isinstance(doc.get("Name"), str):
            out.append(doc)
    return out


def endpoint_url(label: str) -> str | None:
    """``http://ADDRESS:PORT`` from an endpoint label ``BIND:PORT`` (a wildcard bind: loopback)."""
    bind, _, port = label.rpartition(":")
    if not port.isdigit():
        return None
    bind = bind.strip("[]")
    if bind in ("", "0.0.0.0", "::"):
        bind = "127.0.0.1"
    return f"http://[{bind}]:{port}" if ":" in bind else f"http://{bind}:{port}"


def model_states(body: str) -> dict[str, bool]:
    """Model -> ready from Triton's repository index: READY (any version) is ready; UNAVAILABLE for another
    reason than ``unloaded`` is not; loading, unloading, unloaded and never loaded are left out."""
    try:
        index = json.loads(body)
    except ValueError:
        raise ProbeError(f"repository index: not JSON: {_line(body, 80)!r}") from None
    if not isinstance(index, list):
        raise ProbeError("repository index: not a list")
    states: dict[str, bool] = {}
    for entry in index:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        name, state = entry["name"], entry.get("state")
        if state == "READY":
            states[name] = True
        elif state == "UNAVAILABLE" and entry.get("reason") != "unloaded":
            states.setdefault(name, False)
    return states


def cgroup_path(proc_cgroup: str) -> tuple[str, str] | None:
    """("v1", path of the memory controller) or ("v2", path) from ``/proc/<pid>/cgroup``. A v1 memory
    controller wins: on a hybrid host (v1 controllers, and systemd's ``0::`` line for the unified hierarchy,
    which has no memory controller there, as in Amazon Linux 2 and the sandbox) memory is accounted in v1."""
    v1 = v2 = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = ("v2", parts[2])
        elif "memory" in parts[1].split(","):
            v1 = ("v1", parts[2])
    return v1 or v2


def memory_from_stat(version: str, text: str) -> int:
    """The server's memory in a cgroup's ``memory.stat``: anon + shmem (v2), total_rss + total_shmem (v1)."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    keys = ("anon", "shmem") if version == "v2" else ("total_rss", "total_shmem")
    if keys[0] not in values:
        raise ProbeError(f"memory.stat: no {keys[0]} in it")
    return sum(values.get(k, 0) for k in keys)


_EXPORTED = {"hardware_ecc_events_total": ("neuron_device_index", "event_type", "device{}.{}"),
             "execution_errors_total": ("runtime_tag", "error_type", "runtime.{}.{}")}


def parse_exporter(text: str) -> dict[str, int]:
    """Neuron error counters from neuron-monitor-prometheus.py's exposition, named as
    :func:`.probes.parse_neuron_monitor` names them: ``hardware_ecc_events_total{neuron_device_index="0",
    event_type="mem_ecc_uncorrected"}`` is ``device0.mem_ecc_uncorrected``,
    ``execution_errors_total{runtime_tag="t",error_type="hardware"}`` is ``runtime.t.hardware``. The text is read
    by :func:`.queuetime.parse_exposition`, a line that is no sample skipped."""
    counts: dict[str, int] = {}
    samples = parse_exposition(text, strict=False).samples
    for sample in samples:
        spec = _EXPORTED.get(sample.name)
        if spec is None:
            continue
        labels = dict(sample.labels)
        where, kind, name = spec
        if not labels.get(where) or not labels.get(kind):
            continue
        value = sample.value
        if value != value or value < 0 or value == float("inf"):
            continue
        key = name.format(labels[where], labels[kind])
        counts[key] = counts.get(key, 0) + int(value)
    if not samples:
        raise ProbeError(f"neuron exporter: no metrics in its answer ({_line(text, 80) or 'empty'})")
    return counts
