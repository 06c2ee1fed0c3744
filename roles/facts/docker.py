"""Docker on the host, read in one command: Triton containers, the images a run needs, server records."""

from __future__ import annotations

import json
from shlex import quote

from pyinfra.api import FactBase

from roles.facts import sections
from tritonfleet import hostcontract as hc
from tritonfleet.access.dockerinspect import INSPECT_FORMAT, parse_containers


# INSPECT_FORMAT: the fields of ``docker inspect`` that hc.container_summary reads, and nothing else: never the
# container's command line, which carries the repository secret (a fact's output is printed by `pyinfra -vvv`).
# It and its parsing are shared with `tritonfleet status` and the rollout (tritonfleet.access.health).
class DockerState(FactBase[dict]):
    """``{"containers": {name: summary}, "images": {ref: {id, labels, tags}}, "records": {name: ServerRecord}}``
    for tritonfleet's Triton containers, the images ``images`` and the server records."""

    @staticmethod
    def default() -> dict:
        return {"containers": {}, "images": {}, "records": {}}

    def command(self, images: tuple[str, ...] = ()) -> str:
        refs = " ".join(quote(i) for i in images)
        return (
            f"command -v docker >/dev/null || exit 0; echo '@@containers'; "
            f"ids=$(docker ps -aq --filter {quote(hc.TRITON_FILTER)} 2>/dev/null); "
            f"[ -z \"$ids\" ] || docker inspect --format {quote(INSPECT_FORMAT)} $ids 2>/dev/null; "
            f"for i in {refs}; do echo \"@@image $i\"; docker image inspect --format '{{{{json .}}}}' \"$i\" 2>/dev/null; done; "
            f"for f in {hc.SERVERS_DIR}/*.json; do [ -f \"$f\" ] || continue; echo \"@@record $f\"; cat \"$f\"; echo; done; true"
        )

    def process(self, output: list[str]) -> dict:
        out = self.default()
        for key, lines in sections(output).items():
            text = "\n".join(lines).strip()
            if key == "containers":  # one JSON object per container (INSPECT_FORMAT)
                out["containers"] = parse_containers(lines)
            elif key.startswith("image ") and text.startswith("{"):
                data = json.loads(text)
                out["images"][key[6:]] = {"id": data.get("Id"),
                                          "labels": (data.get("Config") or {}).get("Labels") or {},
                                          "tags": data.get("RepoTags") or []}
            elif key.startswith("record "):
                record = hc.ServerRecord.from_json(text)
                if record is not None:
                    out["records"][record.name] = record
        return out


class NamedContainers(FactBase[dict]):
    """``{name: {"running": bool, "spec": label com.tritonfleet.spec or None, "image": ref}}`` of the named
    containers that exist (other than Triton's: exporters)."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, names: tuple[str, ...]) -> str:
        fmt = quote("{{json .State.Running}} {{json .Config.Labels}} {{json .Config.Image}}")
        return (f"command -v docker >/dev/null || exit 0; for n in {' '.join(quote(n) for n in names)}; do "
                f"docker inspect --format {fmt} \"$n\" 2>/dev/null | sed \"s|^|$n |\"; done; true")

    def process(self, output: list[str]) -> dict:
        out = {}
        decoder = json.JSONDecoder()
        for line in output:
            name, _, rest = line.partition(" ")
            try:
                running, end = decoder.raw_decode(rest)
                labels, end2 = decoder.raw_decode(rest, end + 1)
                image, _ = decoder.raw_decode(rest, end2 + 1)
            except ValueError:
                continue
            out[name] = {"running": bool(running), "spec": (labels or {}).get(hc.LABEL_SPEC), "image": image}
        return out
