"""The generated sample group data (inventories/group_data/all.example.py, `tritonfleet.face.docgen`):
current, complete, and valid host data equal to the defaults once uncommented."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import Field

from roles import all_roles
from tests.hostconfigs import host_config
from tritonfleet.access.inventory import load_inventory
from tritonfleet.config import RENAMED, Role, RoleSettings, defaults
from tritonfleet.face import docgen

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / docgen.SAMPLE
FPR = "C" * 40
# what preflight wants beyond the defaults on these hosts: a Neuron host, an EFA host, a GPU host
HOSTS = {"neuron": {"instance_type": "inf2.xlarge", "neuron_key_fingerprint": FPR},
         "efa": {"instance_type": "trn1.32xlarge", "neuron_key_fingerprint": FPR, "efa_key_fingerprint": FPR},
         "gpu": {"instance_type": "g5.xlarge", "nvidia_key_fingerprint": FPR}}
SECRET = {"triton_repository_secret": "fleet-secret-0123456789"}


def uncomment(text: str) -> str:
    """Every setting line of the sample uncommented (``# key = value``); ``## `` descriptions stay comments."""
    return "\n".join(line[2:] if line.startswith("# ") else line for line in text.splitlines()) + "\n"


def test_committed_sample_is_current():
    assert SAMPLE.read_text() == docgen.render_sample(), "run `python -m tritonfleet.face.docgen --write`"


def test_uncommented_sample_is_valid_host_data_equal_to_the_defaults(tmp_path):
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text(uncomment(SAMPLE.read_text()))
    (tmp_path / "fleet.py").write_text(f"hosts = {list(HOSTS.items())!r}\n")
    roles = all_roles()
    expected = docgen._PLAIN.dump_python(defaults(roles), mode="json")
    for name, data in load_inventory(tmp_path / "fleet.py"):
        assert data == {**expected, **HOSTS[name]}  # every setting at its default, as the same Python value
        from_sample = host_config({**data, **SECRET}, name=name)  # passes preflight validation
        from_defaults = host_config({**HOSTS[name], **SECRET}, name=name)
        assert from_sample.settings == from_defaults.settings


def test_every_role_setting_appears_once_commented_out():
    text = SAMPLE.read_text()
    keys = re.findall(r"^# (\w+) = ", text, re.M)
    assert keys == [key for role in all_roles() for key in role.keys()]
    assert not re.findall(r"^\w", text, re.M), "nothing is set until a line is uncommented"
    for old, what in RENAMED.items():
        assert f"## {old}: {what}" in text


class _Settings(RoleSettings):
    name: str = Field(description="Needed: no default.")
    mode: Literal["a", "b"] = Field("a", description="A mode.")
    count: int = Field(3, ge=1, le=9, description="How many. " + "Words of a long description. " * 8)
    tags: list[Literal["x", "y"]] = Field(["x"], description="Tags.")
    table: dict[str, dict[str, str]] = Field({f"release-{i}": {"package": f"{i}.0" * 8} for i in range(4)},
                                             description="A default too long for one line.")


def test_a_setting_shows_its_bounds_allowed_values_and_required_placeholder():
    text = docgen.render_sample([Role(name="demo", settings=_Settings, summary="a demo role")], renamed={})
    assert "## demo (roles/demo.py): a demo role\n" in text
    assert "## Needed: no default.\n## required: no default, set it\n# demo_name = ...\n" in text
    assert "## allowed: 'a', 'b'\n# demo_mode = 'a'\n" in text
    assert "## bounds: >= 1, <= 9\n# demo_count = 3\n" in text
    assert "## allowed items: 'x', 'y'\n# demo_tags = ['x']\n" in text
    assert "Renamed" not in text
    assert max(len(line) for line in text.splitlines()) <= docgen.WIDTH
    table = ast.literal_eval(uncomment(text).split("demo_table = ", 1)[1])
    assert table == _Settings.model_fields["table"].default and text.count("# demo_table") == 1


def test_check_fails_on_a_stale_sample_and_write_renews_it_leaving_readme_alone(tmp_path, monkeypatch, capsys):
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / SAMPLE.parent.relative_to(ROOT)).mkdir(parents=True)
    stale = tmp_path / docgen.SAMPLE
    stale.write_text(SAMPLE.read_text().replace("# connection_keepalive = 10", "# connection_keepalive = 11"))
    monkeypatch.chdir(tmp_path)
    assert docgen.main(["--check"]) == 1
    assert f"{docgen.SAMPLE} is out of date" in capsys.readouterr().err
    assert docgen.main(["--write"]) == 0
    assert stale.read_text() == SAMPLE.read_text()
    assert (tmp_path / "README.md").read_text() == (ROOT / "README.md").read_text()
    assert docgen.main(["--check"]) == 0
    stale.unlink()
    assert docgen.main(["--check"]) == 1
