"""Render the Jinja2 templates under ``templates/`` (shipped as ``tritonfleet.templates``)."""

from __future__ import annotations

import functools
import shlex
from importlib import resources
from pathlib import Path

import jinja2


def template_dir() -> Path:
    """Directory holding the templates (works from a checkout and from an installed wheel)."""
    return Path(str(resources.files("tritonfleet.templates")))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["quote"] = lambda v: shlex.quote(str(v))  # shell scripts: every value one word
    return env


def render(name: str, **context: object) -> str:
    """Render template ``name`` (a path relative to ``templates/``) with ``context``."""
    return environment().get_template(name).render(**context)


def template_path(name: str) -> Path:
    """Absolute path of a template file, for pyinfra's ``files.template(src=...)``."""
    return template_dir() / name
