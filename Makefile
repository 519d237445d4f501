# disruption-guard — developer entry points.
#   make run   bring up the local cluster, install the CRD, run the operator against it
#   make test  the whole test suite: lints, unit tests, integration tests on a real cluster
#   make smoke the smoke tier on the oldest and the newest pinned versions (CI runs it after make test)
#   make matrix every suite on every pinned Kubernetes version, printed as a table

SHELL := /bin/bash
CLUSTER := tests/cluster
API_ADDR ?= 127.0.0.1:8080
ADMIN_ADDR ?= 127.0.0.1:9090

.PHONY: run test smoke matrix lint unit integration cluster-up cluster-down crd

run: ## Local cluster + operator in the foreground (Ctrl-C stops the operator; make cluster-down stops the cluster)
	@set -euo pipefail; \
	eval "$$($(CLUSTER)/up)"; \
	cargo build --quiet; \
	target/debug/disruption-guard crd | kubectl apply --server-side -f - >/dev/null; \
	kubectl wait --for=condition=Established crd/testwindows.disruption-guard.io --timeout=30s >/dev/null; \
	printf '%s\n' "" "disruption-guard is starting against the local cluster." \
	  "  export KUBECONFIG=$$KUBECONFIG PATH=$$(dirname $$(command -v kubectl)):\$$PATH" \
	  "  open a window:  curl -s -XPOST http://$(API_ADDR)/v1/namespaces/default/windows -H 'content-type: application/json' -d '{\"ttl\":\"10m\",\"reason\":\"try it\"}'" \
	  "  list windows:   kubectl get tw -A" \
	  "  metrics:        curl -s http://$(ADMIN_ADDR)/metrics" \
	  "  stop cluster:   make cluster-down" ""; \
	exec target/debug/disruption-guard operator --insecure-no-auth --intercept-create-webhook --api-addr $(API_ADDR) --admin-addr $(ADMIN_ADDR)

test: lint ## Everything CI runs
	@set -euo pipefail; \
	$(CLUSTER)/build --with-helm --with-karpenter; \
	tests/fuzz/install >/dev/null; \
	trap '$(CLUSTER)/down' EXIT; \
	eval "$$($(CLUSTER)/up --with-karpenter)"; \
	cargo test --no-fail-fast -- --show-output

# The oldest and the newest pinned pair: windows, interception, one Karpenter consolidation.
SMOKE_OLDEST := 1.34.4
SMOKE_NEWEST := 1.37.2
SMOKE_NEWEST_KARPENTER := 1.15.0

smoke: ## The smoke tier on Kubernetes $(SMOKE_OLDEST) and on $(SMOKE_NEWEST) with Karpenter $(SMOKE_NEWEST_KARPENTER)
	@set -euo pipefail; \
	$(CLUSTER)/build --with-karpenter --kubernetes $(SMOKE_OLDEST); \
	$(CLUSTER)/build --with-karpenter --kubernetes $(SMOKE_NEWEST) --karpenter $(SMOKE_NEWEST_KARPENTER); \
	tests/matrix/run --smoke --kubernetes $(SMOKE_OLDEST); \
	tests/matrix/run --smoke --kubernetes $(SMOKE_NEWEST) --karpenter $(SMOKE_NEWEST_KARPENTER)

matrix: ## Every suite on every pinned Kubernetes version (docs/compatibility.md)
	@tests/matrix/run

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets --quiet -- -D warnings

unit:
	cargo test --lib --bins

cluster-up:
	@$(CLUSTER)/up

cluster-down:
	@$(CLUSTER)/down

crd: ## Regenerate the chart's copies of the CRDs (templates/crd.yaml renders them)
	cargo run --quiet -- crd testwindows > charts/disruption-guard/files/testwindows.crd.yaml
	cargo run --quiet -- crd citrusts > charts/disruption-guard/files/citrusts.crd.yaml
