#!/bin/sh
# Install the host agent into VENV from the uploaded wheelhouse, offline. pip runs from its own wheel
# (hosts may have no pip); the venv is made anew in venvs/<digest>, the stamp naming the wheelhouse is
# written last, and VENV is a symlink switched to it at the end, so an interrupted install is never the
# one in use and is redone by the next run.
# usage: agent-install.sh PYTHON VENV WHEELHOUSE DIGEST REQUIREMENT (e.g. tritonfleet-agent[qa]==0.1.0+abc)
set -eu
# include: lib-lock.sh
tf_lock agent-install.sh
py=$1 venv=$2 wh=$3 digest=$4 requirement=$5
# the oldest pip in the wheelhouse: the one resolved for the oldest supported Python
pipwhl=$(ls "$wh"/pip-*.whl | sort -V | head -n 1)
# Atomic: the venv is made in a directory of its own (venvs/<digest>: a venv cannot be moved once made),
# stamped when complete, then VENV (a symlink) is switched to it with one rename. A half-written one is
# never in use; the next install deletes it and starts again.
venvs=$(dirname "$venv")/venvs
target="$venvs/$digest"
mkdir -p "$venvs"
rm -rf "$target"
"$py" -m venv --without-pip "$target"
"$target/bin/python" "$pipwhl/pip" install --quiet --no-index --no-cache-dir --disable-pip-version-check \
  --no-warn-script-location --find-links "$wh" "$requirement"
"$target/bin/tritonfleet-agent" --help >/dev/null
echo "$digest" > "$target/.wheelhouse"
previous=$(readlink "$venv" 2>/dev/null || true)
if [ -d "$venv" ] && [ ! -L "$venv" ]; then  # the layout before venvs/: a real directory, moved aside once
  rm -rf "$venv.old" && mv "$venv" "$venv.old"
fi
ln -sfn "venvs/$digest" "$venv.tmp.$$"
mv -T "$venv.tmp.$$" "$venv"
# keep the one just replaced (an agent of a killed run may still run from it), delete the others
for d in "$venvs"/*; do
  case "$d" in "$target"|"$venvs/${previous#venvs/}") ;; *) rm -rf "$d" ;; esac
done
rm -rf "$venv.old"
echo "installed $requirement with $("$target/bin/python" -V 2>&1) in $target ($venv -> venvs/$digest)"
