#!/bin/sh
# Model gate for a running server (explicit model control): load the models whose files changed since
# they were loaded (or that are not ready), unload models whose directory left the repository or that
# are no longer among the server's MODELs, then
# require every listed model to be READY, printing Triton's own reason for each that is not.
# A model that fails to load is put back as it was before the last switch (PREVIOUS) and loaded again,
# or, if it is new, taken out of the live repository, so a restart never meets the broken files.
# The restricted-API header line ("name: value") comes on stdin, never as an argument.
# The server itself must be ready first (it may be starting after a reboot): waited for up to TIMEOUT.
# usage: triton-models.sh CONTAINER URL TIMEOUT MODELS_DIR STAMP_DIR PREVIOUS MODEL...
set -u
# include: lib-lock.sh
tf_lock triton-models.sh
name=$1 url=$2 timeout=$3 dir=$4 stamps=$5 previous=$6
shift 6
IFS= read -r hdr || true
# include: lib-triton.sh
tf_wait "$name" "$url" "$timeout" || exit 1
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
api() {  # api PATH: POST to the repository API; body in $tmp, HTTP status printed
  curl -sS -m 300 -o "$tmp" -w '%{http_code}' -X POST -H "$hdr" "$url/v2/repository/$1" 2>/dev/null || echo 000
}
started=$(docker inspect -f '{{.State.StartedAt}}' "$name" 2>/dev/null) || { echo "ERROR: no container $name" >&2; exit 1; }
mkdir -p "$stamps"
failed=0
for m in "$@"; do
  st="$stamps/$m"
  # loaded when the container started: files as of then are what it serves
  if [ ! -e "$st" ] || [ "$(date -r "$st" +%s)" -lt "$(date -d "$started" +%s)" ]; then
    touch -d "$started" "$st"
  fi
  if [ -z "$(find "$dir/$m" -newer "$st" -print 2>/dev/null | head -n 1)" ] \
     && curl -fsS -m 2 -o /dev/null "$url/v2/models/$m/ready" 2>/dev/null; then
    continue
  fi
  echo "loading $m" >&2
  code=$(api "models/$m/load")
  if [ "$code" = 200 ]; then
    touch "$st"
    continue
  fi
  echo "ERROR: model $m did not load (HTTP $code): $(cat "$tmp")" >&2
  failed=1
  if [ -d "$previous/$m" ]; then
    rm -rf "${dir:?}/$m" && cp -a "$previous/$m" "$dir/$m"
    if [ "$(api "models/$m/load")" = 200 ]; then
      touch "$st"
      echo "ERROR: restored the previous version of $m, which serves again" >&2
    else
      echo "ERROR: restored the previous version of $m, but it does not load either: $(cat "$tmp")" >&2
    fi
  else
    rm -rf "${dir:?}/$m"
    echo "ERROR: took the new model $m out of the live repository (a restart would fail on it)" >&2
  fi
done
listed() {  # listed MODEL: one of the models of this server (the MODEL arguments)
  for l in "$@"; do [ "$l" = "$m" ] && return 0; done
  return 1
}
start_s=$(date -d "$started" +%s)
# models this gate loaded (a stamp each) whose directory left the repository: Triton's index no longer
# lists them once their directory is gone, so the stamps are what says they are still loaded. With a list
# of models, also those that are no longer this server's (triton_servers[].models): a container started
# since its stamp loaded only its own list, so the stamp goes; otherwise the model is unloaded.
for st in "$stamps"/*; do
  [ -e "$st" ] || continue
  m=${st##*/}
  why="no longer in the repository"
  if [ -d "$dir/$m" ]; then
    { [ $# -eq 0 ] || listed "$@"; } && continue
    if [ "$(date -r "$st" +%s)" -lt "$start_s" ]; then rm -f "$st"; continue; fi
    why="not one of this server's models"
  fi
  echo "unloading $m ($why)" >&2
  if [ "$(api "models/$m/unload")" = 200 ]; then rm -f "$st"; else echo "ERROR: unload of $m failed: $(cat "$tmp")" >&2; failed=1; fi
done
code=$(api index)
for m in "$@"; do
  if ! curl -fsS -m 2 -o /dev/null "$url/v2/models/$m/ready" 2>/dev/null; then
    entry=$(grep -o '{[^}]*"name":"'"$m"'"[^}]*}' "$tmp" 2>/dev/null | head -n 1)
    echo "ERROR: model $m is not ready: ${entry:-not in the repository index}" >&2
    failed=1
  fi
done
exit $failed
