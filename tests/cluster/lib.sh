# Shared settings of the local test cluster scripts (sourced, not run).
#
# Binaries are cached by version outside the work tree, in $DISRUPTION_GUARD_CACHE
# (default ~/.cache/disruption-guard). A cluster's state (PKI, etcd data, logs, PIDs, ports,
# kubeconfig) lives in $DISRUPTION_GUARD_CLUSTER_DIR (default <repo>/.cluster/default).

set -euo pipefail

CLUSTER_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_SCRIPTS/../.." && pwd)"
COMPONENTS="$CLUSTER_SCRIPTS/components"

# The Kubernetes and Karpenter versions: the pinned default pair, or the one a script's
# --kubernetes/--karpenter options (or these variables) choose. Each version has its own wrapper
# module, components/<name>/<version>/go.mod, and its own cache directory.
DEFAULT_K8S_VERSION="v1.36.3"
DEFAULT_KARPENTER_VERSION="v1.14.3"
ETCD_VERSION="$(grep -oE 'go.etcd.io/etcd/server/v3 v[0-9.]+' "$COMPONENTS/etcd/go.mod" | head -1 | cut -d" " -f2)"
KWOK_VERSION="$(grep -oE 'sigs.k8s.io/kwok v[0-9.]+' "$COMPONENTS/kwok/go.mod" | head -1 | cut -d" " -f2)"

HELM_VERSION="$(grep -oE 'helm.sh/helm/v3 v[0-9.]+' "$COMPONENTS/helm/go.mod" | head -1 | cut -d" " -f2)"
PROMETHEUS_VERSION="$(grep -oE 'github.com/prometheus/prometheus v[0-9.]+' "$COMPONENTS/prometheus/go.mod" | head -1 | cut -d" " -f2)"

CACHE="${DISRUPTION_GUARD_CACHE:-$HOME/.cache/disruption-guard}"
ETCD_BIN="$CACHE/etcd-$ETCD_VERSION"
KWOK_BIN="$CACHE/kwok-$KWOK_VERSION"
HELM_BIN="$CACHE/helm-$HELM_VERSION"
PROMETHEUS_BIN="$CACHE/prometheus-$PROMETHEUS_VERSION"

STATE="${DISRUPTION_GUARD_CLUSTER_DIR:-$REPO_ROOT/.cluster/default}"

# Go builds: local toolchain only, checksums pinned by the committed go.sum files.
export GOTOOLCHAIN=local
# The one newer Go a pinned module may declare (Karpenter v1.15 declares go 1.26.9).
NEWER_GO="go1.27.3"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

# pinned_versions NAME: the versions components/NAME/ has a wrapper module for, one a line.
pinned_versions() {
  (cd "$COMPONENTS/$1" && ls -d v*/ | tr -d / | sort -V)
}

# choose_versions: sets K8S_VERSION, KARPENTER_VERSION and their module and cache paths from
# DISRUPTION_GUARD_KUBERNETES and DISRUPTION_GUARD_KARPENTER (a leading `v` is optional), and
# exports both variables so the scripts this one runs choose the same.
choose_versions() {
  local k="${DISRUPTION_GUARD_KUBERNETES:-$DEFAULT_K8S_VERSION}" c="${DISRUPTION_GUARD_KARPENTER:-$DEFAULT_KARPENTER_VERSION}"
  K8S_VERSION="v${k#v}" KARPENTER_VERSION="v${c#v}"
  [ -f "$COMPONENTS/kubernetes/$K8S_VERSION/go.mod" ] \
    || die "no pinned module for Kubernetes $K8S_VERSION (pinned: $(pinned_versions kubernetes | tr '\n' ' '))"
  [ -f "$COMPONENTS/karpenter/$KARPENTER_VERSION/go.mod" ] \
    || die "no pinned module for Karpenter $KARPENTER_VERSION (pinned: $(pinned_versions karpenter | tr '\n' ' '))"
  export DISRUPTION_GUARD_KUBERNETES="$K8S_VERSION" DISRUPTION_GUARD_KARPENTER="$KARPENTER_VERSION"
  K8S_MODULE="$COMPONENTS/kubernetes/$K8S_VERSION"
  KARPENTER_MODULE="$COMPONENTS/karpenter/$KARPENTER_VERSION"
  K8S_BIN="$CACHE/kubernetes-$K8S_VERSION"
  KARPENTER_BIN="$CACHE/karpenter-$KARPENTER_VERSION"
}

# version_option NAME VALUE: DISRUPTION_GUARD_<NAME>=VALUE, for a --kubernetes/--karpenter option.
version_option() {
  [ -n "$2" ] || die "--$(echo "$1" | tr 'A-Z' 'a-z') wants a version, for example 1.34.4"
  export "DISRUPTION_GUARD_$1=$2"
}

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_tool() {
  command -v "$1" >/dev/null 2>&1 || die "$1 is not installed: $2"
}

# pid_alive FILE: the process whose PID is in FILE still runs.
pid_alive() {
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}
