"""Custom pyinfra operations used by the roles.

Each reads a fact, then either does nothing (``host.noop``) or yields exactly the commands needed, so
a second run of any deploy changes nothing. Checks that must see the state *after* earlier operations
(device counts, image compatibility, health) only act at execute time, when pyinfra re-evaluates
operations with fresh facts; a failed check yields a command that prints the reason and exits 1.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import shlex
from collections.abc import Mapping

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages

from roles import facts
from tritonfleet import compat


def fail(message: str) -> StringCommand:
    """A command that prints ``message`` on stderr and fails the operation with it."""
    return StringCommand(f"echo {shlex.quote('ERROR: ' + message)} >&2; exit 1")


def _executing() -> bool:
    return bool(host.state.is_executing)


@operation()
def keyring(src: str, dest: str, fingerprint: str, armored: bool = False):
    """
    Install an OpenPGP key for ``signed-by=`` (binary keyring) or rpm (``armored``) after checking
    its fingerprint.

    + src: URL of the (armored or binary) public key
    + dest: keyring path, e.g. /etc/apt/keyrings/neuron.gpg
    + fingerprint: expected 40-hex fingerprint; a mismatch fails before anything is written
    + armored: keep the key as downloaded (rpm ``gpgkey=file://`` wants ASCII armor)
    """
    fingerprint = fingerprint.replace(" ", "").upper()
    if fingerprint in host.get_fact(facts.KeyringFingerprints, path=dest):
        host.noop(f"keyring {dest} holds {fingerprint}")
        return
    q = shlex.quote
    script = (
        "set -e; umask 022; tmp=$(mktemp -d); trap 'rm -rf $tmp' EXIT; "
        f"curl -fsSL --retry 3 -o $tmp/key {q(src)} || {{ echo 'ERROR: cannot download key {src}' >&2; exit 1; }}; "
        "n=$(gpg --batch --show-keys --with-colons $tmp/key 2>/dev/null | grep -c '^pub' || true); "
        f"[ \"$n\" = 1 ] || {{ echo \"ERROR: {src} holds $n keys, expected exactly one; "
        "nothing was installed\" >&2; exit 1; }; "
        "got=$(gpg --batch --show-keys --with-colons $tmp/key 2>/dev/null | awk -F: '/^fpr/{print $10; exit}'); "
        f"if [ \"$got\" != {q(fingerprint)} ]; then "
        f"echo \"ERROR: key fingerprint mismatch for {src}: expected {fingerprint}, got ${{got:-no key}}; "
        "nothing was installed (check the key source, or the expected fingerprint in host data)\" >&2; exit 1; fi; "
        f"mkdir -p $(dirname {q(dest)}); "
        + ("cp $tmp/key $tmp/keyring; " if armored else
           "gpg --batch --yes --dearmor -o $tmp/keyring < $tmp/key 2>/dev/null || cp $tmp/key $tmp/keyring; ")
        + f"install -m 644 $tmp/keyring {q(dest)}"
    )
    yield StringCommand(script)


def apt_update_needed(packages: list[str]) -> bool:
    """Whether installing ``packages`` needs fresh apt lists: only when one of them is missing, so a
    re-run a day later still changes nothing (read before the deploy changes anything)."""
    installed = host.get_fact(DebPackages)
    return any(p.split("=", 1)[0] not in installed for p in packages)


def _installed_versions(family: str) -> Mapping[str, list[str]]:
    if family == "apt":
        return host.get_fact(DebPackages)
    return host.get_fact(RpmPackages)


def _matches(installed: list[str], pattern: str) -> bool:
    base = [v.split(":", 1)[-1] for v in installed]
    return any(fnmatch.fnmatch(v, pattern) or v == pattern for v in base)


@operation()
def pinned_packages(pins: Mapping[str, str], family: str):
    """
    Install packages at pinned version patterns (``2.30.2.0*``, ``2.24.*``), downgrading if needed.

    + pins: package name -> version pattern
    + family: ``apt`` or ``dnf``
    """
    installed = _installed_versions(family)
    todo = {name: pat for name, pat in pins.items() if not _matches(installed.get(name, []), pat)}
    if not todo:
        host.noop("pinned packages already at " + ", ".join(f"{n} {p}" for n, p in pins.items()))
        return
    if family == "apt":
        args = " ".join(shlex.quote(f"{n}={p}") for n, p in todo.items())
        yield ("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --allow-downgrades "
               f"-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold {args}")
    elif family == "dnf":
        args = " ".join(shlex.quote(f"{n}-{p}") for n, p in todo.items())
        yield f"dnf install -y --allowerasing {args}"
    else:
        raise OperationError(f"no package manager support for {family!r}")


@operation()
def verify_neuron_devices(instance_type: str, expected: int, headers_package: str):
    """
    Fail with the reason and the fix when the Neuron devices differ from the instance type's.

    Acts at execute time (after the driver install); changes nothing.

    + instance_type: e.g. inf2.24xlarge
    + expected: devices the instance type has
    + headers_package: the kernel headers package for the running kernel (named in the fix)
    """
    if not _executing():
        return
    state = host.get_fact(facts.NeuronState)
    found = len(state.get("devices", []))
    if found != expected:
        if found == 0 and not state.get("driver_package"):
            reason = "aws-neuronx-dkms is not installed"
        elif found == 0 and not state.get("headers"):
            reason = f"the neuron driver is not loaded; is {headers_package} installed?"
        elif found == 0:
            reason = (f"the neuron driver is not loaded; is {headers_package} installed? "
                      "(then reinstall aws-neuronx-dkms, or reboot)")
        else:
            reason = "the instance type in host data does not match this machine (check instance_type)"
        yield fail(f"{instance_type} should have {expected} Neuron devices, found {found}: {reason}")
        return
    if state.get("neuron_ls_error"):
        yield fail(f"neuron-ls -j failed: {state['neuron_ls_error']}")
        return
    listed = state.get("neuron_ls")
    if isinstance(listed, list) and len(listed) != expected:
        yield fail(f"{instance_type} should have {expected} Neuron devices, neuron-ls reports {len(listed)}")
        return
    loaded, pkg = state.get("driver_loaded"), state.get("driver_package")
    if loaded and pkg and not pkg.startswith(loaded):
        yield fail(f"the loaded neuron driver is {loaded} but aws-neuronx-dkms {pkg} is installed: "
                   "stop processes using /dev/neuron*, then `rmmod neuron && modprobe neuron` (or reboot)")
        return
    host.noop(f"{found} Neuron devices, driver {pkg}")


@operation()
def verify_gpus(instance_type: str, expected: int):
    """
    Fail when ``nvidia-smi`` does not show the instance type's GPUs (acts at execute time).

    + instance_type: e.g. g5.xlarge
    + expected: GPUs the instance type has
    """
    if not _executing():
        return
    smi = host.get_fact(facts.NvidiaSmi)
    if smi["error"] or len(smi["gpus"]) != expected:
        yield fail(f"{instance_type} should have {expected} GPUs, nvidia-smi shows {len(smi['gpus'])}: "
                   f"{smi['error'] or 'check the NVIDIA driver'}")
        return
    host.noop(f"{expected} GPUs: {smi['gpus'][0]}")


@operation()
def efa_installer(installer_url: str, signature_url: str, key_url: str, fingerprint: str):
    """
    Install EFA with the AWS installer after verifying its GPG signature against a pinned key.

    + installer_url: aws-efa-installer tarball URL
    + signature_url: detached signature URL
    + key_url: the signing key URL
    + fingerprint: expected key fingerprint
    """
    if host.get_fact(facts.CommandSucceeds, command="test -d /opt/amazon/efa"):
        host.noop("EFA is installed (/opt/amazon/efa)")
        return
    q = shlex.quote
    fpr = fingerprint.replace(" ", "").upper()
    yield StringCommand(
        "set -e; tmp=$(mktemp -d); trap 'rm -rf $tmp' EXIT; cd $tmp; export GNUPGHOME=$tmp/gnupg; "
        "mkdir -m 700 $GNUPGHOME; "
        f"curl -fsSL --retry 3 -o installer.tar.gz {q(installer_url)}; curl -fsSL --retry 3 -o installer.sig "
        f"{q(signature_url)}; curl -fsSL --retry 3 -o key {q(key_url)}; "
        "got=$(gpg --batch --show-keys --with-colons key | awk -F: '/^fpr/{print $10; exit}'); "
        f"[ \"$got\" = {q(fpr)} ] || {{ echo \"ERROR: EFA key fingerprint mismatch: expected {fpr}, got $got\" >&2; "
        "exit 1; }; gpg --batch --import key 2>/dev/null; "
        "gpg --batch --status-fd 1 --verify installer.sig installer.tar.gz 2>/dev/null "
        f"| grep -q '^\\[GNUPG:\\] VALIDSIG .*{fpr}' || "
        "{ echo 'ERROR: EFA installer signature does not verify with the pinned key; not installing' >&2; exit 1; }; "
        "tar xzf installer.tar.gz; cd aws-efa-installer; ./efa_installer.sh -y"
    )


@operation()
def docker_image(image: str, source: str, archive: str | None = None, build_dir: str | None = None,
                 context_files: Mapping[str, str] | None = None):
    """
    Make ``image`` present: ``docker load`` an archive, ``docker pull`` it, or build it from ``build_dir``.

    + image: image reference (a content-hash tag for built images)
    + source: archive | pull | build
    + archive: path of a ``docker save`` tarball on the host (source=archive)
    + build_dir: directory on the host with the Dockerfile (source=build)
    + context_files: build-context name -> host file copied in before the build (e.g. repository keys)
    """
    if host.get_fact(facts.DockerImageInfo, image=image):
        host.noop(f"image {image} present")
        return
    q = shlex.quote
    if source == "archive":
        yield StringCommand(
            f"test -f {q(archive or '')} || {{ echo 'ERROR: image archive {archive} not found on the host' >&2; "
            f"exit 1; }}; docker load -q -i {q(archive or '')} && docker image inspect {q(image)} >/dev/null "
            f"|| {{ echo 'ERROR: {archive} does not contain {image}' >&2; exit 1; }}"
        )
    elif source == "pull":
        yield f"docker pull -q {q(image)}"
    elif source == "build":
        for name, src in (context_files or {}).items():
            yield f"cp {q(src)} {q(posixpath.join(build_dir or '', name))}"
        yield f"DOCKER_BUILDKIT=0 docker build -q -t {q(image)} {q(build_dir or '')}"
    else:
        raise OperationError(f"unknown image source {source!r}")


@operation()
def neuron_compat_gate(image: str, runtime_from_data: str | None, neuron_arch: str | None = None):
    """
    Refuse to start Triton when the image's Neuron runtime needs a newer driver than the host has.

    Acts at execute time; changes nothing. The runtime version comes from the image label
    ``com.tritonfleet.neuron.runtime-lib`` (data overrides when the image has no label).

    + image: Triton image reference
    + runtime_from_data: aws-neuronx-runtime-lib version from host data, if any
    + neuron_arch: inf1 | inf2 | trn1 | trn2 (inf1 hosts cannot take a newer driver)
    """
    if not _executing():
        return
    info = host.get_fact(facts.DockerImageInfo, image=image)
    runtime = (info.get("labels") or {}).get("com.tritonfleet.neuron.runtime-lib") or runtime_from_data
    driver = host.get_fact(facts.NeuronState).get("driver_package")
    if not runtime:
        host.noop("image declares no Neuron runtime version; gate skipped")
        return
    if not driver:
        yield fail("no aws-neuronx-dkms on the host: run deploys/neuron.py (the driver goes on the host)")
        return
    try:
        compat.check_driver_runtime(driver, runtime, neuron_arch=neuron_arch)
    except compat.CompatibilityError as exc:
        yield fail(str(exc))
        return
    host.noop(f"runtime {runtime} works with driver {driver}")


def _redact(args: list[str], secret: str | None) -> list[str]:
    return [a.replace(secret, "<redacted>") for a in args] if secret else list(args)


@operation()
def triton_container(container: str, image: str, spec_hash: str, run_args: list[str], command: list[str],
                     state_dir: str = "/var/lib/tritonfleet", secret: str | None = None):
    """
    One Triton container, recreated only when its spec (``spec_hash``) or image changes.

    A changed container is swapped safely: the old one is stopped and kept aside while the new one
    starts; if ``docker run`` fails, the old one is put back and started again. After a successful
    swap ``state_dir/servers/NAME.json`` (0600, secret redacted) records the new spec and keeps the
    previous image and spec under ``previous`` for rollback.

    + container: container name
    + image: image reference
    + spec_hash: hash of everything that defines the container
    + run_args: ``docker run`` options (devices, ulimits, env, ports, mounts, labels)
    + command: tritonserver command line
    + state_dir: where the current/previous spec record lives
    + secret: a value to keep out of the record (the repository secret)
    """
    name = container
    current = host.get_fact(facts.TritonContainers).get(name)
    image_id = (host.get_fact(facts.DockerImageInfo, image=image) or {}).get("id")
    if current and current["spec"] == spec_hash and current["running"] and (
            image_id is None or current["image_id"] == image_id):
        host.noop(f"container {name} is up to date")
        return
    q = shlex.quote
    aside = f"{name}.previous"
    record = {"name": name, "image": image, "spec": spec_hash, "run_args": _redact(run_args, secret),
              "command": _redact(command, secret)}
    path = f"{state_dir}/servers/{name}.json"
    run = " ".join(["docker", "run", "-d", "--name", q(name), *[q(a) for a in run_args], q(image),
                    *[q(c) for c in command]])
    restore = (f"docker rm -f {q(name)} >/dev/null 2>&1; if docker inspect {q(aside)} >/dev/null 2>&1; then "
               f"docker rename {q(aside)} {q(name)} && docker start {q(name)} >/dev/null; fi")
    save = (f"mkdir -p {q(state_dir)}/servers && umask 077 && python3 -c 'import json,os,sys; p,n=sys.argv[1],"
            "json.loads(sys.argv[2]); d=json.load(open(p)) if os.path.exists(p) else None; "
            "d and d.pop(\"previous\", None); n[\"previous\"]=d; json.dump(n, open(p+\".tmp\", \"w\"), indent=2); "
            f"os.chmod(p+\".tmp\", 0o600); os.replace(p+\".tmp\", p)' {q(path)} {q(json.dumps(record))}")
    yield StringCommand(
        f"docker rm -f {q(aside)} >/dev/null 2>&1; "
        f"if docker inspect {q(name)} >/dev/null 2>&1; then docker stop {q(name)} >/dev/null && "
        f"docker rename {q(name)} {q(aside)}; fi; "
        f"if ! {run} >/dev/null; then {restore}; echo 'ERROR: docker run of {name} failed; the previous "
        f"container (if any) was restored' >&2; exit 1; fi; "
        f"docker rm -f {q(aside)} >/dev/null 2>&1; {save}"
    )


@operation()
def triton_prune(keep: list[str]):
    """
    Remove tritonfleet Triton containers that are no longer placed on this host (they would hold
    devices and ports the new placement needs).

    + keep: container names of the current placement
    """
    stale = sorted(set(host.get_fact(facts.TritonContainers)) - set(keep))
    if not stale:
        host.noop("no stale Triton containers")
        return
    yield "docker rm -f " + " ".join(shlex.quote(n) for n in stale) + " >/dev/null"


@operation()
def triton_ready(container: str, url: str, models: list[str], timeout: int):
    """
    Health gate: wait for ``/v2/health/ready`` and every model's ready state on the host.

    On failure, prints the reason and the container's last log lines. Acts at execute time; when the
    server is already ready it changes nothing.

    + container: container name (for its logs)
    + url: base URL as seen on the host, e.g. http://127.0.0.1:8000
    + models: models that must be ready
    + timeout: seconds
    """
    if not _executing():
        return
    name = container
    checks = [f"{url}/v2/health/ready"] + [f"{url}/v2/models/{m}/ready" for m in models]
    q = shlex.quote
    probe = " && ".join(f"curl -fsS -m 2 -o /dev/null {q(c)}" for c in checks)
    ready_now = host.get_fact(facts.CommandSucceeds, command=probe)
    if ready_now:
        host.noop(f"{name} is ready ({len(models)} models)")
        return
    yield StringCommand(
        f"end=$(( $(date +%s) + {int(timeout)} )); while :; do if {probe}; then exit 0; fi; "
        f"if [ \"$(docker inspect -f '{{{{.State.Running}}}}' {q(name)} 2>/dev/null)\" != true ]; then "
        f"reason='container {name} is not running'; break; fi; "
        f"if [ $(date +%s) -ge $end ]; then reason='not ready after {int(timeout)}s ({url}; models: "
        f"{', '.join(models) or 'none'})'; break; fi; sleep 1; done; "
        f"echo \"ERROR: Triton server {name}: $reason; last log lines:\" >&2; docker logs --tail 25 {q(name)} >&2 2>&1; "
        "exit 1"
    )
