# arm64 targets of the uprobe receiver; the Makefile includes this file
# (include mk/arm64.mk) and provides GO, BUILD_DIR and OCB_VERSION.
#
# test-arm64 runs the arm64 suite (armvm.DefaultSuite) on a Debian arm64
# kernel (bookworm cloud, Linux 6.1) booted in qemu-system-aarch64, see
# harness/armvm: internal/regs, internal/usdt, internal/insn, harness/armvm's
# uprobe smoke tests, the engine's layout (internal/bpfobj), every
# internal/tracer test (the arm64 engine in the kernel, per-location
# uprobes: 6.1 has no uprobe_multi), the receiver's end-to-end tests
# (armvm.ReceiverTests) and the arm64 collector distribution against the
# demo (harness/e2e/distrotest). It builds the distribution first
# (build-arm64), installs qemu-system-arm and the arm64 cross tools when
# missing (as root), downloads the kernel and busybox-static:arm64 with apt
# once into $(ARM64_CACHE), cross-builds the test binaries and fixtures
# (the demo with the arm64 C library, Go programs, static C programs), and
# fails when a test fails or the VM does not power off within the timeout.
# CI=true is passed into the VM. A warm run takes three to four minutes on two
# cores. ARM64_VM_FLAGS adds flags of harness/armvm/cmd/armvm (-smp,
# -timeout, -keep, -refresh, -run with packages).
#
# build-arm64 builds the collector distribution for linux/arm64 into
# $(ARM64_DISTRO) with ocb: builder-config.yaml with output_path moved to
# $(ARM64_BUILD_DIR), run by an ocb built for the host, with GOOS and GOARCH
# in the environment, which ocb passes to its go build (ocb has no target
# flag; CGO_ENABLED=0 comes from the config's default).

# The arm64 cross tools are also needed by the unit tests: internal/usdt and
# internal/insn cross-build fixtures and compare with aarch64 objdump
# (TestARM64Fixtures, TestCFixtureARM64, TestGoFixtureARM64), and fail
# without them when CI=true. deps-test (and deps) install them with the
# other test packages; test-arm64 installs what it needs itself
# (armvm.HostPackages).
TEST_PACKAGES += gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu

ARM64_CACHE     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/otel-uprobe/arm64
ARM64_VM_FLAGS  ?=
ARM64_BUILD_DIR := $(BUILD_DIR)/linux_arm64
ARM64_DISTRO    := $(ARM64_BUILD_DIR)/otelcol-uprobe
OCB             := $(BUILD_DIR)/tools/ocb-$(OCB_VERSION)

.PHONY: test-arm64 build-arm64

test-arm64: build-arm64
	env -u GOOS -u GOARCH $(GO) run ./harness/armvm/cmd/armvm -cache $(ARM64_CACHE) -distro $(abspath $(ARM64_DISTRO)) $(ARM64_VM_FLAGS)

build-arm64: $(ARM64_DISTRO)

$(OCB):
	@mkdir -p $(@D)
	env -u GOOS -u GOARCH GOBIN=$(abspath $(@D)) $(GO) install go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION)
	mv -f $(@D)/builder $@

$(ARM64_DISTRO): $(OCB) builder-config.yaml go.mod go.sum $(shell find receiver internal -name '*.go' -o -name '*.o')
	@mkdir -p $(ARM64_BUILD_DIR)
	sed -e 's|^\(  output_path:\).*|\1 ./$(ARM64_BUILD_DIR)|' builder-config.yaml > $(ARM64_BUILD_DIR)/builder-config.yaml
	@grep -q '^  output_path: ./$(ARM64_BUILD_DIR)$$' $(ARM64_BUILD_DIR)/builder-config.yaml \
		|| { echo "builder-config.yaml has no dist.output_path line to redirect"; exit 1; }
	GOOS=linux GOARCH=arm64 $(OCB) --config $(ARM64_BUILD_DIR)/builder-config.yaml
	@readelf -h $@ | grep -q 'Machine: *AArch64' || { echo "$@ is not an arm64 executable"; exit 1; }
