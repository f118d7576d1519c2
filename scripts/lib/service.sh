# shellcheck shell=bash
# One background service of the tests (a process listening on HTTP, started in a session of
# its own, its pid and log in a state folder), as scripts/registry.sh and scripts/otelcol.sh
# run theirs: the settings every such service has, start (reusing one this script already
# runs), stop, status, run CMD, and the commands' dispatch. Sourced after the script sets:
#
#   NAME           the script's name, first in every message
#   PREFIX         its variables' prefix (SYMFONIC_REGISTRY_): PORT, HOST, STATE,
#                  START_TIMEOUT, STARTED_FLAG and LOG_LINES after it
#   WHAT           the service as messages name it ("the OpenTelemetry Collector 0.161.0")
#   DEFAULT_PORT, DEFAULT_TIMEOUT (seconds), ROOT (the repository)
#
# and, after sourcing it, defines:
#   URL, PID_FILE, LOG   (from PORT, HOST and STATE, which this file sets)
#   OWN                  a string the service's command line holds (whose pid is ours)
#   build                builds once (cached); ready: 0 when it answers
#   launch_command       sets the array LAUNCH, the command to start it (prepared to run)
#   run_env URL          exports what `run` gives CMD (the service's URL and the like)
#   extra_command NAME   its own commands (0 when it knew NAME), and EXTRA_COMMANDS their names

log() { echo "$NAME: $*" >&2; }
die() { echo "$NAME: error: $*" >&2; exit 1; }

number() { # name value
  [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a whole number, not '$2'"
}

setting() { # name default: the value of PREFIX+name, or the default
  local variable="${PREFIX}$1"
  printf '%s' "${!variable:-$2}"
}

command -v curl >/dev/null 2>&1 || die "curl is required (the readiness check)"

PORT="$(setting PORT "$DEFAULT_PORT")"
number "${PREFIX}PORT" "$PORT"
{ [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ]; } || die "${PREFIX}PORT must be a port (1-65535), not '$PORT'"
HOST="$(setting HOST 127.0.0.1)"
[[ "$HOST" =~ ^[A-Za-z0-9.:-]+$ ]] || die "${PREFIX}HOST: '$HOST' is not a host name or address"
TIMEOUT="$(setting START_TIMEOUT "$DEFAULT_TIMEOUT")"
number "${PREFIX}START_TIMEOUT" "$TIMEOUT"
STATE="$(setting STATE "$ROOT/build/${NAME%.sh}-$PORT")"

pid_alive() {
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  # Our process only: the pid's command line holds OWN (a pid file outlives its process,
  # and the pid may be another's since).
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$OWN" || return 1
  echo "$pid"
}

start() {
  local pid
  if pid="$(pid_alive)"; then
    if ready; then log "$WHAT is already running (pid $pid) on $URL; reusing it"; echo "$URL"; return 0; fi
    die "$WHAT (pid $pid) is alive but not ready on $URL ($NAME logs; $NAME stop)"
  fi
  # Any listener, HTTP or not (a Kafka broker on the port is no such service either).
  if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
    die "something else already listens on $HOST:$PORT: set ${PREFIX}PORT to a free port"
  fi
  build
  mkdir -p "$STATE"
  launch_command
  log "starting $WHAT on $URL (log: $LOG) ..."
  local t0=$SECONDS
  # setsid: its own session, so a Ctrl-C in the caller's terminal does not reach it.
  setsid "${LAUNCH[@]}" >"$LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PID_FILE"
  while ! ready; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$WHAT exited while starting; the end of $LOG:"; tail -n 20 "$LOG" >&2; rm -f "$PID_FILE"; exit 1
    fi
    if [ $((SECONDS - t0)) -ge "$TIMEOUT" ]; then
      kill "$pid" 2>/dev/null || true
      die "$WHAT was not ready on $URL within $TIMEOUT s (${PREFIX}START_TIMEOUT; $LOG)"
    fi
    sleep 0.2
  done
  local flag
  flag="$(setting STARTED_FLAG "")"
  [ -z "$flag" ] || echo "$pid" >"$flag"
  log "$WHAT is ready (pid $pid) on $URL in $((SECONDS - t0)) s"
  echo "$URL"
}

stop() {
  local pid
  if ! pid="$(pid_alive)"; then log "none of this script runs on port $PORT"; rm -f "$PID_FILE"; return 0; fi
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then log "still running after 10 s: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$PID_FILE"
  log "stopped (pid $pid)"
}

status() {
  local pid
  if pid="$(pid_alive)" && ready; then echo "running (pid $pid) on $URL"; return 0; fi
  echo "not running on port $PORT"; return 3
}

run() {
  local url flag started=0 rc=0
  [ $# -gt 0 ] || die "run: no command given"
  flag="$(mktemp)"; rm -f "$flag"
  url="$(export "${PREFIX}STARTED_FLAG=$flag"; start)"
  if [ -s "$flag" ]; then started=1; fi
  rm -f "$flag"
  # shellcheck disable=SC2317  # (called by the trap)
  stop_if_started() { if [ "$started" = 1 ]; then stop || true; fi; }
  trap stop_if_started EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
  run_env "$url"
  "$@" || rc=$?
  exit "$rc"
}

dispatch() { # the command line
  case "${1:-help}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    url) echo "$URL" ;;
    run) shift; run "$@" ;;
    logs) tail -n "$(setting LOG_LINES 200)" "$LOG" ;;
    help|-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
    *) extra_command "$1" ||
         die "unknown command '$1' (start, stop, status, url, run, $EXTRA_COMMANDS, logs, help)" ;;
  esac
}
