#!/usr/bin/env bash
# Fuzzes a locally running operator from its own OpenAPI document with schemathesis: no
# request may produce a 5xx. The namespace path parameter is pinned to NAMESPACE (the one the
# operator serves with --namespaces), so the fuzzer never writes outside it; `wait` and
# `timeout` are left out, since a wait that times out answers 504 by design (and does without a
# controller); the stateful phase (which would add it back through links) is left out too.
#
#   disruption-guard operator --namespaces=$NS --insecure-no-auth --rate-limit=0 \
#     --api-addr=127.0.0.1:18080 --admin-addr=127.0.0.1:19090 &
#   NAMESPACE=$NS SERVER=http://127.0.0.1:18080 tests/fuzz/schemathesis.sh
#
# Needs `pip install schemathesis` (ST=path/to/st to pick one).
set -euo pipefail
: "${NAMESPACE:?the namespace the operator serves}"
SERVER=${SERVER:-http://127.0.0.1:18080}
ST=${ST:-st}
MAX_TIME=${MAX_TIME:-120}
work=$(mktemp -d)
doc="$work/openapi.json"
trap 'rm -rf "$work"' EXIT
cd "$work" # schemathesis keeps its state in .schemathesis/ of the current directory
curl -fsS "$SERVER/v1/openapi.json" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
for path in doc["paths"].values():
    for op in path.values():
        # Negative generation breaks enums, so `wait` is left out rather than pinned.
        op["parameters"] = [p for p in op.get("parameters", []) if p["name"] not in ("wait", "timeout")]
        for p in op["parameters"]:
            if p["name"] == "namespace":
                p["schema"] = {"type": "string", "enum": [sys.argv[1]]}
json.dump(doc, sys.stdout)
' "$NAMESPACE" > "$doc"
"$ST" run "$doc" --url "$SERVER" --checks not_a_server_error \
  --phases examples,coverage,fuzzing --max-time "$MAX_TIME" --request-timeout 75 --workers 2 --generation-database none
