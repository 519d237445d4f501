#!/usr/bin/env bash
# Benchmarks a locally running operator's API with wrk (Debian package `wrk`):
#   1. open latency: 1 connection opening windows one after another (each open creates a
#      TestWindow in the API server), p50/p99 from wrk's latency distribution;
#   2. GET throughput: 50 concurrent connections reading one window.
# Point it only at an operator on loopback, scoped with --namespaces to NAMESPACE and started
# with --rate-limit=0 (or the limiter is what gets measured). Windows it opens are closed by
# nothing: delete the namespace afterwards.
#
#   NAMESPACE=$NS SERVER=http://127.0.0.1:18080 tests/bench/api.sh
set -euo pipefail
: "${NAMESPACE:?the namespace the operator serves}"
SERVER=${SERVER:-http://127.0.0.1:18080}
OPEN_SECONDS=${OPEN_SECONDS:-20}
GET_SECONDS=${GET_SECONDS:-20}
lua=$(mktemp --suffix=.lua)
trap 'rm -f "$lua"' EXIT
cat > "$lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"selector": "app=bench", "ttl": "10m", "reason": "benchmark"}'
LUA
echo "== open: 1 connection, ${OPEN_SECONDS}s"
wrk -t1 -c1 -d"${OPEN_SECONDS}s" --latency -s "$lua" "$SERVER/v1/namespaces/$NAMESPACE/windows"
name=bench-get
curl -sS -o /dev/null -X POST -H 'Content-Type: application/json' -d "{\"name\": \"$name\"}" \
  "$SERVER/v1/namespaces/$NAMESPACE/windows"
echo "== get: 50 connections, ${GET_SECONDS}s"
wrk -t2 -c50 -d"${GET_SECONDS}s" --latency "$SERVER/v1/namespaces/$NAMESPACE/windows/$name"
