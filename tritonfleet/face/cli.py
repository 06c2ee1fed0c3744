"""The `tritonfleet` command line.

Logging: every module logs to ``logging.getLogger(__name__)``; the command line shows it on stderr. Progress
lines (INFO of ``tritonfleet.*``: a rollout's batches and hosts) as they are; ``-v`` adds tritonfleet's DEBUG
lines and ``-vv`` every library's (boto3, paramiko...), each prefixed ``<logger>: <level>:``; warnings and
errors always show, prefixed the same way.
"""

from __future__ import annotations

import logging
import sys

import click

#: The name of the handler :func:`configure_logging` puts on the root logger (one at a time).
HANDLER = "tritonfleet-cli"


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record comes (click's test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.set_name(HANDLER)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _Format(logging.Formatter):
    """tritonfleet's INFO lines as they are (what users read); everything else ``<logger>: <level>: message``."""

    def format(self, record: logging.LogRecord) -> str:
        plain = record.levelno == logging.INFO and (record.name == "tritonfleet"
                                                    or record.name.startswith("tritonfleet."))
        text = super().format(record)
        return text if plain else f"{record.name}: {record.levelname.lower()}: {text}"


def configure_logging(verbose: int = 0):
    """Show log records on stderr: tritonfleet's INFO and up (``verbose`` 1: its DEBUG too; 2: every logger's
    DEBUG) and every other logger's WARNING and up. Returns a function that undoes it."""
    root, ours = logging.getLogger(), logging.getLogger("tritonfleet")
    before = root.level, ours.level
    for old in [h for h in root.handlers if h.get_name() == HANDLER]:
        root.removeHandler(old)
    handler = _Stderr()
    handler.setFormatter(_Format())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING)
    ours.setLevel(logging.DEBUG if verbose >= 1 else logging.INFO)

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(before[0])
        ours.setLevel(before[1])

    return undo


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tritonfleet")
@click.option("--verbose", "-v", count=True,
              help="Debug lines on stderr: -v tritonfleet's (SSH commands, AWS retries, target group waits), "
                   "-vv every library's too (boto3, paramiko).")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Provision and operate fleets of Triton Inference Server hosts."""
    ctx.call_on_close(configure_logging(verbose))


@main.command()
@click.option("--inventory", "-i", envvar="TRITONFLEET_INVENTORY", required=True,
              help="pyinfra inventory file (or set TRITONFLEET_INVENTORY).")
@click.option("--previous", is_flag=True, help="Also show what a rollback would return to (the host record).")
@click.option("--exporters", is_flag=True, help=(
    "Also show whether each host's exporters (and Triton metrics) are up: from Prometheus with --prometheus, "
    "else probed from here."))
@click.option("--prometheus", envvar="TRITONFLEET_PROMETHEUS", default=None, metavar="URL",
              help="Prometheus to read exporter state from (implies --exporters; or set TRITONFLEET_PROMETHEUS).")
def status(inventory: str, previous: bool, exporters: bool, prometheus: str | None) -> None:
    """Table per host and Triton server: image, devices, cores, state, uptime, ready models, endpoint,
    the host watchdog's recent actions where it runs (and exporters with --exporters).

    Exits non-zero when a host is out of reach or a server is not serving."""
    from tritonfleet.face.status import fleet_status, print_status

    try:
        rows = fleet_status(inventory, previous=previous, exporters=exporters or bool(prometheus),
                            prometheus=prometheus)
    except SystemExit as exc:  # an inventory that refuses to load (e.g. sandbox not up)
        raise click.ClickException(str(exc)) from None
    except (OSError, SyntaxError) as exc:
        raise click.ClickException(f"cannot read inventory {inventory}: {exc}") from None
    print_status(rows, previous=previous)
    if not all(r.get("serving") for r in rows):
        raise SystemExit(1)


def _register() -> None:
    # Sub-command groups live next to the logic they drive; importing them here keeps
    # `tritonfleet --help` complete while each module stays importable on its own.
    from tritonfleet.face.compat import compat
    from tritonfleet.face.fleet import fleet
    from tritonfleet.face.models import models
    from tritonfleet.face.monitoring import monitoring
    from tritonfleet.face.plan import plan
    from tritonfleet.face.qa import qa
    from tritonfleet.face.rollout import rollout
    from tritonfleet.genmodel.cli import gen_model
    from tritonfleet.sandbox.cli import sandbox

    main.add_command(sandbox)
    main.add_command(gen_model)
    main.add_command(qa)
    main.add_command(rollout)
    main.add_command(fleet)
    main.add_command(monitoring)
    main.add_command(plan)
    main.add_command(compat)
    main.add_command(models)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
