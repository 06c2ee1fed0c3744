"""HAProxy on the load balancers (``roles/lb.py``): its configuration, replaced only by one HAProxy accepts, and a
reload that drops no connection and is checked to have taken effect."""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from io import BytesIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation

from roles.facts.files import FileDigests
from roles.facts.system import CommandSucceeds

#: Seconds a reloaded HAProxy has to show the new configuration on its Runtime API.
RELOAD_WAIT = 30


def running_probe(socket: str, config_id: str) -> str:
    """A command that succeeds when the HAProxy answering on ``socket`` runs the configuration ``config_id`` (its
    global ``description tritonfleet <config_id>``, which the Runtime API's ``show info`` reports)."""
    q = shlex.quote
    return (f"echo 'show info' | socat -t 2 stdio unix-connect:{q(socket)} "
            f"| grep -qx {q('description: tritonfleet ' + config_id)}")


def root_only_probe(socket: str) -> str:
    """A command that succeeds when ``socket`` is root's, mode 600."""
    return f'[ "$(stat -c %a:%U:%G {shlex.quote(socket)})" = 600:root:root ]'


@operation()
def config(path: str, content: str, config_id: str, socket: str, unit: str = "haproxy.service", mode: str = "644"):
    """
    HAProxy's configuration file with exactly this content, and HAProxy running it. A new file is written beside
    the old one, checked with ``haproxy -c`` and only then moved over it (a configuration HAProxy refuses never
    replaces a good one: the operation fails naming HAProxy's reason, the old file and the running HAProxy stay).
    Then the unit is reloaded (``systemctl reload-or-restart``: in master-worker mode new workers take new
    connections and old ones finish theirs, nothing is dropped; a unit that is not running is started) and the
    Runtime API is asked, for up to 30 s, whether HAProxy runs the new configuration: a reload HAProxy could
    not carry out (it then goes on with the old one) fails the operation instead of passing unnoticed. Nothing
    happens when the file is up to date and HAProxy runs it; a file that is up to date while HAProxy runs
    something else (an earlier reload that failed) is reloaded again. The Runtime API socket is made root's, mode
    600: a reload keeps the sockets it finds, with the mode another configuration gave them.

    + path: the configuration file, e.g. /etc/haproxy/haproxy.cfg
    + content: its whole content; its global section has ``description tritonfleet <config_id>``
    + config_id: the identity of this content that the running HAProxy reports
    + socket: the Runtime API socket (a ``stats socket`` of the configuration)
    + unit: the systemd unit to reload
    + mode: octal mode of the file

    **Example:**

    .. code:: python

        haproxy.config(
            name="haproxy.cfg (checked, then reloaded)",
            path="/etc/haproxy/haproxy.cfg",
            content="global\\n    description tritonfleet 0123456789abcdef\\n...",
            config_id="0123456789abcdef",
            socket="/run/haproxy/admin.sock",
        )
    """
    digest = hashlib.sha256(content.encode()).hexdigest()
    file_ok = host.get_fact(FileDigests, paths=(path,)).get(path) == (digest, mode)
    probe, root_only = running_probe(socket, config_id), root_only_probe(socket)
    running = file_ok and host.get_fact(CommandSucceeds, command=probe)
    q = shlex.quote
    # a reload hands the listening sockets to the new workers as they are: a Runtime API socket another
    # configuration created (Debian's: 660, group haproxy) keeps its mode, so it is made root-only here
    chmod = StringCommand(f"chown root:root {q(socket)} && chmod 600 {q(socket)}")
    if running:
        if host.get_fact(CommandSucceeds, command=root_only):
            host.noop(f"{path} up to date, HAProxy runs it, {socket} root only")
        else:
            yield chmod
        return
    if not file_ok:
        new = f"{path}.tritonfleet-new"
        refused = q(f"ERROR: HAProxy refuses the new configuration ({new}, left for inspection); "
                    f"{path} and the running HAProxy are unchanged")
        yield StringCommand(f"mkdir -p {q(posixpath.dirname(path))}")
        yield FileUploadCommand(BytesIO(content.encode()), new, remote_temp_filename=None)
        yield StringCommand(f"chmod {mode} {q(new)}")
        yield StringCommand(f"haproxy -c -f {q(new)} >&2 || {{ echo {refused} >&2; exit 1; }}")
        yield StringCommand(f"mv -f {q(new)} {q(path)}")
    yield StringCommand(f"systemctl reload-or-restart {q(unit)}")
    failed = q(f"ERROR: HAProxy did not load {path} within {RELOAD_WAIT} s and goes on with its previous "
               f"configuration; `journalctl -u {unit}` says why")
    tries = RELOAD_WAIT * 5
    yield StringCommand(f"for i in $(seq {tries}); do {probe} && exit 0; sleep 0.2; done; echo {failed} >&2; exit 1")
    yield chmod
