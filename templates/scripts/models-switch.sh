#!/bin/sh
# Bring the live model repository in line with a complete staged copy, one atomic rename per file, so
# Triton never reads a half-written file; files and directories the staged copy lacks are removed
# (no empty model directories are left behind).
# The repository as it was is kept in PREVIOUS (hard links, so it costs no space) for the model gate to
# restore a model that fails to load. With ONLY_IF_EMPTY=1 nothing happens unless LIVE holds no model
# yet (the first fill of a new host; later switches wait until the server is up).
# usage: models-switch.sh STAGING LIVE PREVIOUS ONLY_IF_EMPTY
set -eu
# include: lib-lock.sh
tf_lock models-switch.sh
staging=$1 live=$2 previous=$3 only_if_empty=$4
mkdir -p "$live"
if [ "$only_if_empty" = 1 ] && [ -n "$(ls -A "$live")" ]; then
  exit 0
fi
rm -rf "$previous"
mkdir -p "$(dirname "$previous")"
cp -al "$live" "$previous" 2>/dev/null || cp -a "$live" "$previous"
cd "$staging"
find . -type d | while IFS= read -r d; do mkdir -p "$live/$d"; done
find . -type f | while IFS= read -r f; do
  if ! cmp -s "$f" "$live/$f"; then
    cp -p "$f" "$live/$f.tf-new"
    mv -f "$live/$f.tf-new" "$live/$f"
    echo "updated ${f#./}" >&2
  fi
done
cd "$live"
find . -depth -mindepth 1 | while IFS= read -r p; do
  if [ ! -e "$staging/$p" ]; then
    rm -rf "$p"
    echo "removed ${p#./}" >&2
  fi
done
