//go:build linux

// Package armvm runs tests on an arm64 Linux kernel without arm64 hardware:
// it boots the kernel in qemu-system-aarch64 (TCG emulation) with an
// initramfs that holds busybox, cross-built Go test binaries and fixtures,
// and reads the outcome from the serial console. make test-arm64 runs it
// through its command, harness/armvm/cmd/armvm.
//
// # What the harness does
//
//   - Host: installs the Debian packages it needs when missing
//     ([HostPackages]: qemu-system-arm, the arm64 gcc cross compiler and C
//     library, the arm64 binutils, systemtap-sdt-dev), and fetches a Debian
//     bookworm arm64 cloud kernel (Linux 6.1,
//     linux-image-6.1.0-N-cloud-arm64-unsigned, the newest N apt knows) and
//     busybox-static:arm64 with apt-get download, after enabling the arm64
//     foreign architecture. Both are cached outside the repository
//     ([DefaultCacheDir], ~/.cache/otel-uprobe/arm64), so a warm run needs
//     no network.
//   - Build ([Builder]): CGO_ENABLED=0 GOARCH=arm64 go test -c of each
//     package, and the fixtures ([Builder.Fixtures]): the static C
//     programs of testdata/arm64, the demo program with its shared library
//     at -O2 and -O0 and the C programs the receiver's tests build with
//     gcc on the host (linked against the arm64 C library, which goes into
//     the image), the Go programs, the testdata files the tests read, and
//     the arm64 collector distribution (make build-arm64). The tests find
//     them through harness/testutil ([FixturesEnv]).
//   - Image ([MakeImage]): an uncompressed newc initramfs written in Go
//     ([WriteInitramfs]; no cpio tool needed) whose /init ([InitScript])
//     mounts proc, sysfs, devtmpfs, tmpfs and tracefs, brings up the
//     loopback interface and runs every test binary with -test.v between
//     markers on the console, passing CI=true through, then powers off.
//   - Run ([VM]): qemu-system-aarch64 -M virt -cpu cortex-a57 -m 2048
//     -nographic -no-reboot -net none, with a timeout; the [Report] holds
//     each test binary's exit code and time, and whether the VM finished.
//
// [DefaultSuite] is what runs: the parsers and decoders, this package's
// smoke tests, the engine's layout, every test of internal/tracer (the arm64
// BPF engine loaded into Linux 6.1, which has no uprobe_multi, so every
// location is attached through its own perf event), the receiver's
// end-to-end tests ([ReceiverTests]) and the collector distribution against
// the demo (harness/e2e/distrotest). Tests that need the host's tools or
// sources (gcc, objdump, readelf) are skipped or left out in the VM by name
// ([Package.Skip], [Package.Run]); they run on the host in make test. Tests
// that make a million probed calls make fewer in the VM, where emulation
// costs tens of microseconds per hit (testutil.Scaled).
//
// # The smoke tests
//
// The package's own tests include privileged uprobe tests that need no BPF
// engine: they attach tracefs uprobes to fixtures at the offsets
// internal/insn chooses and compare the kernel's hit counts
// (uprobe_profile) with the calls made. They run on the host with fixtures
// built there, and in the VM with the prebuilt ones ([FixturesEnv]). On
// arm64 they also check internal/insn's classes against the kernel's
// decoder: every instruction ClassifyARM64 calls Unsupported must be
// refused, every other one accepted.
package armvm
