"""pip's and Triton's failures, each in one line (standard library only): :func:`pip_failure` reads a failed
image build's output (plain pip, BuildKit or the legacy ``docker build``) and names the package and pip's reason;
:func:`import_hint` / :func:`import_hints` turn a python model's "No module named 'X'" into a line naming the
model and the setting (``triton_python_requirements``). The requirements themselves: :mod:`tritonfleet.pyreqs`,
which re-exports these. Tested against real pip and Triton 2.51 output (tests/data/pip/, tests/data/triton/)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonfleet.pyreqs import Requirements


# ---------------------------------------------------------------------------------------- pip's output

#: BuildKit's plain progress ("#7 1.234 ") and its error summary's (" 1.234 ") prefixes of a RUN's output
_BUILDKIT = re.compile(r"^(?:#\d+ )?(?:\d+\.\d+ )?")
#: docker's own lines about the failed RUN, not pip's
_DOCKER = re.compile(r"^(?:ERROR: (?:failed to solve|process \")|ERROR \[|-{5,}|\s*>|\s*\d+ \| |Dockerfile:|"
                     r"The command '/bin/sh|Step \d+/\d+ :|\s*---> )")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (\S+(?: \S+)*?) \(from versions: (.*)\)")
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
_UNREACHABLE = ("Failed to establish a new connection", "NewConnectionError", "Connection refused",
                "Name or service not known", "Temporary failure in name resolution", "ConnectTimeoutError",
                "Read timed out", "Max retries exceeded", "Network is unreachable")


def _clean_lines(output: str) -> list[str]:
    """pip's lines from a build log: prefixes, colours and docker's own lines removed, repeats dropped."""
    out: list[str] = []
    for raw in _ANSI.sub("", output).splitlines():
        line = _BUILDKIT.sub("", raw, count=1).rstrip()
        if not line.strip() or _DOCKER.match(line.strip()):
            continue
        if line not in out[-200:]:  # BuildKit repeats the last lines in its error summary
            out.append(line)
    return out


def _versions_tail(versions: str, keep: int = 4) -> str:
    items = [v.strip() for v in versions.split(",") if v.strip()]
    if not items or items == ["none"]:
        return "none"
    return ("…, " if len(items) > keep else "") + ", ".join(items[-keep:])


def _indented_after(lines: list[str], marker: str) -> list[str]:
    """The indented lines that follow the line containing ``marker``."""
    for i, line in enumerate(lines):
        if marker in line:
            block = []
            for nxt in lines[i + 1:]:
                if not nxt.startswith((" ", "\t")):
                    break
                block.append(nxt.strip())
            return block
    return []


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _hash_failure(lines: list[str]) -> str | None:
    text = "\n".join(lines)
    if "THESE PACKAGES DO NOT MATCH THE HASHES" in text:
        block = _indented_after(lines, "THESE PACKAGES DO NOT MATCH THE HASHES")
        req = block[0].split(" from ", 1)[0].rstrip(":") if block else "a package"
        expected = next((b.split()[-1] for b in block if b.startswith("Expected")), "?")
        got = next((b.split()[-1] for b in block if b.startswith("Got")), "?")
        return (f"{req}: the downloaded file does not match its --hash (expected sha256:{expected[:16]}…, got "
                f"sha256:{got}): update the hash only if the version changed")
    if "Hashes are required in --require-hashes mode" in text:
        block = _indented_after(lines, "Hashes are required in --require-hashes mode")
        first = block[0] if block else "a requirement"
        req, _, digest = first.partition(" --hash=")
        more = f" (and {len(block) - 1} more)" if len(block) > 1 else ""
        return (f"{req.strip()}: no --hash{more}: with --require-hashes every requirement needs its hash "
                f"(its archive has --hash={digest or '?'})")
    if "In --require-hashes mode, all requirements must have their versions pinned" in text:
        block = _indented_after(lines, "In --require-hashes mode, all requirements must have their versions")
        first = block[0] if block else "a dependency"
        req = first.split(" from ", 1)[0]
        parent = re.search(r"\(from ([^\s)]+?)(?:->|\))", first)
        needed = f" (a dependency of {parent.group(1)})" if parent and "-r " not in parent.group(1) else ""
        return (f"{req}{needed}: with hashes (--require-hashes) every dependency must be listed too, pinned "
                "with == and its --hash")
    return None


def _resolution_failure(lines: list[str]) -> str | None:
    for line in lines:
        m = re.search(r"Cannot install (.+?) because these package versions have conflicting dependencies", line)
        if m:
            causes = [c for c in _indented_after(lines, "The conflict is caused by:") if "requested" not in c]
            why = "; ".join(causes) or "conflicting dependencies"
            return f"{m.group(1)}: conflicting dependencies ({_short(why, 200)})"
    return None


def _not_found(lines: list[str]) -> str | None:
    text = "\n".join(lines)
    req, versions = None, None
    for line in lines:
        m = _NOT_FOUND.search(line)
        if m:
            req, versions = m.group(1), m.group(2)
            break
    if req is None:
        m2 = next((m for m in map(_NO_MATCH.search, lines) if m), None)
        if m2 is None:
            return None
        req, versions = m2.group(1), "none"
    untrusted = re.search(r"The repository located at (\S+) is not a trusted or secure host", text)
    if untrusted:
        return (f"{req}: pip ignored the plain-HTTP index on {untrusted.group(1)} (not a trusted host: "
                "--trusted-host is needed)")
    if any(u in text for u in _UNREACHABLE):
        index = re.search(r"Looking in indexes: (\S+)", text)
        errno = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
        why = next((u for u in _UNREACHABLE[2:] if u in text), "")
        at = f" {index.group(1).rstrip(',')}" if index else ""
        because = f" ({errno.group(1).strip() if errno else why})" if (errno or why) else ""
        return f"{req}: the package index{at} could not be reached{because}"
    ssl = re.search(r"(SSLError|CERTIFICATE_VERIFY_FAILED|certificate verify failed)", text)
    if ssl:
        return f"{req}: the package index's TLS certificate was refused ({ssl.group(1)})"
    version = req.partition("==")[2]
    py = next((line for line in lines if "require a different python version" in line), "")
    if version and py:
        m = re.search(rf"(?:^|;)\s*{re.escape(version)} Requires-Python ([^;]+)", py.split("python version:", 1)[-1])
        if m:
            return f"{req}: needs another Python (Requires-Python {m.group(1).strip()}) than the image's"
    tail = _versions_tail(versions or "none")
    if tail == "none":
        return f"{req}: no such package on the index (pip: no versions at all)"
    return f"{req}: no such version (the index has: {tail})"


_COMPILER_ERROR = re.compile(r"\S+:\d+(?::\d+)?: (?:fatal )?error: .*")
_EXCEPTION = re.compile(r"(?:[\w.]+(?:Error|Exception)|error|Error): .*")


def _box_reason(lines: list[str]) -> str:
    """The build's own reason, from the subprocess output pip boxes (``╰─> [N lines of output]`` ...
    ``[end of output]``): a compiler error first, else the last exception or ``error:`` line."""
    box: list[str] = []
    inside = False
    for line in lines:
        s = line.strip()
        if re.match(r"╰─> \[\d+ lines? of output\]", s):
            inside, box = True, []
        elif s == "[end of output]":
            inside = False
        elif inside:
            box.append(s)
    compiler = next((m.group(0) for m in map(_COMPILER_ERROR.search, box) if m), None)
    if compiler:
        return compiler
    return next((s for s in reversed(box) if _EXCEPTION.match(s)), box[-1] if box else "")


def _build_failure(lines: list[str]) -> str | None:
    text = "\n".join(lines)
    metadata = "metadata-generation-failed" in text or "Encountered error while generating package metadata" in text
    pkg = None
    for i, line in enumerate(lines):  # pip >= 23: "× <what failed>" then "╰─> <package(s)>"
        if line.startswith("× ") and i + 1 < len(lines):
            m = re.match(r"╰─> ([^\s\[].*)$", lines[i + 1].strip())
            if m:
                pkg = m.group(1).strip()
    for pattern in (r"Failed building wheel for (\S+)", r"Could not build wheels for ([^\s,]+)",
                    r"^Failed to build ([^\s,]+)$"):
        m = re.search(pattern, text, re.MULTILINE)
        if pkg is None and m:
            pkg = m.group(1)
    if pkg is None and not metadata and "subprocess-exited-with-error" not in text:
        return None
    if pkg is None:  # the package being prepared when it failed
        for line in lines:
            m = re.match(r"\s*(?:Collecting|Processing) (\S+)", line)
            if m:
                pkg = m.group(1)
    reason = _box_reason(lines)
    what = "could not prepare its metadata" if metadata else "failed to build"
    return f"{pkg or 'a package'}: {what}" + (f" ({_short(reason, 200)})" if reason else "")


def pip_failure(output: str) -> str:
    """One line for a failed ``pip install`` (or a ``docker build`` log around it): the failing package and
    pip's reason, e.g. ``emoji==99.0: no such version (the index has: …, 2.13.2, 2.14.0, 2.14.1, 2.15.0)``."""
    lines = _clean_lines(output)
    text = "\n".join(lines)
    m = re.search(r"(\S*python\S*): No module named pip", text)
    if m:
        return f"the base image has no pip ({m.group(0)}): install pip into it, or use a base image with pip"
    if "externally-managed-environment" in text:
        return ("pip refused to install into the image's system Python (externally-managed-environment, PEP 668):"
                " set PIP_BREAK_SYSTEM_PACKAGES=1 in the build")
    for finder in (_hash_failure, _resolution_failure, _not_found, _build_failure):
        found = finder(lines)
        if found:
            return _short(found, 400)
    errors = [line.strip() for line in lines if line.strip().startswith("ERROR:")]
    if errors:
        return "pip: " + _short(errors[-1][len("ERROR:"):].strip())
    last = [line.strip() for line in lines if line.strip()]
    return "pip: " + _short(last[-1]) if last else "pip failed without output"


# ------------------------------------------------------------------------------------- model load errors

_MISSING = re.compile(r"No module named '([^']+)'")
#: import names whose distribution is called otherwise (the usual ones of python-backend models)
DISTRIBUTIONS = {
    "PIL": "pillow", "cv2": "opencv-python-headless", "yaml": "pyyaml", "sklearn": "scikit-learn",
    "skimage": "scikit-image", "bs4": "beautifulsoup4", "dateutil": "python-dateutil", "attr": "attrs",
    "Crypto": "pycryptodome", "jwt": "pyjwt", "magic": "python-magic", "dotenv": "python-dotenv",
    "docx": "python-docx", "fitz": "pymupdf",
}


def missing_module(text: str) -> str | None:
    """The module Triton's load failure says is missing (``No module named 'transformers'``), else None."""
    m = _MISSING.search(text or "")
    return m.group(1) if m else None


def distribution_for(module: str) -> str:
    """The distribution to pin for an import name (``PIL.Image`` -> ``pillow``; by default the top module)."""
    if module == "google.protobuf" or module.startswith("google.protobuf."):
        return "protobuf"
    from tritonfleet.pyreqs import canonical_name

    top = module.split(".", 1)[0]
    return DISTRIBUTIONS.get(top, canonical_name(top))


def import_hint(model: str, text: str, listed: Requirements | None = None, version: str | None = None) -> str | None:
    """One line for a python model whose load failed on a missing module, naming the setting, e.g.
    ``model M: python backend: No module named 'transformers': add it to triton_python_requirements (pinned,
    e.g. transformers==4.46.3)``; None when ``text`` is no missing-module failure. ``listed``: the requirements
    the image was meant to have (a package listed there but missing is an image that was not rebuilt)."""
    module = missing_module(text)
    if module is None:
        return None
    dist = distribution_for(module)
    head = f"model {model}: python backend: No module named '{module}'"
    from tritonfleet.pyreqs import canonical_name

    if listed is not None and canonical_name(dist) in listed.names:
        return (f"{head}: {dist} is in triton_python_requirements but not in the image the server runs "
                "(was the image rebuilt with it?)")
    return f"{head}: add it to triton_python_requirements (pinned, e.g. {dist}=={version or '<version>'})"


#: the model a line of a gate's or Triton's output is about: the gates' ``model M did not load``, Triton's
#: ``load failed for model 'M'`` and ``failed to load 'M' version 1``, and its model table's ``| M | 1 | UNAVAILABLE``
_MODEL = re.compile(r"model (?:'([^']+)'|([^\s:']+)) (?:did not load|is not ready)|(?:for|load) model '([^']+)'"
                    r"|failed to load '([^']+)'|^\W*\|\s*([^\s|]+)\s*\|\s*\d+\s*\|\s*UNAVAILABLE")


def import_hints(output: str, listed: Requirements | None = None) -> list[str]:
    """:func:`import_hint` for every model that a model gate's or Triton's output (``ERROR: model M did not load
    (HTTP 400): {"error":"load failed for model 'M': ... No module named 'x' ..."}``) reports as missing a
    module; one hint per model, in order."""
    hints: dict[str, str] = {}
    for line in (output or "").splitlines():
        if missing_module(line) is None:
            continue
        m = _MODEL.search(line)
        model = next((g for g in m.groups() if g), "?") if m else "?"
        hint = import_hint(model, line, listed)
        if hint and model not in hints:
            hints[model] = hint
    if len(hints) > 1:  # a line that names no model (the python stub's own) adds nothing to those that do
        hints.pop("?", None)
    return list(hints.values())
