"""The `tritonfleet` command line."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tritonfleet")
def main() -> None:
    """Provision and operate fleets of Triton Inference Server hosts."""


@main.command()
@click.option("--inventory", "-i", default="inventories/sandbox.py", show_default=True,
              help="pyinfra inventory file.")
def status(inventory: str) -> None:
    """Table per host and Triton server: image, devices, cores, state, uptime, ready models, endpoint."""
    from tritonfleet.status import fleet_status, print_status

    try:
        rows = fleet_status(inventory)
    except SystemExit as exc:  # an inventory that refuses to load (e.g. sandbox not up)
        raise click.ClickException(str(exc)) from None
    print_status(rows)
    if any("error" in r for r in rows):
        raise SystemExit(1)


def _register() -> None:
    # Sub-command groups live next to the logic they drive; importing them here keeps
    # `tritonfleet --help` complete while each module stays importable on its own.
    from tritonfleet.sandbox.cli import sandbox

    main.add_command(sandbox)
    try:
        from tritonfleet.genmodel.cli import gen_model
    except ImportError:  # pragma: no cover - during bootstrap of the package
        pass
    else:
        main.add_command(gen_model)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
