"""The `tritonfleet` command line."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tritonfleet")
def main() -> None:
    """Provision and operate fleets of Triton Inference Server hosts."""


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
    """Table per host and Triton server: image, devices, cores, state, uptime, ready models, endpoint
    (and exporters with --exporters).

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
    from tritonfleet.face.fleet import fleet
    from tritonfleet.face.monitoring import monitoring
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


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
