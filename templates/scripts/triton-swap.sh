#!/bin/sh
# Replace (or create) one Triton container safely: the old one is stopped and kept aside while the new
# one starts; if `docker run` fails the old one is put back and started again. After a successful swap
# the host record (0600) is written atomically.
# usage: triton-swap.sh NAME RECORD_PATH RECORD_JSON -- DOCKER_RUN_ARGS... IMAGE COMMAND...
set -u
name=$1 record=$2 body=$3
shift 4
aside="$name.previous"
docker rm -f "$aside" >/dev/null 2>&1
if docker inspect "$name" >/dev/null 2>&1; then
  docker stop "$name" >/dev/null && docker rename "$name" "$aside" || exit 1
fi
if ! docker run -d --name "$name" "$@" >/dev/null; then
  docker rm -f "$name" >/dev/null 2>&1
  if docker inspect "$aside" >/dev/null 2>&1; then
    docker rename "$aside" "$name" && docker start "$name" >/dev/null
  fi
  echo "ERROR: docker run of $name failed; the previous container (if any) was restored" >&2
  exit 1
fi
docker rm -f "$aside" >/dev/null 2>&1
dir=$(dirname "$record")
if ! { mkdir -p "$dir" && (umask 077 && printf '%s\n' "$body" > "$record.tmp") && mv -f "$record.tmp" "$record"; }; then
  echo "ERROR: $name was started but its record $record could not be written; the record is stale" >&2
  exit 1
fi
