#!/usr/bin/env bash
# Rehydration benchmark: inserts N in-flight operations owned by one instance with SQL,
# then times changeflowd from process start to /readyz 200 (the end of "rehydrating N/M") and
# reads its resident memory with every actor live. Not part of the test suite.
#
#   bench/rehydrate.sh [--count 10000] [--rate 100000] [--build DIR] [--db-port P]
#
# Needs a running MariaDB (scripts/db start --port P; user changeflow/changeflow). The operations
# wait in APPROVAL_SENT with a stored deadline a day ahead, so resuming them calls no external
# system: the figure is the cost of loading, spawning and arming the durable timers alone.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
COUNT=10000
RATE=100000
BUILD="${CHANGEFLOW_BUILD_DIR:-$ROOT/build}"
DB_PORT=3406
while [ $# -gt 0 ]; do
  case "$1" in
    --count) COUNT="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --db-port) DB_PORT="$2"; shift 2 ;;
    *) echo "rehydrate.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
DBNAME="cf_bench_rehydrate"
MYSQL=(mariadb --no-defaults -h127.0.0.1 -P"$DB_PORT" -uchangeflow -pchangeflow)
WORK="$(mktemp -d /tmp/cf-bench-rehydrate.XXXXXX)"
PID=""
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; fi
  "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $DBNAME" 2>/dev/null || true
  rm -rf "$WORK"
}
# shellcheck source=scripts/lib/on-exit.sh
. "$ROOT/scripts/lib/on-exit.sh"
on_exit cleanup

"${MYSQL[@]}" -e "DROP DATABASE IF EXISTS $DBNAME; CREATE DATABASE $DBNAME"
HTTP_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# No external system is reached in this benchmark: the required secrets and tokens are placeholders.
cat > "$WORK/config.json" <<JSON
{"http": {"port": $HTTP_PORT},
 "db": {"host": "127.0.0.1", "port": $DB_PORT, "user": "changeflow", "password": "changeflow", "name": "$DBNAME",
        "pool_size": 4},
 "instance": {"id": "bench-a", "lease_seconds": 30},
 "rehydrate": {"rate_per_second": $RATE, "page_size": 1000},
 "gitlab": {"base_url": "http://127.0.0.1:9/api/v4", "author_token": "unused", "approver_tokens": ["unused"]},
 "auth": {"jwt_secret": "unused"},
 "callbacks": {"approval_secret": "unused", "deploy_secret": "unused"},
 "approval": {"base_url": "http://127.0.0.1:9", "callback_url": "http://127.0.0.1:9/cb"},
 "permission": {"base_url": "http://127.0.0.1:9"},
 "log": {"level": "warn"}}
JSON

start_service() {
  "$BUILD/app/changeflowd" --config "$WORK/config.json" >"$WORK/changeflowd.log" 2>&1 &
  PID=$!
}
wait_ready() {
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT/readyz" || true)" = "200" ]; do
    kill -0 "$PID" 2>/dev/null || { echo "changeflowd exited:"; tail -20 "$WORK/changeflowd.log"; exit 1; }
    sleep 0.02
  done
}

# 1. First start migrates the schema and registers the instance; stop it cleanly.
start_service
wait_ready
kill -TERM "$PID"; wait "$PID" || true; PID=""

# 2. N in-flight operations owned by bench-a (operation + binding, as create_operation writes them).
"${MYSQL[@]}" "$DBNAME" -e "
INSERT INTO operation (operation_id, subject_id, target_key, flow, step, phase, version, title, payload,
                       approval_id, next_wake_at, owner_instance, lease_epoch)
SELECT UUID(), CONCAT('bench-user-', seq), CONCAT('svc-', seq), 'approve_then_create', 10012, 'APPROVAL_SENT', 2,
       CONCAT('bench change ', seq), JSON_OBJECT('files', JSON_ARRAY()), CONCAT('appr-', seq),
       NOW(3) + INTERVAL 1 DAY, 'bench-a', 0
FROM seq_1_to_$COUNT;
INSERT INTO binding (subject_id, target_key, operation_id, phase)
SELECT subject_id, target_key, operation_id, phase FROM operation;"
echo "inserted $("${MYSQL[@]}" -N "$DBNAME" -e 'SELECT COUNT(*) FROM operation') operations"

# 3. Timed restart: process start -> /readyz 200 (every actor resumed), then memory.
BASE_RSS_KB=0
T0=$(date +%s%N)
start_service
wait_ready
T1=$(date +%s%N)
sleep 0.5
RSS_KB=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
HWM_KB=$(awk '/VmHWM/ {print $2}' "/proc/$PID/status")
LIVE=$(curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk '/^changeflow_live_actors/ {s += $2} END {print s+0}')
echo "operations=$COUNT rate_per_second=$RATE ready_after_ms=$(( (T1 - T0) / 1000000 )) live_actors=$LIVE rss_mb=$((RSS_KB / 1024)) peak_rss_mb=$((HWM_KB / 1024))"

# 4. Graceful stop with every actor live: SIGTERM -> exit (lease released for peers).
T2=$(date +%s%N)
kill -TERM "$PID"
for _ in $(seq 1 600); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$PID" 2>/dev/null; then
  echo "graceful stop did not finish within 30 s"; kill -KILL "$PID"; wait "$PID" 2>/dev/null || true; PID=""; exit 1
fi
wait "$PID" 2>/dev/null || true
PID=""
T3=$(date +%s%N)
echo "graceful_stop_ms=$(( (T3 - T2) / 1000000 )) instance_status=$("${MYSQL[@]}" -N "$DBNAME" -e "SELECT status FROM instance WHERE instance_id = 'bench-a'")"
