#!/bin/sh
# Write a secret file (content on stdin, never an argument) readable by root only: made 0600 under a
# temporary name, then renamed into place, so it is never readable by others, not even briefly.
# usage: secret-file.sh PATH
set -eu
# include: lib-lock.sh
tf_lock secret-file.sh
path=$1
umask 077
mkdir -p "$(dirname "$path")"
tmp="$path.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
chmod 600 "$tmp"
mv -f "$tmp" "$path"
