#!/usr/bin/env bash
# The orders example, end to end: an HTTP API, workers, a stream
# projection, a schedule and the dashboard on one data directory, then a
# check of every store. See README.md beside this script.
#
# Usage: examples/orders/run.sh [options]
#   --alk-host PATH       the alk-host binary            [$ALK_HOST, else alk-host on PATH]
#   --guests DIR          where orders-*.wasm are        [$ORDERS_GUESTS, else target/guests of this repository]
#   --data-dir DIR        the stores; new or empty       [$ORDERS_DATA_DIR, else a new temporary directory]
#   --log-dir DIR         each process's output          [$ORDERS_LOG_DIR, else beside the data directory]
#   --orders N            orders to place                [$ORDERS_N, else 60]
#   --workers N           worker processes               [$ORDERS_WORKERS, else 3]
#   --work-ms MS          time each order takes a worker [$ORDERS_WORK_MS, else 20]
#   --dashboard-addr ADDR where the dashboard listens    [$ORDERS_DASHBOARD_ADDR, else 127.0.0.1:0, a free port]
#   --hold                keep the dashboard up after the summary, until Ctrl-C
#
# Exits 0 when the check passes, 1 when it fails or a process failed, 2 on
# a usage or setup error.

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

alk_host=${ALK_HOST:-alk-host}
guests=${ORDERS_GUESTS:-$repo/target/guests}
data_dir=${ORDERS_DATA_DIR:-}
log_dir=${ORDERS_LOG_DIR:-}
orders=${ORDERS_N:-60}
workers=${ORDERS_WORKERS:-3}
work_ms=${ORDERS_WORK_MS:-20}
dashboard_addr=${ORDERS_DASHBOARD_ADDR:-127.0.0.1:0}
hold=0

die() {
    echo "run.sh: error: $*" >&2
    exit 2
}

usage() {
    sed -n '/^# Usage:/,/^# a usage/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case "$1" in
        --alk-host) alk_host=${2:?--alk-host needs a path}; shift 2 ;;
        --guests) guests=${2:?--guests needs a directory}; shift 2 ;;
        --data-dir) data_dir=${2:?--data-dir needs a directory}; shift 2 ;;
        --log-dir) log_dir=${2:?--log-dir needs a directory}; shift 2 ;;
        --orders) orders=${2:?--orders needs a number}; shift 2 ;;
        --workers) workers=${2:?--workers needs a number}; shift 2 ;;
        --work-ms) work_ms=${2:?--work-ms needs a number}; shift 2 ;;
        --dashboard-addr) dashboard_addr=${2:?--dashboard-addr needs an address}; shift 2 ;;
        --hold) hold=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1' (see the options above)" ;;
    esac
done

# --- What it needs, checked before anything starts --------------------------

is_count() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
is_count "$orders" 1 9999 || die "--orders '$orders' must be a whole number from 1 to 9999"
is_count "$workers" 1 64 || die "--workers '$workers' must be a whole number from 1 to 64"
is_count "$work_ms" 0 60000 || die "--work-ms '$work_ms' must be a whole number of milliseconds up to 60000"

if ! command -v "$alk_host" >/dev/null 2>&1; then
    die "cannot find the alk-host binary '$alk_host': put it on PATH or give --alk-host PATH (\`cargo xtask example\` builds it and runs this script)"
fi
alk_host=$(command -v "$alk_host")
case "$alk_host" in
    /*) ;;
    *) alk_host=$(cd "$(dirname "$alk_host")" && pwd)/$(basename "$alk_host") ;;
esac
command -v curl >/dev/null 2>&1 || die "curl is needed to place the orders: install it (Debian: apt-get install curl)"
for g in orders-api orders-worker orders-projection orders-admin; do
    [ -f "$guests/$g.wasm" ] || die "$guests/$g.wasm is missing: build the example's guests with \`cargo xtask example\` (or \`cargo xtask guests\`), or give --guests DIR"
done

if [ -z "$data_dir" ]; then
    base=$(mktemp -d "${TMPDIR:-/tmp}/alk-orders.XXXXXX")
    data_dir=$base/data
    : "${log_dir:=$base/logs}"
elif [ -e "$data_dir" ] && [ -n "$(ls -A "$data_dir" 2>/dev/null)" ]; then
    die "the data directory $data_dir is not empty: give a new one (the check counts every order the stores hold), or remove it first"
fi
: "${log_dir:=$data_dir.logs}"
mkdir -p "$data_dir" "$log_dir" || die "cannot create $data_dir and $log_dir"
data_dir=$(cd "$data_dir" && pwd)
log_dir=$(cd "$log_dir" && pwd)

# --- Child processes: every one is stopped when the script ends -------------

pids=()
cleanup() {
    local pid
    for pid in ${pids[@]+"${pids[@]}"}; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in ${pids[@]+"${pids[@]}"}; do
        # Each stops within its shutdown timeout (10 s); then it is killed.
        for _ in $(seq 1 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted; stopping the processes it started" >&2; exit 130' INT
trap 'echo "run.sh: terminated; stopping the processes it started" >&2; exit 143' TERM

forget() {
    local keep=() pid
    for pid in ${pids[@]+"${pids[@]}"}; do
        [ "$pid" = "$1" ] || keep+=("$pid")
    done
    pids=("${keep[@]+"${keep[@]}"}")
}

# Waits until FILE has a line matching PATTERN, printing it; fails when
# process PID exits first or after SECONDS (generous: the first start of a
# component compiles it).
wait_for_line() {
    local file=$1 pattern=$2 pid=$3 what=$4 seconds=${5:-120} line
    local deadline=$((SECONDS + seconds))
    while true; do
        line=$(grep -m1 -E "$pattern" "$file" 2>/dev/null || true)
        if [ -n "$line" ]; then
            printf '%s\n' "$line"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "run.sh: error: $what exited before it was ready; its output ($file):" >&2
            tail -n 20 "$file" >&2
            exit 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "run.sh: error: $what was not ready after $seconds s; its output ($file):" >&2
            tail -n 20 "$file" >&2
            exit 1
        fi
        sleep 0.1
    done
}

# Sends SIGTERM to PID and waits for it; fails unless it exits 0.
stop() {
    local pid=$1 what=$2 status=0
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || status=$?
    forget "$pid"
    if [ "$status" -ne 0 ]; then
        echo "run.sh: $what exited with status $status on SIGTERM; see $log_dir" >&2
        failed=1
    fi
}

store=(--data-dir "$data_dir")
failed=0

echo "orders example: $orders orders, $workers workers"
echo "  data: $data_dir"
echo "  logs: $log_dir"

# --- 1. Setup: the report schedule -------------------------------------------

"$alk_host" run "$guests/orders-admin.wasm" "${store[@]}" -- setup \
    >"$log_dir/setup.log" 2>&1 || {
    cat "$log_dir/setup.log" >&2
    echo "run.sh: error: the setup failed (output above)" >&2
    exit 1
}
sed 's/^/  /' "$log_dir/setup.log"

# --- 2. The servers: the API, the dashboard, the schedule runner -------------

"$alk_host" serve "$guests/orders-api.wasm" "${store[@]}" --addr 127.0.0.1:0 \
    >"$log_dir/serve.log" 2>&1 &
serve_pid=$!
pids+=("$serve_pid")
line=$(wait_for_line "$log_dir/serve.log" '^Serving HTTP on http://' "$serve_pid" "alk-host serve")
api=${line#Serving HTTP on }
api=${api%/}

"$alk_host" dashboard "${store[@]}" --addr "$dashboard_addr" \
    >"$log_dir/dashboard.log" 2>&1 &
dashboard_pid=$!
pids+=("$dashboard_pid")
line=$(wait_for_line "$log_dir/dashboard.log" '^Dashboard of .* on http://' "$dashboard_pid" "alk-host dashboard")
dashboard=${line##* on }

"$alk_host" schedules run "${store[@]}" >"$log_dir/schedules.log" 2>&1 &
runner_pid=$!
pids+=("$runner_pid")
wait_for_line "$log_dir/schedules.log" '^runner .* started' "$runner_pid" "alk-host schedules run" >/dev/null

echo "  API:       $api/  (POST /orders, GET /summary, GET /progress)"
echo "  dashboard: $dashboard  (open it to watch the queues)"
echo "  schedules: a runner fires orders-report every second ($log_dir/schedules.log)"

# --- 3. The orders, placed through the API ----------------------------------

customers=(ada grace linus barbara ken)
sent=0
cents=0

# Places order N. A 503 whose body says `"retry":true` (the store was busy
# and nothing was stored) and a refused connection are tried again, as a
# client of a real service would; any other failure stops the run, since
# the order may or may not have been placed.
place() {
    local n=$1 id customer amount body status try
    id=$(printf 'o-%04d' "$n")
    # Runs of three orders per customer: one customer's orders are handled
    # one at a time, in order (the queue group).
    customer=${customers[$((n / 3 % ${#customers[@]}))]}
    amount=$((100 + (n * 7919) % 9900))
    body="{\"id\": \"$id\", \"customer\": \"$customer\", \"amount\": $amount}"
    for try in 1 2 3 4 5 6 7 8 9 10; do
        : >"$log_dir/last-response"
        status=$(curl -sS --max-time 60 -o "$log_dir/last-response" -w '%{http_code}' \
            -H 'content-type: application/json' --data-binary "$body" \
            "$api/orders" 2>>"$log_dir/curl.log") || true
        if [ "$status" = 202 ]; then
            sent=$((sent + 1))
            cents=$((cents + amount))
            return 0
        fi
        if [ "$status" = 503 ] && grep -q '"retry":true' "$log_dir/last-response"; then
            sleep "0.$try"
        elif [ "$status" = 000 ] && tail -n 1 "$log_dir/curl.log" | grep -q 'Failed to connect'; then
            sleep "0.$try"
        else
            echo "run.sh: error: POST $api/orders $body answered ${status:-nothing}: $(cat "$log_dir/last-response"; tail -n 1 "$log_dir/curl.log" 2>/dev/null)" >&2
            echo "run.sh: the order may or may not have been placed; see $log_dir/serve.log" >&2
            exit 1
        fi
    done
    echo "run.sh: error: POST $api/orders for $id was refused 10 times (last status $status): $(cat "$log_dir/last-response")" >&2
    exit 1
}

project() {
    "$alk_host" run "$guests/orders-projection.wasm" "${store[@]}" \
        >>"$log_dir/projection.log" 2>&1 || {
        tail -n 5 "$log_dir/projection.log" >&2
        echo "run.sh: error: the projection failed; see $log_dir/projection.log" >&2
        exit 1
    }
    echo "  $(tail -n 1 "$log_dir/projection.log")"
}

# Half of the orders, a projection run, the other half: the second run
# below resumes where the first stopped.
half=$(((orders + 1) / 2))
for n in $(seq 1 "$half"); do place "$n"; done
echo "  placed $sent orders"
project
for n in $(seq $((half + 1)) "$orders"); do place "$n"; done
echo "  placed $sent orders in all ($cents cents): $(curl -sS --max-time 30 "$api/progress")"

# The schedule's first job, so the workers have a report to write.
wait_for_line "$log_dir/schedules.log" '^fired orders-report' "$runner_pid" "alk-host schedules run" 60 >/dev/null

# --- 4. The workers, all at once on the same data ---------------------------

worker_pids=()
for i in $(seq 1 "$workers"); do
    "$alk_host" run "$guests/orders-worker.wasm" "${store[@]}" --timeout 600 \
        -- "w$i" --work-ms "$work_ms" >"$log_dir/worker-$i.log" 2>&1 &
    worker_pids+=("$!")
    pids+=("$!")
done
echo "  started $workers workers; they exit when the queue is drained"

last_progress=$SECONDS
while true; do
    running=0
    for pid in "${worker_pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then running=1; fi
    done
    [ "$running" -eq 1 ] || break
    if [ $((SECONDS - last_progress)) -ge 2 ]; then
        echo "    $(curl -sS --max-time 30 "$api/progress" 2>/dev/null || echo 'API not answering')"
        last_progress=$SECONDS
    fi
    sleep 0.2
done
for i in $(seq 1 "$workers"); do
    pid=${worker_pids[$((i - 1))]}
    status=0
    wait "$pid" || status=$?
    forget "$pid"
    echo "  $(tail -n 1 "$log_dir/worker-$i.log")"
    if [ "$status" -ne 0 ]; then
        echo "run.sh: worker w$i exited with status $status; see $log_dir/worker-$i.log" >&2
        failed=1
    fi
done

# --- 5. The projection catches up; the servers stop -------------------------

project
echo "  $(curl -sS --max-time 30 "$api/progress")"
stop "$serve_pid" "alk-host serve"
stop "$runner_pid" "alk-host schedules run"
echo "  $(grep -E '^runner .* stopped' "$log_dir/schedules.log" | tail -n 1)"
if [ "$hold" -eq 0 ]; then
    stop "$dashboard_pid" "alk-host dashboard"
fi

# --- 6. The check ------------------------------------------------------------

echo
check=0
"$alk_host" run "$guests/orders-admin.wasm" "${store[@]}" -- check "$sent" "$cents" \
    2>&1 | tee "$log_dir/check.log" || check=$?
if [ "$check" -eq 0 ] && ! grep -q '^check: passed$' "$log_dir/check.log"; then
    check=1
fi

echo
echo "Look inside: $alk_host inspect --data-dir $data_dir"
echo "             $alk_host inspect queue orders --dead --data-dir $data_dir"

status=0
if [ "$check" -ne 0 ] || [ "$failed" -ne 0 ]; then
    status=1
fi
if [ "$hold" -eq 1 ]; then
    echo "The dashboard is still at $dashboard; Ctrl-C stops it."
    trap 'exit $status' INT TERM
    wait "$dashboard_pid" || true
fi
exit "$status"
