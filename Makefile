# The two commands of the README, and the steps CI runs (.ci/run calls `make test`).
CARGO ?= cargo

.PHONY: run test lint unit e2e numa node images bench

## Run the webhook on its embedded defaults: standalone, self-signed TLS, no API server.
run:
	$(CARGO) run --release -p koord-webhook -- serve --standalone --listen 127.0.0.1:9443

## Every test: formatting, lints, unit + integration tests, the end-to-end suite on a real
## kube-apiserver, the two-NUMA-node migration proof in a QEMU guest, and the node suite (the
## product's images on a real kubelet + containerd, installed with kubectl apply -k).
test: lint unit numa e2e node

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Unit and integration tests; then the applier's machine tests (root, real cgroups, NUMA,
## perf) and the manifest render tests (kubectl), which plain `cargo test` reports as ignored:
## see applier/scripts/machine-tests.sh.
unit:
	$(CARGO) test --workspace
	$(CARGO) test -p koord-webhook --test manifests -- --ignored
	CARGO=$(CARGO) applier/scripts/machine-tests.sh

e2e:
	tests/e2e/run

numa:
	tests/numa/run-two-node-guest.sh

## OCI archives of koord-webhook and koord-applier, named as manifests/ references them.
images:
	images/build.sh

node:
	tests/node/run

bench:
	$(CARGO) bench -p koord-webhook --bench resolve
