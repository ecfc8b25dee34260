//go:build linux

// Command armvm runs Go test binaries on an arm64 Linux kernel in
// qemu-system-aarch64 (see package harness/armvm) and exits non-zero when
// a test fails or the VM does not finish in time. make test-arm64 runs it
// from the repository's root:
//
//	go run ./harness/armvm/cmd/armvm [flags] [package ...]
//
// Without packages it runs armvm.DefaultSuite (harness/e2e/distrotest only
// with -distro, the arm64 collector distribution). It installs missing
// Debian packages and downloads the kernel and busybox into the cache on
// first use (as root).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/otel-uprobe/uprobereceiver/harness/armvm"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "armvm:", err)
		os.Exit(1)
	}
}

func run() error {
	defaultCache, err := armvm.DefaultCacheDir()
	if err != nil {
		return err
	}
	var (
		cache       = flag.String("cache", defaultCache, "directory of the cached kernel and busybox")
		cpus        = flag.Int("smp", 2, "virtual CPUs")
		mem         = flag.Int("mem", 2048, "guest memory in MiB")
		timeout     = flag.Duration("timeout", 12*time.Minute, "limit of the VM run, from boot to power-off")
		testTimeout = flag.Duration("test-timeout", 8*time.Minute, "-test.timeout of each test binary")
		keep        = flag.Bool("keep", false, "keep the work directory (test binaries, initramfs)")
		refresh     = flag.Bool("refresh", false, "ask apt for a newer kernel even when one is cached")
		noDeps      = flag.Bool("no-deps", false, "do not install missing Debian packages")
		run         = flag.String("run", "", "-test.run of the packages named on the command line")
		distro      = flag.String("distro", "", "the collector distribution built for arm64 (make build-arm64), for harness/e2e/distrotest")
	)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	total := time.Now()

	suite := armvm.DefaultSuite
	if flag.NArg() > 0 {
		suite = nil
		for _, p := range flag.Args() {
			pkg := armvm.Package{Path: p}
			for _, d := range armvm.DefaultSuite {
				if filepath.Clean(d.Path) == filepath.Clean(p) {
					pkg = d
				}
			}
			if *run != "" {
				pkg.Run = *run
			}
			suite = append(suite, pkg)
		}
	}
	if *distro == "" {
		var kept []armvm.Package
		for _, p := range suite {
			if p.NeedsDistro {
				fmt.Printf("armvm: no -distro: %s is left out\n", p.Path)
				continue
			}
			kept = append(kept, p)
		}
		suite = kept
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}

	host := armvm.Host{Log: os.Stderr}
	if !*noDeps {
		if err := host.EnsurePackages(ctx, armvm.HostPackages...); err != nil {
			return err
		}
	}
	assets, err := host.Assets(ctx, *cache, *refresh)
	if err != nil {
		return err
	}
	fmt.Printf("armvm: kernel %s, busybox %s\n", assets.Kernel, assets.Busybox)

	work, err := os.MkdirTemp("", "armvm-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Printf("armvm: work directory %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}

	started := time.Now()
	b := armvm.Builder{RepoRoot: root, WorkDir: work, Log: os.Stderr, Distro: *distro}
	bins, err := b.TestBinaries(ctx, suite)
	if err != nil {
		return err
	}
	fixtures, err := b.Fixtures(ctx)
	if err != nil {
		return err
	}
	img, err := armvm.MakeImage(work, assets, suite, bins, fixtures, armvm.InitOptions{
		CI: os.Getenv("CI") == "true", TestTimeout: *testTimeout,
	})
	if err != nil {
		return err
	}
	st, err := os.Stat(img.Initramfs)
	if err != nil {
		return err
	}
	fmt.Printf("armvm: built %d test binaries and %d fixtures, initramfs %.1f MiB, in %v\n",
		len(bins), len(fixtures), float64(st.Size())/(1<<20), time.Since(started).Round(100*time.Millisecond))

	vm := armvm.VM{CPUs: *cpus, MemoryMiB: *mem, Timeout: *timeout, Console: os.Stdout}
	fmt.Printf("armvm: qemu-system-aarch64 %s\n", strings.Join(vm.Args(img), " "))
	rep, err := vm.Run(ctx, img)
	if err != nil {
		return err
	}
	fmt.Printf("\narmvm: kernel %s, %d CPUs, booted in %v, VM ran %v, whole run %v\n",
		rep.Kernel, rep.CPUs, rep.Boot.Round(100*time.Millisecond), rep.Total.Round(100*time.Millisecond),
		time.Since(total).Round(100*time.Millisecond))
	for _, t := range rep.Tests {
		status := "ok"
		switch {
		case !t.Finished:
			status = "did not finish"
		case t.ExitCode != 0:
			status = fmt.Sprintf("FAIL (exit code %d)", t.ExitCode)
		}
		fmt.Printf("armvm: %-20s %-22s %v\n", t.Name, status, t.Duration.Round(100*time.Millisecond))
	}
	if f := rep.Failures(); len(f) > 0 {
		return errors.New(strings.Join(f, "; "))
	}
	fmt.Println("armvm: PASS")
	return nil
}
