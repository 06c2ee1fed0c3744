#!/bin/sh
# Bring the live model repository in line with a complete staged copy, one atomic rename per file, so
# Triton never reads a half-written file; files and directories the staged copy lacks are removed
# (no empty model directories are left behind).
# usage: models-switch.sh STAGING LIVE
set -eu
staging=$1 live=$2
mkdir -p "$live"
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
