"""The host agent (``tritonfleet-agent``, ``tritonfleet/agent/``) in ``/opt/tritonfleet/venv``, for the roles
that run it on hosts: the S3 model sync (``models_s3_uri``), QA (``qa_suites``, which adds the
runner's extra: numpy, tritonclient and friends; live reloads add the ``live`` extra, tritonclient's gRPC
client) and monitoring (its Python, with prometheus_client, runs
neuron-monitor-prometheus.py on Neuron hosts).

Its wheelhouse is built on the controller (``tritonfleet/wheelhouse.py``): pure wheels for every host
Python, or, with QA or live reloads, the wheels for this host's Python and machine. It is uploaded and installed with
``pip --no-index`` (hosts need no index), again only when its content hash changes. Preflight checks that
the host has a Python the agent runs on (3.9 to 3.12) and that the wheelhouse can be built.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pyinfra import host
from pyinfra.api import deploy

from roles import operations as ops
from roles.context import config_for
from roles.facts.models import AgentState
from roles.models import sync_mode
from tritonfleet import hostcontract as hc
from tritonfleet import wheelhouse
from tritonfleet.config import FieldProblem, HostConfig, Role, RoleSettings, matching


class Settings(RoleSettings):
    python: str = Field("python3", description=(
        "Host interpreter (3.9 to 3.12) the agent's venv is made with, e.g. python3.11 on Amazon Linux."))

    _python = field_validator("python")(matching(r"^(/[\w./-]+|python3(\.\d+)?)$",
                                                 "expected python3, python3.X or an absolute path"))


def wanted(cfg: HostConfig) -> tuple[bool, bool]:
    """(the host needs the agent, with the QA extra). The monitoring role asks for it itself
    (:func:`install_for`), in the runs that include it."""
    qa = bool(cfg.qa.suites)
    return sync_mode(cfg) or qa, qa


def live_reload(cfg: HostConfig) -> bool:
    """The sync reloads the running servers (explicit model control) through Triton's gRPC repository API:
    the agent's ``live`` extra (tritonclient[grpc], platform wheels)."""
    return sync_mode(cfg) and cfg.triton.model_control_mode == "explicit"


def platform_wheels(cfg: HostConfig) -> bool:
    """The wheelhouse is built for this host's Python and machine (QA or live reloads need platform wheels)."""
    return wanted(cfg)[1] or live_reload(cfg)


def extras(cfg: HostConfig, python: str) -> str:
    """The agent's extras for this host: QA's (which include the gRPC client), else ``live``, else none."""
    return wheelhouse.qa_extras(python) if wanted(cfg)[1] else "live" if live_reload(cfg) else ""


def _state(h, cfg: HostConfig) -> dict:
    return h.get_fact(AgentState, python=cfg.agent.python, venv=hc.AGENT_VENV)


def _wheelhouse(cfg: HostConfig, state: dict) -> wheelhouse.Wheelhouse:
    return wheelhouse.build((state["python"], state["machine"]) if platform_wheels(cfg) else None)


def _host_checks(h, cfg: HostConfig) -> None:
    need, qa = wanted(cfg)
    if need:
        _check(h, cfg, qa)


def _check(h, cfg: HostConfig, qa: bool, field: tuple[str, object] | None = None) -> None:
    state = _state(h, cfg)
    python = state["python"]
    if python not in wheelhouse.PYTHONS:
        have = f"{cfg.agent.python} is {python}" if python else f"there is no {cfg.agent.python}"
        raise FieldProblem("agent_python", cfg.agent.python,
                           f"the host agent needs Python {wheelhouse.PYTHONS[0]} to {wheelhouse.PYTHONS[-1]} on "
                           f"the host, and {have} (install one, e.g. python3.11, and set agent_python)")
    if platform_wheels(cfg) and state["machine"] not in wheelhouse.MACHINES:
        what, (name, value) = (("the QA runner", ("qa_suites", cfg.qa.suites)) if qa else
                               ("live reloads (gRPC)", ("models_s3_uri", cfg.models.s3_uri)))
        raise FieldProblem(name, value, f"{what} have no wheels for machine {state['machine']!r} "
                           f"(supported: {', '.join(wheelhouse.MACHINES)})")
    try:
        _wheelhouse(cfg, state)
    except (wheelhouse.WheelhouseError, OSError) as exc:
        key, value = field or (("qa_suites", cfg.qa.suites) if qa else ("models_s3_uri", cfg.models.s3_uri))
        raise FieldProblem(key, value, f"the host agent's wheelhouse cannot be built on this controller: "
                           f"{exc}") from None


ROLE = Role("agent", Settings, "the host agent (S3 model sync, QA runner), installed from a wheelhouse",
            order=55, host_checks=_host_checks)


@deploy("Host agent")
def agent() -> None:
    cfg = config_for()
    need, qa = wanted(cfg)
    if not need:
        host.noop("no role here runs the host agent (models_s3_uri and qa_suites are not set)")
        return
    _install(cfg, qa)


def install_for(cfg: HostConfig, field: str, value: object) -> None:
    """The agent for another role's deploy (``field``: the setting that wants it, named in errors): checked
    while the deploy is built (every host's operations are collected before any runs, so a refusal changes
    nothing), then installed like :func:`agent` installs it (the same wheelhouse and extras)."""
    from roles.preflight import PreflightError

    try:
        _check(host, cfg, wanted(cfg)[1], (field, value))
    except FieldProblem as exc:
        raise PreflightError(f"preflight failed, nothing was changed:\n  {host.name}: {exc.field} "
                             f"{exc.value!r}: {exc.message}") from None
    _install(cfg, wanted(cfg)[1])


def _install(cfg: HostConfig, qa: bool) -> None:
    state = _state(host, cfg)
    wh = _wheelhouse(cfg, state)
    if state["installed"] != wh.digest:
        ops.files.sync_tree(name="Host agent wheelhouse", src=str(wh.path), dest=hc.WHEELHOUSE_DIR,
                            exclude_suffixes=("DONE",))
    wanted_extras = extras(cfg, state["python"])
    requirement = f"{wheelhouse.PACKAGE}{f'[{wanted_extras}]' if wanted_extras else ''}=={wh.version}"
    ops.models.agent_install(name=f"Host agent ({requirement})", python=cfg.agent.python, venv=hc.AGENT_VENV,
                             wheelhouse=hc.WHEELHOUSE_DIR, digest=wh.digest, requirement=requirement)
