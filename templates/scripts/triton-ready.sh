#!/bin/sh
# Health gate: wait until the server and every model are ready. Stops waiting as soon as the container is
# not running (exited, restarting) and reports the first error lines of Triton's log.
# usage: triton-ready.sh CONTAINER URL TIMEOUT [MODEL...]
set -u
name=$1 url=$2 timeout=$3
shift 3
probe() {
  curl -fsS -m 2 -o /dev/null "$url/v2/health/ready" 2>/dev/null || return 1
  for m in "$@"; do curl -fsS -m 2 -o /dev/null "$url/v2/models/$m/ready" 2>/dev/null || return 1; done
}
cause() {
  docker logs "$name" 2>&1 | grep -E '^E[0-9]{4}|[Ee]rror|Failed|failed|Traceback' | grep -v '^I[0-9]' | head -n 8 >&2
}
end=$(( $(date +%s) + timeout ))
echo "waiting up to ${timeout}s for $name ($url) and models: ${*:-none}" >&2
while :; do
  probe "$@" && exit 0
  state=$(docker inspect -f '{{.State.Status}} {{.RestartCount}}' "$name" 2>/dev/null || echo missing)
  case "$state" in
    running*) ;;
    *) echo "ERROR: Triton server $name is not running ($state); first error lines of its log:" >&2; cause; exit 1 ;;
  esac
  if [ "$(date +%s)" -ge "$end" ]; then
    echo "ERROR: Triton server $name: not ready after ${timeout}s ($url; models: ${*:-none}); first error lines of its log:" >&2
    cause
    exit 1
  fi
  sleep 1
done
