# Sourced by the scripts, the benchmarks and the deploy tests: learns the address a daemon
# listens on from its log (they log "gateway on HOST:PORT", "admin on HOST:PORT", ...).
#
#   address_after LOG MARKER [PID]  waits up to 30 s for "MARKER HOST:PORT" in LOG and prints
#                                   HOST:PORT; returns 1, with the log on standard error, when it
#                                   never appears or process PID (if given) exits first.
address_after() {
  local log=$1 marker=$2 pid=${3:-} found
  for _ in $(seq 1500); do
    found=$(grep -o -m1 "$marker [0-9.]*:[0-9]*" "$log" 2>/dev/null) || true
    if [[ -n $found ]]; then
      found=${found%%$'\n'*}
      echo "${found##* }"
      return 0
    fi
    [[ -z $pid ]] || kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  echo "'$marker' never appeared in $log; it says:" >&2
  cat "$log" >&2
  return 1
}
