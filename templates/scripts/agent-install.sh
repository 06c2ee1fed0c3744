#!/bin/sh
# Install the host agent into VENV from the uploaded wheelhouse, offline. pip runs from its own wheel
# (hosts may have no pip); the venv is made anew, and the stamp naming the wheelhouse is written last, so
# an interrupted install is redone by the next run.
# usage: agent-install.sh PYTHON VENV WHEELHOUSE DIGEST REQUIREMENT (e.g. tritonfleet-agent[qa]==0.1.0+abc)
set -eu
py=$1 venv=$2 wh=$3 digest=$4 requirement=$5
# the oldest pip in the wheelhouse: the one resolved for the oldest supported Python
pipwhl=$(ls "$wh"/pip-*.whl | sort -V | head -n 1)
rm -rf "$venv"
"$py" -m venv --without-pip "$venv"
"$venv/bin/python" "$pipwhl/pip" install --quiet --no-index --no-cache-dir --disable-pip-version-check \
  --no-warn-script-location --find-links "$wh" "$requirement"
"$venv/bin/tritonfleet-agent" --help >/dev/null
echo "$digest" > "$venv/.wheelhouse"
echo "installed $requirement with $("$venv/bin/python" -V 2>&1) in $venv"
