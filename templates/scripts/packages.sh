#!/bin/sh
# Install (at version patterns) or remove packages with the host's package manager.
# apt: waits for the dpkg lock (bounded, naming the holder), repairs an interrupted dpkg first, refreshes
# the lists when a repository was added since the last refresh (or it is an hour old), and allows
# downgrades (pins converge).
# usage: packages.sh apt|dnf install|remove LOCK_TIMEOUT SPEC...    (SPEC: name, name=pattern, name-pattern)
set -eu
# include: lib-lock.sh
tf_lock packages.sh
family=$1 action=$2 lock_timeout=$3
shift 3
if [ "$family" = dnf ]; then
  if [ "$action" = remove ]; then exec dnf remove -y "$@"; fi
  exec dnf install -y --allowerasing "$@"
fi
export DEBIAN_FRONTEND=noninteractive
lock=/var/lib/dpkg/lock-frontend
holder() {  # the process holding the (fcntl) lock, from /proc/locks: "pid command line"
  ino=$(stat -c %i "$lock" 2>/dev/null) || return 0
  pid=$(awk -v ino="$ino" '{ n = split($6, a, ":"); if (a[n] == ino) { print $5; exit } }' /proc/locks 2>/dev/null)
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && printf '%s %s' "$pid" "$(tr '\0' ' ' < "/proc/$pid/cmdline")"
  true
}
h=$(holder)
[ -z "$h" ] || echo "waiting up to ${lock_timeout}s for the dpkg lock, held by: $h" >&2
apt_opts="-o DPkg::Lock::Timeout=$lock_timeout"
# what apt calls "dpkg was interrupted": pending updates, or packages left half-installed/-configured
interrupted() {
  [ -n "$(ls -A "${DPKG_ADMINDIR:-/var/lib/dpkg}/updates" 2>/dev/null)" ] && return 0
  dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null | grep -qE '^.[HUFWt]'
}
if interrupted; then
  # dpkg has no lock timeout of its own: wait for the holder like apt's DPkg::Lock::Timeout does
  end=$(( $(date +%s) + lock_timeout ))
  while [ -n "$(holder)" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  echo "repairing an interrupted dpkg: dpkg --configure -a" >&2
  dpkg --force-confdef --force-confold --configure -a >&2
fi
if [ "$action" = remove ]; then
  # shellcheck disable=SC2086
  exec apt-get $apt_opts remove -y -q "$@"
fi
# Refresh the lists when our stamp of the last refresh is missing, older than a sources file (a repository
# was just added) or older than an hour. (pkgcache.bin is no guide: any apt run rewrites it.)
stamp=${TRITONFLEET_APT_STAMP:-/var/lib/tritonfleet/apt-lists.stamp}
if [ ! -e "$stamp" ] || [ -n "$(find /etc/apt/sources.list /etc/apt/sources.list.d -newer "$stamp" 2>/dev/null | head -n1)" ] \
   || [ -z "$(find "$stamp" -mmin -60 2>/dev/null)" ]; then
  # shellcheck disable=SC2086
  apt-get $apt_opts update -q >&2 || { h=$(holder); echo "ERROR: apt-get update failed${h:+ (dpkg lock held by: $h)}" >&2; exit 1; }
  mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
# shellcheck disable=SC2086
apt-get $apt_opts install -y -q --no-install-recommends --allow-downgrades \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" \
  || { rc=$?; h=$(holder); echo "ERROR: apt-get install failed${h:+ (dpkg lock held by: $h)}" >&2; exit $rc; }
