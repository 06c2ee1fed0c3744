"""``tritonfleet models release|releases|rollout``: the release pointers that pull-mode hosts follow (issue 27).

    tritonfleet models release RELEASE --root s3://BUCKET/PREFIX [--group G] [--endpoint-url URL] [--region R]
                                       [--no-check]
    tritonfleet models releases --root s3://BUCKET/PREFIX
    tritonfleet models rollout RELEASE --inventory INV [--group canary] [--root ...] [--wait 120] [--no-qa]
                                       [--prometheus URL [--bake S]] [--reports-dir reports]

The logic is in :mod:`tritonfleet.fleet.release` (the rollout's in :mod:`tritonfleet.fleet.releaseroll`); this module turns options into its calls and errors into one
line (``click.ClickException``), never a traceback. ``--root`` (or ``TRITONFLEET_MODELS_ROOT``) is the hosts'
``models_s3_uri``; a RELEASE given as a full ``s3://`` URI without ``--root`` has its parent prefix as root.
AWS credentials come from boto3's usual chain and are never printed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tritonfleet.fleet import release as rel
from tritonfleet.fleet.aws import one_line

ROOT_ENV = "TRITONFLEET_MODELS_ROOT"
REGION_ENV = ["TRITONFLEET_REGION", "AWS_REGION"]


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    try:
        yield
    except rel.ReleaseError as exc:
        raise click.ClickException(str(exc)) from None
    except (ClientError, BotoCoreError) as exc:
        raise click.ClickException(one_line(exc)) from None


def _s3_options(f):
    f = click.option("--region", envvar=REGION_ENV, default=None,
                     help="AWS region of the bucket (or TRITONFLEET_REGION, AWS_REGION; default: boto3's).")(f)
    f = click.option("--endpoint-url", default=None, metavar="URL",
                     help="URL of an S3-compatible store (default: AWS S3).")(f)
    return f


def _root_option(f):
    return click.option("--root", envvar=ROOT_ENV, default=None, metavar="s3://BUCKET/PREFIX",
                        help=f"Release root: the hosts' models_s3_uri (or {ROOT_ENV}).")(f)


def _was(was: str | None, group: str | None) -> str:
    if was is not None:
        return f"was {was}"
    return f"was: following {rel.POINTER}" if group is not None else "was: no pointer"


def release_lines(result: dict[str, Any]) -> list[str]:
    """What ``models release`` prints: the pointer written, then each group pointer rewritten."""
    name = result["release"]
    return [f"{n} -> {name} ({_was(result['was'][n], rel.group_of(n))})" for n in result["written"]]


def print_pointers(pointers: list[rel.Pointer], console: Console | None = None) -> None:
    table = Table(title_justify="left")
    for title in ("pointer", "release", "modified", "note"):
        table.add_column(title, no_wrap=title != "note")
    fleet = next((p.release for p in pointers if p.name == rel.POINTER), None)
    for p in pointers:
        note = p.error or p.note
        if p.name != rel.POINTER and p.release is not None:
            same = "same as" if p.release == fleet else "differs from"
            note = f"{same} {rel.POINTER}; {note}" if note else f"{same} {rel.POINTER}"
        modified = p.modified.strftime("%Y-%m-%d %H:%M:%S UTC") if p.modified else ""
        table.add_row(*(escape(x) for x in (p.name, p.release or "(invalid)", modified, note)))
    (console or Console(width=None if sys.stdout.isatty() else 200)).print(table)


def _root(root: str | None, release: str | None = None) -> str:
    if root:
        return root
    if release is not None and release.strip().startswith("s3://"):
        return rel.parent_root(release)
    raise rel.ReleaseError(f"no release root: pass --root s3://BUCKET/PREFIX (the hosts' models_s3_uri) or set "
                           f"{ROOT_ENV}" + (", or give RELEASE as a full s3:// URI" if release is not None else ""))


@click.group()
def models() -> None:
    """Model repositories of pull-mode hosts: the release pointers in S3 that they follow."""


@models.command(name="release")
@click.argument("release_name", metavar="RELEASE")
@_root_option
@click.option("--group", default=None, help="Point this host group (models_pull_group) only: RELEASE.<group>. "
              "Default: the fleet's RELEASE, then every existing RELEASE.<group> is rewritten to follow it.")
@_s3_options
@click.option("--check/--no-check", default=True, show_default=True,
              help="Refuse a release whose prefix holds no objects or no <model>/config.pbtxt.")
def release_(release_name: str, root: str | None, group: str | None, endpoint_url: str | None,
             region: str | None, check: bool) -> None:
    """Point the pull-mode hosts at RELEASE: a name below the root (v2, releases/2026-11-27) or a full
    s3://BUCKET/PREFIX/v2 URI. One line per pointer written: what it names now and what it named before."""
    with _one_line():
        where = _root(root, release_name)
        if group is not None:
            rel.validate_group(group)
        rel.relative_release(where, release_name)  # bad input is refused before any client is made
        result = rel.release(rel.client(region, endpoint_url), where, release_name, group, check=check)
    for line in release_lines(result):
        click.echo(line)


@models.command(name="releases")
@_root_option
@_s3_options
def releases(root: str | None, endpoint_url: str | None, region: str | None) -> None:
    """Table of the release pointers below the root: RELEASE and each group's RELEASE.<group>, the release
    each names, when it was written and by whom. A group without a pointer follows RELEASE."""
    with _one_line():
        where = _root(root)
        rel.parse_root(where)
        found = rel.read_pointers(rel.client(region, endpoint_url), where)
    if not found:
        click.echo(f"no release pointers below {where}: `tritonfleet models release RELEASE --root {where}` "
                   "writes the fleet's")
        return
    print_pointers(found)


@models.command(name="rollout")
@click.argument("release_name", metavar="RELEASE")
@click.option("--inventory", "-i", envvar="TRITONFLEET_INVENTORY", required=True,
              help="pyinfra inventory of the pull-mode hosts (or TRITONFLEET_INVENTORY).")
@click.option("--group", default="canary", show_default=True,
              help="The canary: the hosts whose models_pull_group is this; RELEASE.<group> moves first.")
@_root_option
@_s3_options
@click.option("--wait", type=click.FloatRange(min=0, min_open=True), default=120, show_default=True,
              help="Seconds the hosts have to serve the release, per phase (canary, fleet, rollback).")
@click.option("--qa/--no-qa", default=True, show_default=True,
              help="QA gate: deploys/qa.py on each canary host that has qa_suites.")
@click.option("--prometheus", metavar="URL", default=None,
              help="Metric gate: after --bake seconds this Prometheus compares the canary hosts' Triton servers "
                   "with the other hosts' (error ratio, latency per request).")
@click.option("--bake", type=float, default=None, help="Metric gate: seconds the canary serves first (default 120).")
@click.option("--max-error-ratio", type=float, default=0.01, show_default=True,
              help="Metric gate: the canary's error ratio above which it is rolled back (0.01: 1% of requests).")
@click.option("--max-latency-ratio", type=float, default=1.5, show_default=True,
              help="Metric gate: the canary's latency per request above this times the others' rolls it back.")
@click.option("--reports-dir", "--reports", "reports_dir", default="reports", show_default=True,
              help="Where the report goes (release-rollout-<UTC stamp>.json).")
def rollout(release_name: str, inventory: str, group: str, root: str | None, endpoint_url: str | None,
            region: str | None, wait: float, qa: bool, prometheus: str | None, bake: float | None,
            max_error_ratio: float, max_latency_ratio: float, reports_dir: str) -> None:
    """Canary release of pull-mode hosts: point the canary group (RELEASE.<group>) at RELEASE, wait until its
    hosts serve it, run the gates (QA, then with --prometheus the metric gate), then release it to the fleet
    and wait until every host serves it. A failed gate (or Ctrl-C) puts the canary's pointer back and waits
    until its hosts serve their previous release; the other hosts never see RELEASE. Writes a report, prints a
    summary; exits non-zero unless every host serves RELEASE."""
    from tritonfleet.fleet import releaseroll as rr

    opts = rr.Options(inventory=inventory, release=release_name, group=group, root=root,
                      endpoint_url=endpoint_url, region=region, wait=wait, qa=qa, prometheus=prometheus, bake=bake,
                      max_error_ratio=max_error_ratio, max_latency_ratio=max_latency_ratio, reports_dir=reports_dir)
    try:
        with _one_line():
            code = rr.main(opts)
    except (OSError, SyntaxError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
    except SystemExit as exc:  # an inventory that refuses to load
        if isinstance(exc.code, int):
            raise
        raise click.ClickException(" ".join(str(exc).split())) from None
    raise SystemExit(code)
