#!/usr/bin/env bash
# Headless Locust run of bench/locustfile.py: a mixed chat-turn workload at a target rate.
#
#   bench/load_test.sh --host URL --key KEY [--users 16] [--spawn-rate 4] [--time 60s]
#   bench/load_test.sh --local [--users 16] [--time 60s]     # starts its own server first
#
# Against a deployment: --host and --key (or TAILOR_HOST and TAILOR_API_KEY). The target rate
# is users x TAILOR_LOAD_RATE (1 request/s per Locust user by default); the mix and the pool of
# end users are set by the TAILOR_LOAD_* variables described in bench/locustfile.py.
#
# --local: a fresh `tailor serve` on loopback (embedded SQLite, the shipped models), its LLM an
# OpenAI-compatible stub that answers at once (bench/pipeline_latency.py's), extraction by the
# rules, so the figures are Tailor's own time; --llm embedded uses the embedded SmolLM2 instead.
#
# Prints Locust's table (requests, failures, percentiles up to p99 per route) and then a
# summary: per route and in all, requests/s, p50/p95/p99 and the answers by status. CSV files
# and the summary's JSON go to --out (default: a new temporary folder).
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
HOST=${TAILOR_HOST:-}
KEY=${TAILOR_API_KEY:-}
USERS=16
SPAWN=4
DURATION=60s
LOCAL=0
LLM=instant
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --host) HOST=$2; shift 2 ;;
        --key) KEY=$2; shift 2 ;;
        --users|-u) USERS=$2; shift 2 ;;
        --spawn-rate|-r) SPAWN=$2; shift 2 ;;
        --time|-t) DURATION=$2; shift 2 ;;
        --local) LOCAL=1; shift ;;
        --llm) LLM=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "error: unknown option $1" >&2; exit 1 ;;
    esac
done
OUT=${OUT:-$(mktemp -d -t tailor-load-XXXXXX)}
mkdir -p "$OUT"

if [ ! -x "$VENV/bin/locust" ]; then
    echo "installing the bench extra (locust) into $VENV" >&2
    "$VENV/bin/pip" install -q -e ".[bench]"
fi

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if [ "$LOCAL" = 1 ]; then
    DATA=$OUT/data
    mkdir -p "$DATA"
    # The derived CPU graphs of an earlier `make serve`, if any: deriving them takes minutes.
    [ -d .tailor/onnx-cache ] && ln -sfn "$(realpath .tailor/onnx-cache)" "$DATA/onnx-cache"
    export TAILOR_DATA_DIR=$DATA TAILOR_LOG_LEVEL=warning
    if [ "$LLM" = instant ]; then
        LLM_PORT=$(free_port)
        "$VENV/bin/python" - "$LLM_PORT" <<'EOF' > "$OUT/llm-stub.log" 2>&1 &
import sys, time
sys.path.insert(0, "bench")
from pipeline_latency import instant_llm
instant_llm(int(sys.argv[1]))
while True:
    time.sleep(3600)
EOF
        PIDS+=($!)
        export TAILOR_LLM_BASE_URL=http://127.0.0.1:$LLM_PORT/v1 TAILOR_EXTRACTOR=rules
    fi
    "$VENV/bin/tailor" migrate > /dev/null
    KEY=$("$VENV/bin/tailor" admin create-tenant load | tail -1)
    PORT=$(free_port)
    HOST=http://127.0.0.1:$PORT
    "$VENV/bin/tailor" serve --host 127.0.0.1 --port "$PORT" > "$OUT/server.log" 2>&1 &
    PIDS+=($!)
    echo "waiting for $HOST/readyz (a first start derives the CPU graphs: minutes)" >&2
    for _ in $(seq 600); do
        curl -fs "$HOST/readyz" > /dev/null 2>&1 && break
        kill -0 "${PIDS[-1]}" 2>/dev/null || { tail -20 "$OUT/server.log" >&2; exit 1; }
        sleep 1
    done
    curl -fs "$HOST/readyz" > /dev/null || { echo "error: server not ready" >&2; exit 1; }
fi

[ -n "$HOST" ] || { echo "error: give --host URL (or --local)" >&2; exit 1; }
[ -n "$KEY" ] || { echo "error: give --key KEY (or TAILOR_API_KEY)" >&2; exit 1; }

echo "locust: $USERS users (spawn $SPAWN/s) for $DURATION against $HOST; results in $OUT" >&2
TAILOR_API_KEY=$KEY TAILOR_LOAD_SUMMARY=$OUT/summary.json \
    "$VENV/bin/locust" -f bench/locustfile.py --headless --only-summary \
    -u "$USERS" -r "$SPAWN" -t "$DURATION" --host "$HOST" --csv "$OUT/locust" \
    --exit-code-on-error 0
if [ "$LOCAL" = 1 ]; then
    echo "server log: $OUT/server.log ($(grep -c 'database is locked' "$OUT/server.log" || true) 'database is locked')" >&2
fi
