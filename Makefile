# DPCS build targets. `make test` needs nothing but Go; `make integration`
# installs (Debian packages) and starts real servers on loopback ports.
GO       ?= go
PKGS     ?= ./...
# Package list and flags for `make test` live in scripts/gotest.sh (it passes
# -rapid.checks only to packages whose tests use rapid).
# Extra flags for go test, e.g. `make test TESTFLAGS=-v`.
TESTFLAGS ?=
# Sequences the rapid property tests run in `make check` / `make integration`
# (full strength), and in `make test` (the quick run).
RAPID_CHECKS ?= 1000
TEST_RAPID_CHECKS ?= 100

.PHONY: help all run test check integration e2e chaos bench bench-pipeline bench-recovery bench-peers cover lint fuzz release screenshots clean

# A bare `make` runs all; help is listed first.
.DEFAULT_GOAL := all

## help: this list: every target of this Makefile with its `## target: text`
## comment, one line each.
help:
	@awk '/^## [A-Za-z0-9_.-]+:/ { n++; sub(/^## /, ""); i = index($$0, ":"); \
			name[n] = substr($$0, 1, i - 1); text[n] = substr($$0, i + 2); \
			if (length(name[n]) > w) w = length(name[n]); open = 1; next } \
		/^##( |$$)/ && open { sub(/^## ?/, ""); text[n] = text[n] " " $$0; next } \
		{ open = 0 } \
		END { print "Targets (make TARGET):"; f = "  %-" w "s  %s\n"; \
			for (k = 1; k <= n; k++) printf f, name[k], text[k] }' $(MAKEFILE_LIST)

## all: lint, then test (what a bare `make` runs).
all: lint test

## run: the whole system in one process (embedded Kafka, Redis and SQLite by
## default; DPCS_KAFKA_BROKERS / DPCS_REDIS_ADDR / DPCS_MYSQL_DSN for real ones).
run:
	$(GO) run ./examples/dpcs

## test: the quick run (≤ 5 min warm on 2 cores): every test that needs no
## external server (miniredis, kfake, SQLite), with -race and -short — rapid at
## TEST_RAPID_CHECKS (100) sequences; the whole-system runs (the stories, the
## all-in-one under traffic) skipped. `make check` is the deep run.
## (SQLite's transpiled C, modernc.org/..., is built without checkptr's
## instrumentation there: a fifth of a SQLite test's CPU went to it, and it
## checks no code of ours. `make check` keeps it. Not -race=false: code built
## without the race detector hides happens-before edges and false races follow.)
test:
	RAPID_CHECKS=$(TEST_RAPID_CHECKS) bash scripts/gotest.sh -race -short -count=1 -timeout 30m \
		-gcflags='modernc.org/...=-d=checkptr=0' $(TESTFLAGS)

## check: the deep run without servers: every test `make test` runs and the
## ones it skips, rapid at RAPID_CHECKS (1,000) sequences, with -race.
## (`make integration`, which CI runs, is this plus real servers.)
check:
	RAPID_CHECKS=$(RAPID_CHECKS) bash scripts/gotest.sh -race -count=1 -timeout 40m $(TESTFLAGS)

## integration: `make check` (every package's tests but e2e's, which
## `make e2e` runs; -race, rapid at 1,000 sequences) plus the integration
## tests on real redis-server (single, replica, 3-node cluster), MariaDB and
## kcat on loopback. CI's deep run.
integration:
	RAPID_CHECKS=$(RAPID_CHECKS) bash scripts/integration.sh

## e2e: the acceptance stories 1–6 (doc/testing.md) against the whole system,
## embedded and on real redis-server (single + 3-node cluster) and MariaDB.
## (`make check` runs the embedded form too.)
e2e:
	bash scripts/e2e.sh

## chaos: three processor deployables as OS processes on kfake, a real
## redis-server (AOF) and MariaDB; kill -9 processors, rebalance 1→3→2→3,
## restart Redis, stop MariaDB 30 s, deliver every event 3×, a 10× burst; then
## the invariants (≈ 2–3 min; DPCS_CHAOS_* tune it, see scripts/chaos.sh).
chaos:
	bash scripts/chaos.sh

## bench: per-package benchmarks, then the full pipeline (simulator → Kafka →
## processors → real Redis → write-behind → MariaDB) over a rate ladder beside
## the redis-benchmark ceiling, then the recovery (Redis rebuilt from SQL at
## 100,000 families); writes doc/benchmarks.md and doc/pipeline.svg.
bench:
	bash scripts/bench.sh

## bench-pipeline: only the full-pipeline benchmark of `make bench`.
bench-pipeline:
	BENCH_PACKAGES=0 BENCH_RECOVERY=0 bash scripts/bench.sh

## bench-recovery: only the recovery benchmark of `make bench` (Redis rebuilt
## from SQL at 100,000 families); writes doc/benchmarks.md.
bench-recovery:
	BENCH_PACKAGES=0 BENCH_PIPELINE=0 bash scripts/bench.sh

## bench-peers: POST /decisions beside gubernator, envoy ratelimit and a
## trivial Redis script, every server a process of its own and one load
## generator in another (bench/peers, its own Go module): throughput,
## p50/p99/p99.9 and CPU µs per decision; writes doc/benchmarks.md.
bench-peers:
	bash scripts/bench-peers.sh

## screenshots: the family app's and the back office's main screens (phone
## and desktop) into doc/screenshots, taken by the browser tests in Debian's
## headless Chromium (installed with apt when missing).
screenshots:
	bash scripts/screenshots.sh

## cover: unit-test coverage, with the total on the last line. The tests'
## output goes to coverage.log; when one fails, its failure is printed.
COVERTEST = $(GO) test -count=1 -timeout 30m -coverprofile=coverage.out -covermode=atomic $(PKGS)
cover:
	@echo "$(COVERTEST) >coverage.log 2>&1"
	@$(COVERTEST) >coverage.log 2>&1 || { \
		echo "cover: go test failed; from coverage.log:"; \
		if grep -q -E -- '--- FAIL|^FAIL|^panic:' coverage.log; then \
			grep -n -B 5 -A 40 -E -- '--- FAIL|^FAIL|^panic:' coverage.log | head -n 400; \
			echo "cover: failed:"; grep -E -- '--- FAIL|^FAIL|^panic:' coverage.log; \
		else tail -n 60 coverage.log; fi; \
		exit 1; }
	$(GO) tool cover -func=coverage.out | tail -n 1
	@$(GO) tool cover -func=coverage.out | awk '/^total:/ {sub("%","",$$3); if ($$3+0 < 70) {print "coverage below 70%"; exit 1}}'

## lint: formatting, a tidy go.mod (go mod tidy -diff), vet (including
## integration-tagged files) and the OpenAPI document (Redocly CLI through npx:
## needs Node.js; see scripts/openapi-lint.sh).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) vet $(PKGS)
	$(GO) vet -tags integration $(PKGS)
	bash scripts/openapi-lint.sh

## fuzz: run the fuzzers for FUZZTIME each (default 60s): the envelope's strict
## decoder, its fast decoder/encoder against the encoding/json path, the
## synchronous endpoint's fast body decoder against huma's validation, and the
## charging interface's fast decoder/encoder against encoding/json.
FUZZTIME ?= 60s
fuzz:
	for f in FuzzDecode FuzzDecodeDifferential FuzzEncodeDifferential; do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./envelope || exit 1; \
	done
	$(GO) test -run '^$$' -fuzz '^FuzzDecideFast$$' -fuzztime $(FUZZTIME) ./service/api/gateway
	for f in FuzzDecodeFast FuzzEncodeFast; do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./service/charging || exit 1; \
	done

## release: the deployables (dpcs, dpcs-processor, dpcs-server, dpcs-simulator)
## for linux/amd64 and linux/arm64 into dist/ with SHA256SUMS, -trimpath,
## version and commit linked in (VERSION=v0.1.0; PLATFORMS to narrow; see
## scripts/release.sh). Not run in CI; needs a clean work tree.
release:
	bash scripts/release.sh

## clean: remove what cover and release write (coverage.out, dist/).
clean:
	rm -f coverage.out coverage.log
	rm -rf dist
