# The two commands of the README, and the steps CI runs (.ci/run calls `make test`).
CARGO ?= cargo

.PHONY: run test lint unit e2e numa bench

## Run the webhook on its embedded defaults: standalone, self-signed TLS, no API server.
run:
	$(CARGO) run --release -p koord-webhook -- serve --standalone --listen 127.0.0.1:9443

## Every test: formatting, lints, unit + integration tests, the end-to-end suite on a real
## kube-apiserver, and the two-NUMA-node migration proof in a QEMU guest.
test: lint unit numa e2e

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Unit and integration tests; then the applier's machine tests (root, real cgroups, NUMA,
## perf) and the manifest render and Helm chart tests (kubectl; helm, built from its Go module
## and cached like the test control plane), which plain `cargo test` reports as ignored:
## see applier/scripts/machine-tests.sh.
unit:
	$(CARGO) test --workspace
	HELM=$$(tests/e2e/helm.sh build) && HELM=$$HELM $(CARGO) test -p koord-webhook --test manifests -- --ignored
	CARGO=$(CARGO) applier/scripts/machine-tests.sh

e2e:
	tests/e2e/run

numa:
	tests/numa/run-two-node-guest.sh

bench:
	$(CARGO) bench -p koord-webhook --bench resolve
