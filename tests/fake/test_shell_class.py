"""Every host-data string that could reach a shell is refused by preflight or shell-quoted (issue "Security",
item 2, as a class): each string setting of every role (from the registry's ``model_fields``) is given a
value carrying ``$(...)``, ``;``, backquotes and both quotes, and the serve and monitoring deploys run on an
@fake host. Either preflight refuses it in one line naming the host and the key, or every command that
carries it carries it as one shell word: ``shlex.split`` of the command (POSIX rules) gives it back whole,
which an unquoted ``;``, a space or an unbalanced quote would prevent."""

from __future__ import annotations

import shlex
import types
import typing

import pytest

from roles import all_roles
from roles.preflight import PreflightError
from tests.fake.fakehost import run_deploys
from tests.fake.test_roles import DATA, composed
from tritonfleet import wheelhouse

MARK = "tf-pwned"
PAYLOAD = f"p$(touch /tmp/{MARK});q`id`'\"r"
TIGHT = f"p$(touch${{IFS}}/tmp/{MARK});q`id`'\"r"  # no white space: past a \S+ pattern
#: The same syntax as a plain value, inside something URL-shaped and inside something path-shaped
VALUES = {"plain": PAYLOAD, "url": f"https://example.com/{TIGHT}.tar.gz", "path": f"/opt/{TIGHT}"}
#: A Neuron host on Debian (packaged node exporter) and a GPU host on Amazon Linux (the release tarball)
BASES = {
    "inf2-debian12": ("debian12", {**DATA, "instance_type": "inf2.xlarge", "models_s3_uri": "s3://models-bucket/prod",
                                   "models_s3_region": "eu-west-1", "monitoring_node_exporter": True}),
    "g5-al2023": ("al2023", {**DATA, "instance_type": "g5.xlarge", "models_s3_uri": "s3://models-bucket/prod",
                             "monitoring_node_exporter": True,
                             "monitoring_node_exporter_url": "https://example.com/node_exporter-1.8.2.linux-amd64.tar.gz",
                             "monitoring_node_exporter_sha256": "a" * 64}),
}
DEPLOYS = composed("deploys/serve.py") + composed("deploys/monitoring.py")


def _is_strings(annotation) -> str | None:
    """"str" for a str setting (optional or not), "list" for a list or tuple of str, else None."""
    args = typing.get_args(annotation)
    if annotation is str or (typing.get_origin(annotation) in (typing.Union, types.UnionType)
                             and str in args and all(a in (str, type(None)) for a in args)):
        return "str"
    if typing.get_origin(annotation) in (list, tuple) and args and args[0] is str:
        return "list"
    return None


def string_settings() -> list[tuple[str, str]]:
    out = []
    for role in all_roles():
        for name, info in role.settings.model_fields.items():
            kind = _is_strings(info.annotation)
            if kind:
                out.append((f"{role.name}_{name}", kind))
    return out


SETTINGS = string_settings()


def test_there_are_string_settings_to_try():
    assert len(SETTINGS) >= 30 and ("models_dir", "str") in SETTINGS


@pytest.fixture(autouse=True)
def small_wheelhouse(monkeypatch, tmp_path):
    (tmp_path / "tritonfleet_agent-0.1.0+t-py3-none-any.whl").write_bytes(b"wheel")
    built = wheelhouse.Wheelhouse(tmp_path, "d" * 64, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)


@pytest.mark.parametrize("base", list(BASES))
@pytest.mark.parametrize("shape", list(VALUES))
@pytest.mark.parametrize("key, kind", SETTINGS, ids=[k for k, _ in SETTINGS])
def test_a_string_setting_that_carries_shell_syntax_is_refused_or_quoted(monkeypatch, key, kind, shape, base):
    text = VALUES[shape]
    value = text if kind == "str" else [text]
    os_key, data = BASES[base]
    try:
        rec = run_deploys(DEPLOYS, {**data, key: value}, os_key, monkeypatch,
                          responses={"sys.version_info": ["3.11", "x86_64", "none"]})
    except PreflightError as exc:
        assert any(line.strip().startswith(f"@fake/h1: {key} ") for line in str(exc).splitlines()), str(exc)
        return
    for command in rec.commands:
        if MARK not in command:
            continue
        words = shlex.split(command)
        assert any(text in w for w in words), f"{key} reaches a shell unquoted: {command[:600]}"
        for w in words:  # a word that is itself a script (sh -c '...') quotes it again inside
            if MARK in w and w != text and ("\n" in w or w.startswith(("set ", "#!"))):
                assert any(text in x for x in shlex.split(w, comments=True)), \
                    f"{key} reaches a nested shell unquoted: {w[:600]}"
