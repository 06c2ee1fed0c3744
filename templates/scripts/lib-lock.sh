# One host-wide lock for tritonfleet's scripts that change the host (included by them; see README
# "Provisioning hosts"). A script of a killed run can still be running on the host when the next run starts:
# the newer one waits for it, bounded, naming its pid and command, instead of colliding with it.
# TF_LOCK_DIR (default /run/tritonfleet) and TF_LOCK_WAIT (seconds, default 300) are for tests and slow hosts.
tf_lock() {
  _tf_dir=${TF_LOCK_DIR:-/run/tritonfleet}
  _tf_wait=${TF_LOCK_WAIT:-300}
  mkdir -p "$_tf_dir" && chmod 700 "$_tf_dir"
  exec 9>>"$_tf_dir/host.lock"
  if ! flock -n 9; then
    _tf_holder=$(cat "$_tf_dir/host.lock.holder" 2>/dev/null || echo "unknown")
    echo "waiting up to ${_tf_wait} s for another tritonfleet script on this host: pid ${_tf_holder}" >&2
    if ! flock -w "$_tf_wait" 9; then
      echo "ERROR: another tritonfleet script still holds $_tf_dir/host.lock after ${_tf_wait} s: pid ${_tf_holder} (a killed run's? it ends by itself, or stop it: kill ${_tf_holder%% *})" >&2
      exit 1
    fi
  fi
  printf '%s %s\n' "$$" "$*" > "$_tf_dir/host.lock.holder"
}
