# Makefile of the uprobe receiver. Every target that needs system packages
# installs them itself (Debian); run as root.

GO          ?= go
CLANG       := clang-14
OCB_VERSION := v0.164.0
BUILD_DIR   := _build
DISTRO      := $(BUILD_DIR)/otelcol-uprobe
DEMO_DIR    := $(BUILD_DIR)/demo
# An execution count, not a duration: with go1.26 a duration races the fuzz
# coordinator's deadline and can fail with "context deadline exceeded" and no
# failing input (golang/go#75804, fixed in go1.27).
# Targets run at very different speeds (FuzzFunctions parses a whole Go
# binary per input), hence a budget per speed.
FUZZTIME    ?= 50000x
FUZZTIME_MEDIUM ?= 20000x
FUZZTIME_SLOW   ?= 1000x

# Debian packages, by what needs them, so that each target installs only
# what it uses (make run: a C compiler and <sys/sdt.h> for the demo; the
# collector itself is built by ocb with Go alone).
# RUN_PACKAGES build the demo and the other C programs the distro is run
# against (make run, demo, test-distro, test-budget, test-jaeger,
# bench-budget, soak).
RUN_PACKAGES := gcc libc6-dev systemtap-sdt-dev
# GENERATE_PACKAGES build the BPF objects: the pinned compiler (clang-14,
# llvm-14's llvm-strip) and libbpf's headers.
GENERATE_PACKAGES := clang-14 llvm-14 libbpf-dev linux-libc-dev
# TEST_PACKAGES are those of the unit and privileged tests (make test-unit):
# the fixtures' compilers (gcc, g++, clang-14; llvm-14's llvm-dwarfdump),
# gdb for the debuginfo tests (it checks compiled paths against the running
# program), PostgreSQL 15 and Python 3.11 for the tests that trace binaries
# nobody here wrote (receiver's TestPostgres, TestPython, and the recipes'
# tests: TestRecipe*), and for the recipes' tests also OpenSSL's headers
# and command (TestRecipeTLS builds a TLS client and server and makes its
# certificate) and OpenJDK 17 with javac (TestRecipeJVM); mk/arm64.mk adds
# the arm64 cross tools; libc6-dbg for the probe browser's tests, which
# paste every line a listing of glibc offers (cmd/uprobe-list).
TEST_PACKAGES := $(RUN_PACKAGES) g++ gdb clang-14 llvm-14 postgresql-15 postgresql-client-15 python3.11 libc6-dbg libssl-dev openssl openjdk-17-jdk-headless
# BENCH_PACKAGES: bpftrace, which make bench compares against, and the
# programs of the recipe rows of its feature cost matrix (harness/bench
# recipes.go: PostgreSQL 15, Python 3.11, OpenSSL's headers and OpenJDK 17
# with javac).
BENCH_PACKAGES := $(RUN_PACKAGES) bpftrace postgresql-15 python3.11 libssl-dev openjdk-17-jdk-headless

# PLATFORMS are the GOOS/GOARCH pairs check-platforms builds the module
# for (make test-unit): the receiver builds everywhere the collector ships
# and refuses at Start off Linux. The whole release list, checked when the
# build constraints change: darwin/amd64 darwin/arm64 windows/amd64
# windows/386 linux/386 linux/arm linux/arm64 linux/ppc64le linux/s390x
# linux/riscv64.
PLATFORMS ?= darwin/amd64 windows/amd64

.PHONY: all deps deps-run deps-generate deps-test deps-bench generate check-generate check-platforms test test-unit test-distro test-budget fuzz build floor-distro run demo bench bench-smoke bench-budget soak clean

all: test

# apt-install installs the Debian packages of $(1) that are missing,
# running apt-get update first when a package has no install candidate.
define apt-install
	@missing=""; for p in $(sort $(1)); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends $$missing || { apt-get update && apt-get install -y --no-install-recommends $$missing; }; \
	fi
endef

# deps installs every package any target needs (CI runs it first);
# deps-run, deps-generate, deps-test and deps-bench install one target's.
# deps, deps-test and deps-bench make /usr/share/man/man1 first: OpenJDK's
# postinst registers its man pages as alternatives and fails where the
# directory is absent (Debian's slim images drop it).
deps:
	mkdir -p /usr/share/man/man1
	$(call apt-install,$(RUN_PACKAGES) $(GENERATE_PACKAGES) $(TEST_PACKAGES) $(BENCH_PACKAGES))
deps-run:
	$(call apt-install,$(RUN_PACKAGES))
deps-generate:
	$(call apt-install,$(GENERATE_PACKAGES))
deps-test:
	mkdir -p /usr/share/man/man1
	$(call apt-install,$(TEST_PACKAGES))
deps-bench:
	mkdir -p /usr/share/man/man1
	$(call apt-install,$(BENCH_PACKAGES))

# generate rebuilds the committed generated code: the BPF engine (bpf2go with
# clang-14, pinned in go.mod's tool block) and mdatagen's output.
generate: deps-generate
	cd internal/bpfobj && $(GO) generate ./...
	cd internal/tracer/floor && $(GO) generate ./...
	cd receiver && $(GO) generate ./...

# check-generate fails when the committed generated code is stale.
check-generate: generate
	@git diff --exit-code -- internal/bpfobj internal/tracer/floor receiver/internal receiver/documentation.md receiver/generated_component_test.go receiver/generated_package_test.go \
		|| { echo "generated code is out of date: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- internal/bpfobj internal/tracer/floor receiver)" \
		|| { git status --porcelain -- internal/bpfobj internal/tracer/floor receiver; echo "untracked generated files"; exit 1; }

# check-platforms builds the module for every pair of PLATFORMS.
check-platforms:
	@set -e; for p in $(PLATFORMS); do \
		echo "go build ./... for $$p"; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./...; \
	done

# test runs every test: unit, fuzz smoke, privileged kernel tests (as root),
# the built distro against the demo program, the overhead budget on the
# built distro, and probe spans in a real Jaeger (which it builds once into
# a cache outside the repository), and the arm64 suite in an arm64 kernel
# under qemu (test-arm64).
test: test-unit fuzz test-distro test-budget test-jaeger test-arm64

# test-unit runs every package's tests but the end-to-end suites under
# harness/e2e, whose tests build only with -tags e2e (test-distro,
# test-budget, test-jaeger run them), and checks that the module builds on
# the other PLATFORMS.
test-unit: deps-test check-platforms
	$(GO) vet ./...
	$(GO) vet -tags e2e ./harness/e2e/...
	$(GO) test -count=1 ./...
	cd harness/bench/spanfloor && $(GO) vet ./... && $(GO) test -count=1 ./...

# fuzz runs every fuzz target briefly.
fuzz:
	@set -e; for pkg in ./internal/usdt ./internal/threadctx ./internal/fetch ./internal/config ./internal/recipe ./internal/glob ./internal/spans ./internal/insn ./internal/gobin ./internal/elfaddr ./internal/debuginfo ./internal/procfs ./internal/buildid ./internal/privilege ./cmd/uprobe-list; do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			case $$f in FuzzFunctions) n=$(FUZZTIME_SLOW);; FuzzDecode) n=$(FUZZTIME_MEDIUM);; *) n=$(FUZZTIME);; esac; \
			echo "fuzz $$pkg $$f ($$n)"; \
			$(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$$n -fuzzminimizetime=2s $$pkg; \
		done; \
	done

# build builds the collector distribution with ocb.
build: $(DISTRO)

$(DISTRO): builder-config.yaml go.mod go.sum $(shell find receiver internal -name '*.go' -o -name '*.o')
	$(GO) run go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION) --config builder-config.yaml

# floor-distro builds otelcol-floor, the benchmark's collector floor: the
# distro's components (builder-config.yaml) and the spanfloor receiver
# (harness/bench/spanfloor, a module of its own), which delivers spans
# built with pdata alone, at a set rate.
FLOOR_DISTRO := $(BUILD_DIR)/floor/otelcol-floor
floor-distro: $(FLOOR_DISTRO)

$(FLOOR_DISTRO): builder-config.yaml go.mod go.sum $(shell find receiver internal harness/bench/spanfloor -name '*.go' -o -name '*.o' -o -name go.mod)
	mkdir -p $(BUILD_DIR)
	sed -e 's#^  name: otelcol-uprobe$$#  name: otelcol-floor#' \
	    -e 's#^  output_path: ./_build$$#  output_path: ./$(BUILD_DIR)/floor#' \
	    -e 's#^receivers:$$#receivers:\n  - gomod: github.com/otel-uprobe/spanfloor v0.0.0\n    path: ./harness/bench/spanfloor#' \
	    builder-config.yaml > $(BUILD_DIR)/builder-floor.yaml
	test "$$(grep -c -e '^  name: otelcol-floor$$' -e '^  output_path: ./$(BUILD_DIR)/floor$$' -e '^    path: ./harness/bench/spanfloor$$' $(BUILD_DIR)/builder-floor.yaml)" = 3
	$(GO) run go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION) --config $(BUILD_DIR)/builder-floor.yaml

# demo builds the demo program traced by make run and the distro test.
demo: deps-run
	mkdir -p $(DEMO_DIR)
	gcc -O2 -g -fPIC -shared -o $(DEMO_DIR)/libdemo.so testdata/demo/demolib.c
	gcc -O2 -g -Itestdata/demo -o $(DEMO_DIR)/demo testdata/demo/demo.c -L$(DEMO_DIR) -ldemo -Wl,-rpath,$(abspath $(DEMO_DIR))

test-distro: build demo
	OTELCOL_UPROBE_BIN=$(abspath $(DISTRO)) UPROBE_DEMO_DIR=$(abspath $(DEMO_DIR)) \
		$(GO) test -tags e2e -count=1 -run TestDistro -v ./harness/e2e/distrotest

# test-budget runs the overhead budget's test alone (it times a program, so
# nothing else of the suite runs beside it): the distro pinned to CPU 0
# with overhead_budget: 0.05, a program on CPU 1 calling a probed function
# at a rate that would cost half a CPU (about 40 s; needs two CPUs).
test-budget: deps-run build
	OTELCOL_UPROBE_BIN=$(abspath $(DISTRO)) $(GO) test -tags e2e -count=1 -run TestOverheadBudget -v ./harness/e2e/budgettest

# run starts the demo program and the distro tracing it; spans and metrics
# appear on stdout through the debug exporter. Ctrl-C stops both.
run: build demo
	@$(DEMO_DIR)/demo --loop 500 & demo=$$!; \
	trap "kill $$demo 2>/dev/null" EXIT INT TERM; \
	UPROBE_DEMO_DIR=$(abspath $(DEMO_DIR)) $(DISTRO) --config testdata/demo/collector.yaml

# bench measures the receiver against the kernel's floor and bpftrace, and
# the built collector's CPU per span against building the same spans with
# pdata alone, and writes docs/benchmarks.md and docs/benchmarks.json
# (several minutes), with the collector measurement of BENCH_BASELINE (an
# earlier run's benchmarks.json) next to this run's when it exists. Then
# harness/scalebench measures Start, Shutdown and memory by locations
# (100 to 20,000, and PostgreSQL's function: "*") and targets (10 to
# 2,000) and writes its section of docs/benchmarks.md and docs/scale.json
# (a few minutes); harness/benchreadme then quotes both in the README's
# performance section.
BENCH_BASELINE ?= docs/benchmarks-baseline.json
bench: deps-bench build floor-distro
	mkdir -p docs
	$(GO) run ./harness/bench -out docs -distro $(abspath $(DISTRO)) -floor-distro $(abspath $(FLOOR_DISTRO)) $(if $(wildcard $(BENCH_BASELINE)),-before $(BENCH_BASELINE))
	$(GO) run ./harness/scalebench -out docs
	$(GO) run ./harness/benchreadme

# bench-smoke is the seconds-long version CI runs so that the benchmark
# cannot rot; its numbers are not meant to be read.
bench-smoke: deps-bench build floor-distro
	$(GO) run ./harness/bench -smoke -distro $(abspath $(DISTRO)) -floor-distro $(abspath $(FLOOR_DISTRO))
	$(GO) run ./harness/scalebench -smoke

# bench-budget measures a program's speed, second by second for 30 s, under
# a probe with and without overhead_budget and writes its section of
# docs/benchmarks.md and docs/budget.json (about two minutes).
bench-budget: deps-run build
	mkdir -p docs
	$(GO) run ./harness/budgetbench -out docs -distro $(abspath $(DISTRO))

# soak runs the distro for SOAK_DURATION against programs that churn (a C
# program at 100k spans/s, a Go program, short-lived processes from
# SOAK_CHURNERS loops side by side, and threads), checks that nothing grows
# after warm-up and that every span completed is delivered or counted
# dropped (by reason), and writes docs/soak.json and the soak section of
# docs/benchmarks.md. Not part of make test.
SOAK_DURATION ?= 10m
SOAK_CHURNERS ?= 3
soak: deps-run build
	$(GO) run ./harness/soak -duration $(SOAK_DURATION) -churners $(SOAK_CHURNERS) -out docs -distro $(abspath $(DISTRO))

clean:
	rm -rf $(BUILD_DIR)

# arm64: test-arm64 (an arm64 kernel under qemu) and build-arm64.
include mk/arm64.mk

# Jaeger v2 for the end-to-end tests, pinned by testdata/jaeger (a wrapper
# module: go install refuses Jaeger's module, whose go.mod has a replace). It
# is built once into a cache outside the repository; make jaeger prints its
# path. A cold build takes minutes and ~2.3 GB of RAM.
JAEGER_VERSION := v1.76.0
JAEGER_CACHE   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/otel-uprobe/jaeger-$(JAEGER_VERSION)
JAEGER_BIN     := $(JAEGER_CACHE)/jaeger

.PHONY: jaeger test-jaeger run-jaeger

jaeger: $(JAEGER_BIN)
	@echo $(JAEGER_BIN)

# The build runs in a copy of testdata/jaeger, so that nothing (go.work, go.mod
# updates) lands in the repository; the binary appears only once complete.
$(JAEGER_BIN):
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"; rm -f "$@.tmp.$$$$"' EXIT; \
	cp -R testdata/jaeger/. "$$tmp"; \
	mkdir -p "$(JAEGER_CACHE)"; \
	echo "building Jaeger $(JAEGER_VERSION) into $(JAEGER_CACHE)"; \
	(cd "$$tmp" && GOWORK=off $(GO) build -mod=readonly -o "$@.tmp.$$$$" github.com/jaegertracing/jaeger/cmd/jaeger); \
	mv -f "$@.tmp.$$$$" "$@"

# test-jaeger runs the end-to-end tests against Jaeger.
test-jaeger: jaeger demo build
	JAEGER_BIN=$(JAEGER_BIN) OTELCOL_UPROBE_BIN=$(abspath $(DISTRO)) UPROBE_DEMO_DIR=$(abspath $(DEMO_DIR)) \
		$(GO) test -tags e2e -count=1 -v ./harness/e2e/jaegertest

# run-jaeger runs Jaeger v2 on its usual ports, on 127.0.0.1 only: OTLP
# gRPC 4317, OTLP HTTP 4318, UI and API http://127.0.0.1:16686.
run-jaeger: jaeger
	@mkdir -p $(BUILD_DIR)
	sed -e 's/{{.OTLPGRPC}}/127.0.0.1:4317/; s/{{.OTLPHTTP}}/127.0.0.1:4318/' \
	    -e 's/{{.QueryHTTP}}/127.0.0.1:16686/; s/{{.QueryGRPC}}/127.0.0.1:16685/' \
	    testdata/jaeger/config.yaml.tmpl > $(BUILD_DIR)/jaeger.yaml
	$(JAEGER_BIN) --config $(BUILD_DIR)/jaeger.yaml
