"""triton_python_requirements: parsing and refusals, the normalized requirements.txt and its hash, the image
layer's Dockerfile, pip's failures in one line (real pip output: tests/data/pip/README.md) and the model
gate's hint for a missing module (real Triton 2.51 output: tests/data/triton/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tritonfleet import pyreqs
from tritonfleet.pyreqs import RequirementsError

DATA = Path(__file__).resolve().parents[1] / "data"
PIP = DATA / "pip"
EMOJI_SHA = "fcc936bf374b1aec67dda5303ae99710ba88cc9cdce2d1a71c5f2204e6d78799"
TABULATE_SHA = "024ca478df22e9340661486f85298cff5f6dcdba14f3813e8830015b9ed1948f"


def refusal(source, origin: str = "") -> str:
    with pytest.raises(RequirementsError) as info:
        pyreqs.parse(source, origin)
    message = str(info.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------------------------ parsing


def test_a_file_with_comments_extras_markers_and_continued_hashes():
    text = (
        "# the sample's packages\n"
        "\n"
        "Emoji==2.14.0 \\\n"
        f"    --hash=sha256:{EMOJI_SHA} \\\n"
        f"    --hash=sha256:{'a' * 64}   # two hashes: pip takes either\n"
        f"tabulate[widechars]==0.9.0 ; python_version >= \"3.8\" --hash sha256:{TABULATE_SHA.upper()}\n"
    )
    reqs = pyreqs.parse(text)
    emoji, tabulate = reqs.pins
    assert (emoji.name, emoji.version, emoji.hashes) == ("emoji", "2.14.0", (f"sha256:{'a' * 64}", f"sha256:{EMOJI_SHA}"))
    assert emoji.where == "line 3"
    assert (tabulate.extras, tabulate.marker, tabulate.where) == (("widechars",), 'python_version >= "3.8"', "line 6")
    assert tabulate.hashes == (f"sha256:{TABULATE_SHA}",)  # lower-cased
    assert reqs.hashed
    assert reqs.render().splitlines()[1:] == [
        f"emoji==2.14.0 --hash=sha256:{'a' * 64} --hash=sha256:{EMOJI_SHA}",
        f'tabulate[widechars]==0.9.0; python_version >= "3.8" --hash=sha256:{TABULATE_SHA}',
    ]


def test_a_comment_ending_in_a_backslash_continues_nothing_as_for_pip():
    reqs = pyreqs.parse("# pinned for the sample \\\nemoji==2.14.0\ntabulate==0.9.0 \\\n  # a comment ends it\n")
    assert [(p.pin, p.where) for p in reqs.pins] == [("emoji==2.14.0", "line 2"), ("tabulate==0.9.0", "line 3")]


def test_a_list_of_lines_without_hashes():
    reqs = pyreqs.parse(["tabulate==0.9.0", "", "emoji==2.14.0  # the sample"])
    assert [p.pin for p in reqs.pins] == ["emoji==2.14.0", "tabulate==0.9.0"]
    assert [p.where for p in reqs.pins] == ["entry 3", "entry 1"]
    assert not reqs.hashed
    assert pyreqs.parse("# nothing\n\n") == pyreqs.Requirements() and not pyreqs.parse([])
    assert pyreqs.parse("\n\nemoji==2.14.0\n") == pyreqs.parse(["emoji==2.14.0"])  # where it stood: messages only


def test_the_rendering_and_its_hash_ignore_spelling_and_order_but_not_versions():
    a = pyreqs.parse(["Typing_Extensions==4.12.2", "emoji==2.14.0"])
    b = pyreqs.parse("emoji==2.14.0\ntyping-extensions==4.12.2\n")
    assert a.render() == b.render() and a.digest() == b.digest()
    assert "typing-extensions==4.12.2" in a.render()
    assert len(a.digest()) == 64
    assert pyreqs.parse(["emoji==2.14.1", "typing-extensions==4.12.2"]).digest() != a.digest()
    with_hash = pyreqs.parse([f"emoji==2.14.0 --hash=sha256:{EMOJI_SHA}"])
    assert with_hash.digest() != pyreqs.parse(["emoji==2.14.0"]).digest()


def test_the_same_package_under_different_markers_is_two_pins():
    reqs = pyreqs.parse(['numpy==1.24.4; python_version < "3.12"', 'numpy==1.26.4; python_version >= "3.12"'])
    assert [p.version for p in reqs.pins] == ["1.24.4", "1.26.4"]


@pytest.mark.parametrize(("line", "why"), [
    ("emoji>=2.0", "not an exact pin (>=2.0): use emoji==<version>"),
    ("emoji~=2.14", "not an exact pin"),
    ("emoji==2.*", "not an exact pin"),
    ("emoji>2,<3", "not an exact pin"),
    ("emoji===2.14.0", "not an exact pin"),
    ("emoji", "not pinned: give one exact version, e.g. emoji==<version>"),
    ("emoji[extra]", "not pinned"),
    ("https://example.com/emoji-2.14.0-py3-none-any.whl", "URLs and paths are not allowed"),
    ("./vendor/emoji-2.14.0.tar.gz", "URLs and paths are not allowed"),
    ("emoji @ https://example.com/emoji.whl", "direct references (name @ URL) are not allowed"),
    ("-e git+https://example.com/emoji.git#egg=emoji", "editable installs"),
    ("-r more-requirements.txt", "nested requirement or constraint files"),
    ("--constraint c.txt", "nested requirement or constraint files"),
    ("--index-url https://example.com/simple", "the index is triton_pip_index"),
    ("--extra-index-url=https://example.com/simple", "the index is triton_pip_index"),
    ("--pre", "the index is triton_pip_index"),
    ("emoji==2.14.0 --no-deps", "'--no-deps' after the requirement: pip options are not allowed"),
    ("emoji==2.14.0 --hash=sha256:abc", "not a sha256 digest (64 hex digits)"),
    (f"emoji==2.14.0 --hash=md5:{'a' * 32}", "pip takes sha256, sha384 or sha512 hashes"),
    ("emoji==2.14.0 --hash", "--hash needs a value"),
    ("emoji==2.14.0 ; python_version >", "not a requirement"),
])
def test_a_line_that_is_no_exact_pin_is_refused_naming_it(line, why):
    message = refusal(f"tabulate==0.9.0\n\n{line}\n", origin="requirements.txt")
    assert message.startswith(f"requirements.txt line 3 {line!r}: "), message
    assert why in message


def test_a_list_entry_is_named_by_its_position():
    assert refusal(["emoji==2.14.0", "tabulate>=0.9"]).startswith("entry 2 'tabulate>=0.9': not an exact pin")
    assert refusal(["emoji==2.14.0", 3]).startswith("entry 2 (3) is not a string")


def test_hashes_on_some_lines_only_are_refused_like_pip_does():
    message = refusal(f"emoji==2.14.0 --hash=sha256:{EMOJI_SHA}\ntabulate==0.9.0\n")
    assert message.startswith("line 2 'tabulate==0.9.0' has no --hash while line 1 has one")
    assert "--require-hashes" in message


def test_a_package_listed_twice_is_refused():
    message = refusal("emoji==2.14.0\ntabulate==0.9.0\nEMOJI==2.15.0\n")
    assert message == "line 3 'EMOJI==2.15.0': emoji is listed already (line 1)"


def test_load_reads_a_file_relative_to_the_inventory_or_takes_a_list(tmp_path):
    (tmp_path / "requirements.txt").write_text("emoji==2.14.0\n")
    assert pyreqs.load("requirements.txt", base_dir=tmp_path).pins[0].pin == "emoji==2.14.0"
    assert pyreqs.load(tmp_path / "requirements.txt").pins[0].pin == "emoji==2.14.0"
    assert pyreqs.load(["emoji==2.14.0"]).pins[0].pin == "emoji==2.14.0"
    assert not pyreqs.load(None) and not pyreqs.load([]) and not pyreqs.load("")
    with pytest.raises(RequirementsError, match=r"no such requirements file \(a list of lines is given as a list"):
        pyreqs.load("emoji==2.14.0", base_dir=tmp_path)
    (tmp_path / "bad.txt").write_text("emoji\n")
    with pytest.raises(RequirementsError, match=r"^bad.txt line 1 'emoji': not pinned"):
        pyreqs.load(tmp_path / "bad.txt")


# ------------------------------------------------------------------------------------------- the index


def test_index_urls():
    pyreqs.check_index_url("https://pypi.example.com/simple/")
    pyreqs.check_index_url("http://192.168.250.1:8080/pypi/simple/")
    for bad, why in [("ftp://example.com/simple", r"not an http\(s\) URL"), ("pypi.example.com/simple", "not an http"),
                     ("https://user:token@pypi.example.com/simple", "credentials in the index URL")]:
        with pytest.raises(RequirementsError, match=why) as info:
            pyreqs.check_index_url(bad)
        assert "token" not in str(info.value)
    assert pyreqs.pip_index_args(None) == []
    assert pyreqs.pip_index_args("https://pypi.example.com/simple") == ["--index-url", "https://pypi.example.com/simple"]
    assert pyreqs.pip_index_args("http://192.168.250.1:8080/pypi/simple/") == [
        "--index-url", "http://192.168.250.1:8080/pypi/simple/", "--trusted-host", "192.168.250.1:8080"]


# ------------------------------------------------------------------------------------------- the image

NGC = "nvcr.io/nvidia/tritonserver:24.10-py3"
NEURON = "tritonfleet/tritonserver-neuron:0123456789abcdef"


def test_the_dockerfile_on_the_ngc_image_with_pypi():
    reqs = pyreqs.parse(["emoji==2.14.0", "tabulate==0.9.0"])
    text = pyreqs.dockerfile(NGC, reqs)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0] == f"FROM {NGC}"
    assert lines[1] == "COPY requirements.txt /opt/tritonfleet/python-requirements.txt"
    run = " ".join(line.rstrip("\\").strip() for line in lines[2:5])
    assert run == ("RUN PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 "
                   "python3 -m pip install --no-cache-dir --no-input --progress-bar off "
                   "-r /opt/tritonfleet/python-requirements.txt")
    assert lines[5] == f'LABEL com.tritonfleet.python-requirements="{reqs.digest()}"'
    assert len(lines) == 6
    assert pyreqs.build_context(NGC, reqs) == {"Dockerfile": text, "requirements.txt": reqs.render()}


def test_the_dockerfile_on_the_neuron_image_with_hashes_and_a_plain_http_index():
    reqs = pyreqs.parse([f"emoji==2.14.0 --hash=sha256:{EMOJI_SHA}"])
    text = pyreqs.dockerfile(NEURON, reqs, "http://192.168.250.1:8080/pypi/simple/")
    assert text.splitlines()[3] == f"FROM {NEURON}"
    assert ("python3 -m pip install --no-cache-dir --no-input --progress-bar off --require-hashes --index-url "
            "http://192.168.250.1:8080/pypi/simple/ --trusted-host 192.168.250.1:8080 \\\n") in text
    assert f'com.tritonfleet.python-requirements="{reqs.digest()}"' in text
    assert "{" not in text and "}" not in text  # no template left over


def test_an_index_url_is_one_shell_word():
    text = pyreqs.dockerfile(NGC, pyreqs.parse(["emoji==2.14.0"]), "https://mirror.example.com/simple?x=1&y=2")
    assert "--index-url 'https://mirror.example.com/simple?x=1&y=2' " in text


def test_the_image_tag_follows_every_input():
    reqs = pyreqs.parse(["emoji==2.14.0"])
    tag = pyreqs.image_tag(NGC, reqs)
    assert tag.startswith("tritonfleet/tritonserver-python:") and len(tag.split(":")[1]) == 16
    assert pyreqs.image_tag(NGC, pyreqs.parse("# same\nEmoji==2.14.0\n")) == tag
    assert len({tag, pyreqs.image_tag(NEURON, reqs), pyreqs.image_tag(NGC, reqs, "https://m.example.com/simple"),
                pyreqs.image_tag(NGC, pyreqs.parse(["emoji==2.14.1"]))}) == 4
    with pytest.raises(ValueError, match="no requirements"):
        pyreqs.dockerfile(NGC, pyreqs.Requirements())


# ---------------------------------------------------------------------------------------- pip's output

PIP_FAILURES = {
    "no_version.txt": "emoji==99.0: no such version (the index has: …, 2.14.0, 2.14.1, 2.15.0, 2.16.0)",
    "local_no_version.txt": "emoji==99.0: no such version (the index has: 2.14.0)",
    "no_package.txt": "tritonfleet-no-such-package-xyz==1.0: no such package on the index (pip: no versions at all)",
    "hash_mismatch.txt": f"emoji==2.14.0: the downloaded file does not match its --hash (expected "
                         f"sha256:{'0' * 16}…, got sha256:{EMOJI_SHA}): update the hash only if the version changed",
    "hash_missing.txt": f"tabulate==0.9.0: no --hash: with --require-hashes every requirement needs its hash (its "
                        f"archive has --hash=sha256:{TABULATE_SHA})",
    "hash_missing_dep.txt": "charset-normalizer<4,>=2 (a dependency of requests==2.32.3): with hashes "
                            "(--require-hashes) every dependency must be listed too, pinned with == and its --hash",
    "conflict.txt": "requests==2.32.3 and urllib3==1.20: conflicting dependencies (requests 2.32.3 depends on "
                    "urllib3<3 and >=1.21.1)",
    "unreachable.txt": "emoji==2.14.0: the package index http://127.0.0.1:9/simple could not be reached "
                       "(Connection refused)",
    "untrusted_host.txt": "emoji==2.14.0: pip ignored the plain-HTTP index on 192.0.2.2 (not a trusted host: "
                          "--trusted-host is needed)",
    "requires_python.txt": "django==5.0: needs another Python (Requires-Python >=3.10) than the image's",
    "build_metadata.txt": "brokenmeta: could not prepare its metadata (RuntimeError: brokenmeta needs CUDA_HOME "
                          "to be set)",
    "build_wheel.txt": "brokenext: failed to build (src/brokenext.c:2:10: fatal error: "
                       "missing_header_of_brokenext.h: No such file or directory)",
    "no_pip.txt": "the base image has no pip (/usr/bin/python3: No module named pip): install pip into it, or use "
                  "a base image with pip",
    "externally_managed.txt": "pip refused to install into the image's system Python (externally-managed-environment,"
                              " PEP 668): set PIP_BREAK_SYSTEM_PACKAGES=1 in the build",
}


def test_every_recorded_failure_has_a_case():
    assert sorted(p.name for p in PIP.glob("*.txt")) == sorted(PIP_FAILURES)


@pytest.mark.parametrize("name", sorted(PIP_FAILURES))
def test_pip_failures_in_one_line(name):
    assert pyreqs.pip_failure((PIP / name).read_text()) == PIP_FAILURES[name]


def buildkit(output: str, step: int = 8) -> str:
    """``output`` as `docker build --progress=plain` shows a failing RUN: "#8 0.123 " before each line, then
    the step's error and BuildKit's summary repeating the last lines, then the Dockerfile excerpt."""
    lines = output.splitlines()
    run = 'RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -r /opt/tritonfleet/python-requirements.txt'
    out = [f"#{step} [2/2] {run}"]
    out += [f"#{step} {0.5 + i / 100:.3f} {line}" for i, line in enumerate(lines)]
    out += [f'#{step} ERROR: process "/bin/sh -c {run[4:]}" did not complete successfully: exit code: 1',
            "------", f" > [2/2] {run}:"]
    out += [f"{0.5 + i / 100:.3f} {line}" for i, line in enumerate(lines)][-5:]
    out += ["------", "Dockerfile:9", "--------------------", f"   9 | >>> {run}", "--------------------",
            f'ERROR: failed to solve: process "/bin/sh -c {run[4:]}" did not complete successfully: exit code: 1']
    return "\n".join(out) + "\n"


def legacy(output: str) -> str:
    """``output`` as the legacy builder shows it."""
    return ("Step 3/4 : RUN python3 -m pip install -r /opt/tritonfleet/python-requirements.txt\n"
            " ---> Running in 0123456789ab\n" + output +
            "The command '/bin/sh -c python3 -m pip install -r /opt/tritonfleet/python-requirements.txt' returned "
            "a non-zero code: 1\n")


@pytest.mark.parametrize("name", ["no_version.txt", "hash_mismatch.txt", "hash_missing_dep.txt", "conflict.txt",
                                  "build_wheel.txt", "untrusted_host.txt"])
@pytest.mark.parametrize("wrap", [buildkit, legacy])
def test_pip_failures_inside_a_docker_build_log(name, wrap):
    assert pyreqs.pip_failure(wrap((PIP / name).read_text())) == PIP_FAILURES[name]


def test_an_unknown_failure_is_pips_last_error_or_last_line():
    assert pyreqs.pip_failure("Collecting x\nERROR: Could not install packages due to an OSError: [Errno 28] No "
                              "space left on device\n") == ("pip: Could not install packages due to an OSError: "
                                                            "[Errno 28] No space left on device")
    assert pyreqs.pip_failure("Killed\n") == "pip: Killed"
    assert pyreqs.pip_failure("") == "pip failed without output"
    assert "\n" not in pyreqs.pip_failure("ERROR: " + "x" * 1000)


# ------------------------------------------------------------------------------------- model load errors

TRITON_LOAD_ERROR = (DATA / "triton" / "load_no_module_emoji.json").read_text()


def test_the_missing_module_in_tritons_load_error():
    assert pyreqs.missing_module(TRITON_LOAD_ERROR) == "emoji"
    assert pyreqs.missing_module("ModuleNotFoundError: No module named 'transformers.models'") == "transformers.models"
    assert pyreqs.missing_module("Internal: ImportError: cannot import name 'x' from 'y'") is None
    assert pyreqs.import_hint("emoji_echo", "version 1 is at UNAVAILABLE state: Internal: KeyError: 'x'") is None


def test_the_hint_names_model_module_and_setting():
    assert pyreqs.import_hint("emoji_echo", TRITON_LOAD_ERROR) == (
        "model emoji_echo: python backend: No module named 'emoji': add it to triton_python_requirements "
        "(pinned, e.g. emoji==<version>)")
    assert pyreqs.import_hint("M", "ModuleNotFoundError: No module named 'transformers'", version="4.46.3") == (
        "model M: python backend: No module named 'transformers': add it to triton_python_requirements "
        "(pinned, e.g. transformers==4.46.3)")
    assert pyreqs.import_hint("vision", "No module named 'PIL.Image'").endswith("e.g. pillow==<version>)")
    assert pyreqs.import_hint("t", "No module named 'typing_extensions'").endswith("typing-extensions==<version>)")
    assert pyreqs.import_hint("p", "No module named 'google.protobuf'").endswith("e.g. protobuf==<version>)")


def test_a_listed_package_that_is_still_missing_means_the_image_was_not_rebuilt():
    listed = pyreqs.parse(["Emoji==2.14.0"])
    assert pyreqs.import_hint("emoji_echo", TRITON_LOAD_ERROR, listed) == (
        "model emoji_echo: python backend: No module named 'emoji': emoji is in triton_python_requirements but not "
        "in the image the server runs (was the image rebuilt with it?)")


def test_hints_from_the_model_gates_output():
    gate = ("loading emoji_echo\n"
            f"ERROR: model emoji_echo did not load (HTTP 400): {TRITON_LOAD_ERROR}\n"
            "ERROR: took the new model emoji_echo out of the live repository (a restart would fail on it)\n"
            "ERROR: model add_sub is not ready: UNAVAILABLE: Internal: ValueError: bad config\n"
            "ERROR: model vision is not ready: UNAVAILABLE: Internal: ModuleNotFoundError: No module named 'cv2'\n")
    assert pyreqs.import_hints(gate) == [
        "model emoji_echo: python backend: No module named 'emoji': add it to triton_python_requirements (pinned, "
        "e.g. emoji==<version>)",
        "model vision: python backend: No module named 'cv2': add it to triton_python_requirements (pinned, e.g. "
        "opencv-python-headless==<version>)",
    ]
    assert pyreqs.import_hints(TRITON_LOAD_ERROR)[0].startswith("model emoji_echo: ")  # Triton's own text
    assert pyreqs.import_hints("all 3 models ready\n") == []


#: a new container's health gate on a fresh sandbox host (the e2e run of test_13, 2026-11-27): Triton's own log
SWAP_GATE = """ERROR: Triton server triton is not running (restarting 2); first error lines of its log:
I1127 09:19:41.349102 19 pb_stub.cc:298]  Failed to initialize Python stub for auto-complete: ModuleNotFoundError: \
No module named 'emoji'
E1127 09:19:41.352906 1 model_lifecycle.cc:642] "failed to load 'emoji_echo' version 1: Internal: \
ModuleNotFoundError: No module named 'emoji'\\n\\nAt:\\n  /models/current/emoji_echo/1/emoji_echo.py(10): <module>"
I1127 09:19:41.353154 1 model_lifecycle.cc:777] "failed to load 'emoji_echo'"
| emoji_echo | 1       | UNAVAILABLE: Internal: ModuleNotFoundError: No module named 'emoji' |
| tabled     | 1       | UNAVAILABLE: Internal: ModuleNotFoundError: No module named 'tabulate' |
ERROR: the new triton failed its health gate; there was no previous container to roll back to
"""


def test_hints_from_a_new_containers_health_gate():
    """Models loaded at the start: Triton's log lines and its model table name them; the python stub's own line
    (no model named) adds nothing."""
    assert pyreqs.import_hints(SWAP_GATE) == [
        "model emoji_echo: python backend: No module named 'emoji': add it to triton_python_requirements (pinned, "
        "e.g. emoji==<version>)",
        "model tabled: python backend: No module named 'tabulate': add it to triton_python_requirements (pinned, "
        "e.g. tabulate==<version>)",
    ]
    stub_only = SWAP_GATE.splitlines()[1:2]
    assert [h.split(":")[0] for h in pyreqs.import_hints("\n".join(stub_only))] == ["model ?"]


def test_the_output_and_hint_functions_need_no_packaging():
    """A host's agent has no ``packaging``: only the parser imports it."""
    code = ("import sys; sys.modules['packaging'] = None\n"
            "from tritonfleet import pyreqs\n"
            "print(pyreqs.import_hint('m', \"No module named 'PIL'\"))\n"
            "print(pyreqs.pip_failure('ERROR: No matching distribution found for emoji==99.0'))\n"
            "pyreqs.parse(['emoji==2.14.0'])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.stdout.splitlines() == [
        "model m: python backend: No module named 'PIL': add it to triton_python_requirements (pinned, e.g. "
        "pillow==<version>)", "emoji==99.0: no such package on the index (pip: no versions at all)"]
    assert "ModuleNotFoundError: No module named 'packaging.requirements'" in run.stderr  # the parser needs it
