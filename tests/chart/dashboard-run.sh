#!/usr/bin/env bash
# A real operator run for the dashboard picture: two operator replicas (leader election) on the
# test cluster, scraped every 5 s by a real Prometheus, while a scripted scenario opens, closes
# and lets windows expire, drains a node under a protected lone pod, sends bad API requests,
# kills the leader, and drains a node under an unprotected lone pod (the eviction webhook). Then dashboard-data.py queries every dashboard panel from that Prometheus.
#
# Usage: KUBECONFIG=… tests/chart/dashboard-run.sh OUT_DATA.json
# Needs: the test cluster (tests/cluster/up), target/debug/disruption-guard, `prometheus` on PATH
# (Debian package `prometheus`), curl, python3. Everything it starts is stopped by PID on exit,
# after its windows and namespace are deleted.
set -euo pipefail

out="$(realpath -m "$1")"
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/target/debug/disruption-guard"
kubectl="${KUBECTL:-$HOME/.cache/disruption-guard/kubernetes-v1.36.3/kubectl}"
ns=dashboard-demo
work="$(mktemp -d)"
pids=()

log() { echo "[dashboard-run $(date +%H:%M:%S)] $*" >&2; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cleanup() {
  # Windows first, while the operators run: their finalizer releases what they protect.
  "$kubectl" uncordon -l type=kwok >/dev/null 2>&1 || true
  "$kubectl" -n "$ns" delete testwindows --all --wait --timeout=60s >/dev/null 2>&1 || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # The replicas registered the webhook themselves (--intercept-create-webhook, as `make run`).
  "$kubectl" delete validatingwebhookconfiguration disruption-guard --ignore-not-found >/dev/null 2>&1 || true
  "$kubectl" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

"$bin" crd | "$kubectl" apply --server-side --force-conflicts -f - >/dev/null
"$kubectl" create namespace "$ns" >/dev/null

declare -A api admin hook pid_of
start_replica() {
  local id="$1"
  [ -n "${api[$id]:-}" ] || { api[$id]="$(port)"; admin[$id]="$(port)"; hook[$id]="$(port)"; }
  "$bin" --log-format=text operator --namespaces="$ns" --insecure-no-auth \
    --api-addr="127.0.0.1:${api[$id]}" --admin-addr="127.0.0.1:${admin[$id]}" \
    --intercept-port="${hook[$id]}" --intercept-namespace="$ns" --intercept-create-webhook \
    --leader-election --leader-election-namespace="$ns" --leader-election-identity="$id" \
    --lease-duration-seconds=5 --retention=3m >>"$work/operator-$id.log" 2>&1 &
  pid_of[$id]=$!
  pids+=("$!")
}
start_replica replica-a
start_replica replica-b
for id in replica-a replica-b; do
  until curl -fsS "http://127.0.0.1:${admin[$id]}/readyz" >/dev/null 2>&1; do sleep 0.2; done
done

prom_port="$(port)"
cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 5s, evaluation_interval: 5s}
scrape_configs:
  - job_name: disruption-guard
    static_configs:
      - targets: ["127.0.0.1:${admin[replica-a]}"]
        labels: {namespace: $ns, pod: replica-a}
      - targets: ["127.0.0.1:${admin[replica-b]}"]
        labels: {namespace: $ns, pod: replica-b}
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=("$!")
until curl -fsS "http://127.0.0.1:$prom_port/-/ready" >/dev/null 2>&1; do sleep 0.5; done
begin="$(date +%s)"
log "operators on admin ports ${admin[replica-a]}, ${admin[replica-b]}; Prometheus on $prom_port"

deployment() { # name replicas strategy-json
  "$kubectl" -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1}
spec:
  replicas: $2
  strategy: $3
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1, tier: backend}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: app, image: registry.invalid/app:1}]
EOF
}
deployment web 1 '{type: RollingUpdate}'
deployment api 1 '{type: RollingUpdate}'
deployment queue 1 '{type: Recreate}'
deployment batch 3 '{type: RollingUpdate}'
# A lone replica no window selects and no PDB protects: only the eviction webhook saves it.
"$kubectl" -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: worker}
spec:
  replicas: 1
  selector: {matchLabels: {app: worker}}
  template:
    metadata:
      labels: {app: worker}
      annotations: {pod-ready.stage.kwok.x-k8s.io/delay: 3s}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: app, image: registry.invalid/app:1}]
EOF
"$kubectl" -n "$ns" rollout status deployment/web deployment/api deployment/queue deployment/batch deployment/worker --timeout=60s >/dev/null

leader() { "$kubectl" -n "$ns" get lease disruption-guard -o jsonpath='{.spec.holderIdentity}'; }
call() { # method path [body]: any replica answers; the first one that is up
  local id code
  for id in replica-a replica-b; do
    code="$(curl -sS -o /dev/null -w '%{http_code}' -X "$1" "http://127.0.0.1:${api[$id]}$2" \
      -H 'Content-Type: application/json' ${3:+-d "$3"} 2>/dev/null || true)"
    if [ -n "$code" ] && [ "$code" != 000 ]; then echo "$code"; return; fi
  done
}
open() { call POST "/v1/namespaces/$ns/windows?wait=true&timeout=30s" "$1" >/dev/null; }
close() { call DELETE "/v1/namespaces/$ns/windows/$1" >/dev/null; }
noise() { # reads, and requests the API refuses
  for _ in 1 2 3; do call GET "/v1/namespaces/$ns/windows" >/dev/null; done
  call GET "/v1/namespaces/$ns/windows/missing" >/dev/null
  call POST "/v1/namespaces/$ns/windows" '{"ttl": "forever"}' >/dev/null
}

log "windows: e2e-1 (closed after 2 min), smoke (expires after 90 s)"
open '{"name": "e2e-1", "selector": "tier=backend", "ttl": "20m", "reason": "e2e run 1"}'
open '{"name": "smoke", "selector": "app=api", "ttl": "90s", "reason": "smoke test, CI never closes it"}'
for _ in $(seq 1 12); do noise; sleep 10; done
close e2e-1

log "windows: e2e-2, then the node of the lone web pod drains"
open '{"name": "e2e-2", "selector": "tier=backend", "ttl": "20m", "reason": "e2e run 2"}'
sleep 20
node="$("$kubectl" -n "$ns" get pods -l app=web -o jsonpath='{.items[0].spec.nodeName}')"
"$kubectl" cordon "$node" >/dev/null
queue_node="$("$kubectl" -n "$ns" get pods -l app=queue -o jsonpath='{.items[0].spec.nodeName}')"
"$kubectl" cordon "$queue_node" >/dev/null
for _ in $(seq 1 6); do noise; sleep 10; done
"$kubectl" uncordon "$node" "$queue_node" >/dev/null

log "the leader ($(leader)) is killed; the other replica takes over"
victim="$(leader)"
kill -9 "${pid_of[$victim]}"
sleep 30
start_replica "$victim"
for _ in $(seq 1 6); do noise; sleep 10; done
close e2e-2
open '{"name": "e2e-3", "selector": "app=web", "ttl": "20m", "reason": "e2e run 3"}'
for _ in $(seq 1 6); do noise; sleep 10; done
close e2e-3

log "the node of the lone worker pod drains (kubectl drain, no PDB, no window)"
worker_node="$("$kubectl" -n "$ns" get pods -l app=worker -o jsonpath='{.items[0].spec.nodeName}')"
"$kubectl" drain "$worker_node" --ignore-daemonsets --delete-emptydir-data --timeout=90s >/dev/null 2>&1 || true
for _ in $(seq 1 3); do noise; sleep 10; done
"$kubectl" uncordon "$worker_node" >/dev/null
sleep 30
end="$(date +%s)"

log "querying the dashboard's panels over $((end - begin)) s"
python3 "$root/tests/chart/dashboard-data.py" "http://127.0.0.1:$prom_port" \
  "$root/charts/disruption-guard/dashboards/disruption-guard.json" "$begin" "$end" \
  --var job=disruption-guard --var "namespace=$ns" --var "cluster=.*" \
  --source "Data: a real scrape (every 5 s, Prometheus) of two operator replicas on the local test cluster during a scripted $(( (end - begin) / 60 ))-minute run: windows opened, closed and expired, a drain under a protected lone pod, a leader killed, a drain under an unprotected lone pod." \
  >"$out"
log "wrote $out"
