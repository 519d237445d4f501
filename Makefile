# disruption-guard — developer entry points.
#   make run   bring up the local cluster, install the CRD, run the operator against it
#   make test  the whole test suite: lints, unit tests, integration tests on a real cluster

SHELL := /bin/bash
CLUSTER := tests/cluster
API_ADDR ?= 127.0.0.1:8080
ADMIN_ADDR ?= 127.0.0.1:9090

.PHONY: run test lint unit integration cluster-up cluster-down crd

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
