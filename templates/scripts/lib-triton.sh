# Functions shared by the Triton scripts (included where a script says "# include: lib-triton.sh").
# tf_ready URL MODEL...: the server and every model answer ready.
tf_ready() {
  _url=$1; shift
  curl -fsS -m 2 -o /dev/null "$_url/v2/health/ready" 2>/dev/null || return 1
  for _m in "$@"; do curl -fsS -m 2 -o /dev/null "$_url/v2/models/$_m/ready" 2>/dev/null || return 1; done
}
# tf_cause CONTAINER: the first error lines of Triton's log (not the options table).
tf_cause() {
  docker logs "$1" 2>&1 | grep -E '^E[0-9]{4}|[Ee]rror|Failed|failed|Traceback' | head -n 8 >&2
}
# tf_wait CONTAINER URL TIMEOUT MODEL...: wait for readiness; stop at once when the container is not
# running (exited, restarting); on failure print why and the first error lines. One progress line.
# It looks every 0.2 s for the first 5 s (a server that is up at once is seen at once), then every second.
tf_wait() {
  _name=$1 _wurl=$2 _timeout=$3; shift 3
  _end=$(( $(date +%s) + _timeout )) _quick=25
  echo "waiting up to ${_timeout}s for $_name ($_wurl) and models: ${*:-none}" >&2
  while :; do
    tf_ready "$_wurl" "$@" && return 0
    _state=$(docker inspect -f '{{.State.Status}} {{.RestartCount}}' "$_name" 2>/dev/null || echo missing)
    case "$_state" in
      running*) ;;
      *) echo "ERROR: Triton server $_name is not running ($_state); first error lines of its log:" >&2
         tf_cause "$_name"; return 1 ;;
    esac
    if [ "$(date +%s)" -ge "$_end" ]; then
      echo "ERROR: Triton server $_name: not ready after ${_timeout}s ($_wurl; models: ${*:-none}); first error lines of its log:" >&2
      tf_cause "$_name"
      return 1
    fi
    if [ "$_quick" -gt 0 ]; then _quick=$((_quick - 1)); sleep 0.2; else sleep 1; fi
  done
}
