# The two commands of the README, and the steps CI runs (.ci/run calls `make test`).
CARGO ?= cargo

.PHONY: run test lint unit perf e2e numa bench

## Run the webhook on its embedded defaults: standalone, self-signed TLS, no API server.
run:
	$(CARGO) run --release -p koord-webhook -- serve --standalone --listen 127.0.0.1:9443

## Every test: formatting, lints, unit + integration tests, the webhook's performance
## regression checks, the end-to-end suite on a real kube-apiserver, and the two-NUMA-node
## migration proof in a QEMU guest.
test: lint unit perf numa e2e

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

## The webhook's short performance checks (~1.5 min): instructions per admission against the
## committed callgrind baseline (fails above +25%), and a 60 s soak at 5,000 admissions/s,
## HTTP/1.1 and HTTP/2 (0 errors, RSS and open fds flat). webhook/README.md has the long runs.
perf:
	webhook/benches/callgrind.sh --check
	webhook/benches/soak.sh 60

e2e:
	tests/e2e/run

numa:
	tests/numa/run-two-node-guest.sh

bench:
	$(CARGO) bench -p koord-webhook --bench resolve
