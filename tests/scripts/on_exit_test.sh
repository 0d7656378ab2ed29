#!/usr/bin/env bash
# scripts/lib/on-exit.sh: a script whose clean-up is under way finishes it when a second signal comes,
# whether that is a second Ctrl-C or the same signal sent to the pid and then to the process group
# (what `timeout` and service managers do). The clean-up below waits for the test's word, so the second
# signal surely arrives while it runs; every wait is for a file, bounded.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/on-exit-test-XXXXXX")"
GROUPS_STARTED=()
# A failed check leaves no script or sleep of this test behind.
# shellcheck disable=SC2317 # called by the EXIT trap
finish() {
  local g
  for g in ${GROUPS_STARTED[@]+"${GROUPS_STARTED[@]}"}; do kill -KILL -- "-$g" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap finish EXIT

cat >"$WORK/script" <<SCRIPT
#!/usr/bin/env bash
set -euo pipefail
. "$ROOT/scripts/lib/on-exit.sh"
DIR="\$1"
cleanup() {
  echo started >"\$DIR/cleanup-started"
  # Its children (this wait's) are in the script's process group, as a server's stop command is.
  for _ in \$(seq 1 400); do [ -e "\$DIR/release" ] && break; sleep 0.05; done
  echo done >"\$DIR/cleanup-done"
}
on_exit cleanup
echo ready >"\$DIR/ready"
sleep 60 & # stands in for the servers the script waits on
wait
SCRIPT
chmod +x "$WORK/script"

wait_for() {  # file what
  for _ in $(seq 1 400); do [ -e "$1" ] && return 0; sleep 0.05; done
  echo "FAIL: $2 (no $1 after 20 s)" >&2; exit 1
}
fails=0
for how in twice group; do
  d="$WORK/$how"; mkdir -p "$d"
  setsid "$WORK/script" "$d" &
  pid=$!
  GROUPS_STARTED+=("$pid")
  wait_for "$d/ready" "$how: the script started"
  kill -TERM "$pid"
  wait_for "$d/cleanup-started" "$how: the clean-up started on the first signal"
  if [ "$how" = twice ]; then kill -TERM "$pid"; else kill -TERM -- "-$pid"; fi
  touch "$d/release"
  status=0; wait "$pid" || status=$?
  if [ -e "$d/cleanup-done" ] && [ "$status" = 143 ]; then
    echo "ok: $how: the clean-up finished after the second signal (exit $status)"
  else
    echo "FAIL: $how: clean-up finished: $([ -e "$d/cleanup-done" ] && echo yes || echo no), exit $status (want 143)" >&2
    fails=1
  fi
done
exit "$fails"
