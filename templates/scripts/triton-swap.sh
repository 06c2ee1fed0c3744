#!/bin/sh
# Replace (or create) one Triton container without leaving serving worse than before: the old one is
# stopped and kept aside while the new one starts and passes the health gate. If `docker run` fails or
# the new server does not become ready, the old one is put back, started and checked, and the script
# fails naming what it rolled back to. Only after a successful gate is the host record (0600) written.
# usage: triton-swap.sh NAME RECORD_PATH RECORD_JSON URL TIMEOUT MODELS(comma-separated) -- DOCKER_RUN_ARGS... IMAGE COMMAND...
set -u
# include: lib-lock.sh
tf_lock triton-swap.sh
name=$1 record=$2 body=$3 url=$4 timeout=$5 models=$6
shift 7
# include: lib-triton.sh
aside="$name.previous"
docker rm -f "$aside" >/dev/null 2>&1
had_old=no
if docker inspect "$name" >/dev/null 2>&1; then
  old_image=$(docker inspect -f '{{.Config.Image}}' "$name" 2>/dev/null)
  docker stop "$name" >/dev/null && docker rename "$name" "$aside" || exit 1
  had_old=yes
fi
rollback() {
  docker rm -f "$name" >/dev/null 2>&1
  if [ "$had_old" = no ]; then
    echo "ERROR: $1; there was no previous container to roll back to" >&2
    exit 1
  fi
  docker rename "$aside" "$name" && docker start "$name" >/dev/null
  IFS=,
  # shellcheck disable=SC2086
  if tf_wait "$name" "$url" "$timeout" $models 2>/dev/null; then
    echo "ERROR: $1; rolled back to the previous container ($old_image), which serves again" >&2
  else
    echo "ERROR: $1; rolled back to the previous container ($old_image), but it is not ready either" >&2
  fi
  exit 1
}
if ! docker run -d --name "$name" "$@" >/dev/null; then
  rollback "docker run of $name failed"
fi
IFS=,
# shellcheck disable=SC2086
if ! tf_wait "$name" "$url" "$timeout" $models; then
  unset IFS
  rollback "the new $name failed its health gate"
fi
unset IFS
docker rm -f "$aside" >/dev/null 2>&1
dir=$(dirname "$record")
if ! { mkdir -p "$dir" && (umask 077 && printf '%s\n' "$body" > "$record.tmp") && mv -f "$record.tmp" "$record"; }; then
  echo "ERROR: $name was started but its record $record could not be written; the record is stale" >&2
  exit 1
fi
