# Shared settings of the local test cluster scripts (sourced, not run).
#
# Binaries are cached by version outside the work tree, in $DISRUPTION_GUARD_CACHE
# (default ~/.cache/disruption-guard). A cluster's state (PKI, etcd data, logs, PIDs, ports,
# kubeconfig) lives in $DISRUPTION_GUARD_CLUSTER_DIR (default <repo>/.cluster/default).

set -euo pipefail

CLUSTER_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_SCRIPTS/../.." && pwd)"
COMPONENTS="$CLUSTER_SCRIPTS/components"

K8S_VERSION="v1.36.3"
ETCD_VERSION="$(grep -oE 'go.etcd.io/etcd/server/v3 v[0-9.]+' "$COMPONENTS/etcd/go.mod" | head -1 | cut -d" " -f2)"
KWOK_VERSION="$(grep -oE 'sigs.k8s.io/kwok v[0-9.]+' "$COMPONENTS/kwok/go.mod" | head -1 | cut -d" " -f2)"

HELM_VERSION="$(grep -oE 'helm.sh/helm/v3 v[0-9.]+' "$COMPONENTS/helm/go.mod" | head -1 | cut -d" " -f2)"
PROMETHEUS_VERSION="$(grep -oE 'github.com/prometheus/prometheus v[0-9.]+' "$COMPONENTS/prometheus/go.mod" | head -1 | cut -d" " -f2)"
KARPENTER_VERSION="$(grep -oE 'sigs.k8s.io/karpenter v[0-9.]+' "$COMPONENTS/karpenter/go.mod" | head -1 | cut -d" " -f2)"

CACHE="${DISRUPTION_GUARD_CACHE:-$HOME/.cache/disruption-guard}"
K8S_BIN="$CACHE/kubernetes-$K8S_VERSION"
ETCD_BIN="$CACHE/etcd-$ETCD_VERSION"
KWOK_BIN="$CACHE/kwok-$KWOK_VERSION"
HELM_BIN="$CACHE/helm-$HELM_VERSION"
PROMETHEUS_BIN="$CACHE/prometheus-$PROMETHEUS_VERSION"
KARPENTER_BIN="$CACHE/karpenter-$KARPENTER_VERSION"

STATE="${DISRUPTION_GUARD_CLUSTER_DIR:-$REPO_ROOT/.cluster/default}"

# Go builds: local toolchain only, checksums pinned by the committed go.sum files.
export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_tool() {
  command -v "$1" >/dev/null 2>&1 || die "$1 is not installed: $2"
}

# pid_alive FILE: the process whose PID is in FILE still runs.
pid_alive() {
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}
