"""The `tritonfleet` command line."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tritonfleet")
def main() -> None:
    """Provision and operate fleets of Triton Inference Server hosts."""


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
