//go:build linux

package armvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// HostPackages are the Debian packages the harness needs on the host:
// qemu-system-aarch64, the arm64 C cross compiler with its C library (for
// the C fixtures, which run in the VM with that C library, and the tests
// that cross-build), the arm64 binutils (objdump and as, for
// internal/insn's tests) and <sys/sdt.h> for the fixtures' USDT probes.
var HostPackages = []string{
	"qemu-system-arm",
	"gcc-aarch64-linux-gnu",
	"libc6-dev-arm64-cross",
	"binutils-aarch64-linux-gnu",
	"systemtap-sdt-dev",
}

// kernelPackage matches the names of the Debian bookworm arm64 cloud
// kernels (Linux 6.1), which have CONFIG_UPROBES, CONFIG_UPROBE_EVENTS,
// CONFIG_BPF_SYSCALL, CONFIG_BPF_JIT and BTF, and boot on qemu's virt
// machine with a PL011 console. N is the ABI number; the newest wins.
var kernelPackage = regexp.MustCompile(`^linux-image-6\.1\.0-([0-9]+)-cloud-arm64-unsigned$`)

// Assets are the arm64 binaries the VM boots: a kernel image and a static
// busybox. They live in a cache directory outside the repository.
type Assets struct {
	// Kernel is the path of the kernel image (vmlinuz, a gzip-compressed
	// arm64 Image, which qemu unpacks).
	Kernel string
	// KernelPackage is the Debian package it came from, e.g.
	// "linux-image-6.1.0-56-cloud-arm64-unsigned".
	KernelPackage string
	// Busybox is the path of a static arm64 busybox.
	Busybox string
}

// DefaultCacheDir returns $XDG_CACHE_HOME/otel-uprobe/arm64, or
// ~/.cache/otel-uprobe/arm64 without XDG_CACHE_HOME.
func DefaultCacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "otel-uprobe", "arm64"), nil
}

// Host runs the Debian tools of the host. Log receives what they print.
type Host struct {
	Log io.Writer
}

func (h Host) log() io.Writer {
	if h.Log == nil {
		return io.Discard
	}
	return h.Log
}

// run runs a command in dir, copying its output to the log.
func (h Host) run(ctx context.Context, dir string, name string, args ...string) error {
	fmt.Fprintf(h.log(), "armvm: %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = h.log(), h.log()
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// output runs a command and returns its standard output.
func (h Host) output(ctx context.Context, name string, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("running %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Installed reports whether a Debian package is installed.
func (h Host) Installed(ctx context.Context, pkg string) bool {
	out, err := h.output(ctx, "dpkg-query", "-W", "-f=${Status}", pkg)
	return err == nil && strings.Contains(out, "install ok installed")
}

// EnsurePackages installs the Debian packages among pkgs that are missing,
// running apt-get update first when one has no install candidate. It needs
// root when something is missing.
func (h Host) EnsurePackages(ctx context.Context, pkgs ...string) error {
	var missing []string
	for _, p := range pkgs {
		if !h.Installed(ctx, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, missing...)
	if err := h.run(ctx, "", "apt-get", args...); err != nil {
		if err := h.run(ctx, "", "apt-get", "update"); err != nil {
			return fmt.Errorf("installing %s: %w", strings.Join(missing, " "), err)
		}
		if err := h.run(ctx, "", "apt-get", args...); err != nil {
			return fmt.Errorf("installing %s: %w", strings.Join(missing, " "), err)
		}
	}
	return nil
}

// ensureARM64Lists makes apt know arm64 packages: it adds the foreign
// architecture and updates the package lists when arm64 is not yet one.
func (h Host) ensureARM64Lists(ctx context.Context) error {
	out, err := h.output(ctx, "dpkg", "--print-foreign-architectures")
	if err != nil {
		return err
	}
	if slices.Contains(strings.Fields(out), "arm64") {
		return nil
	}
	if err := h.run(ctx, "", "dpkg", "--add-architecture", "arm64"); err != nil {
		return err
	}
	return h.run(ctx, "", "apt-get", "update")
}

// newestKernelPackage returns the name of the newest bookworm arm64 cloud
// kernel apt knows, or "" when it knows none.
func (h Host) newestKernelPackage(ctx context.Context) (string, error) {
	out, err := h.output(ctx, "apt-cache", "search", "--names-only", kernelPackage.String())
	if err != nil {
		return "", err
	}
	return pickKernel(out), nil
}

// pickKernel picks the kernel package with the largest ABI number from
// apt-cache search output ("NAME - DESCRIPTION" lines).
func pickKernel(aptCacheSearch string) string {
	best, bestN := "", -1
	for _, line := range strings.Split(aptCacheSearch, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		m := kernelPackage.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		if n, err := strconv.Atoi(m[1]); err == nil && n > bestN {
			best, bestN = name, n
		}
	}
	return best
}

// download fetches the arm64 package pkg with apt-get download into a
// fresh directory under tmp and unpacks it with dpkg-deb; it returns the
// directory the package was unpacked into.
func (h Host) download(ctx context.Context, tmp, pkg string) (string, error) {
	dir, err := os.MkdirTemp(tmp, "deb-")
	if err != nil {
		return "", err
	}
	get := func() error { return h.run(ctx, dir, "apt-get", "download", pkg+":arm64") }
	if err := get(); err != nil {
		// The lists may be older than the mirror: update once and retry.
		if uerr := h.run(ctx, "", "apt-get", "update"); uerr != nil {
			return "", errors.Join(err, uerr)
		}
		if err := get(); err != nil {
			return "", err
		}
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil || len(debs) != 1 {
		return "", fmt.Errorf("downloading %s: want one .deb in %s, found %v (%v)", pkg, dir, debs, err)
	}
	root := filepath.Join(dir, "root")
	if err := h.run(ctx, "", "dpkg-deb", "-x", debs[0], root); err != nil {
		return "", err
	}
	return root, nil
}

// Assets returns the kernel and busybox in cacheDir, downloading them with
// apt when they are not there yet (or when refresh is set and apt knows a
// newer kernel). A warm cache needs no apt and no network.
func (h Host) Assets(ctx context.Context, cacheDir string, refresh bool) (Assets, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Assets{}, fmt.Errorf("creating the cache directory: %w", err)
	}
	a := Assets{Busybox: filepath.Join(cacheDir, "busybox")}
	cached := cachedKernel(cacheDir)
	if cached != "" && !refresh && fileExists(a.Busybox) {
		a.KernelPackage = cached
		a.Kernel = filepath.Join(cacheDir, cached+".vmlinuz")
		return a, nil
	}
	if err := h.ensureARM64Lists(ctx); err != nil {
		return Assets{}, fmt.Errorf("enabling arm64 packages: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, "download-")
	if err != nil {
		return Assets{}, err
	}
	defer os.RemoveAll(tmp)

	pkg, err := h.newestKernelPackage(ctx)
	if err == nil && pkg == "" {
		if err = h.run(ctx, "", "apt-get", "update"); err == nil {
			pkg, err = h.newestKernelPackage(ctx)
		}
	}
	if err != nil {
		return Assets{}, fmt.Errorf("finding an arm64 kernel: %w", err)
	}
	if pkg == "" {
		if cached == "" {
			return Assets{}, fmt.Errorf("finding an arm64 kernel: apt knows no package matching %s", kernelPackage)
		}
		pkg = cached
	}
	a.KernelPackage = pkg
	a.Kernel = filepath.Join(cacheDir, pkg+".vmlinuz")
	if !fileExists(a.Kernel) {
		root, err := h.download(ctx, tmp, pkg)
		if err != nil {
			return Assets{}, err
		}
		images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
		if len(images) != 1 {
			return Assets{}, fmt.Errorf("unpacking %s: want one boot/vmlinuz-*, found %v", pkg, images)
		}
		if err := copyFile(images[0], a.Kernel); err != nil {
			return Assets{}, err
		}
	}
	if !fileExists(a.Busybox) {
		root, err := h.download(ctx, tmp, "busybox-static")
		if err != nil {
			return Assets{}, err
		}
		if err := copyFile(filepath.Join(root, "bin", "busybox"), a.Busybox); err != nil {
			return Assets{}, err
		}
	}
	return a, nil
}

// cachedKernel returns the package name of the newest kernel image in the
// cache, or "".
func cachedKernel(cacheDir string) string {
	images, _ := filepath.Glob(filepath.Join(cacheDir, "*.vmlinuz"))
	var names []string
	for _, img := range images {
		names = append(names, strings.TrimSuffix(filepath.Base(img), ".vmlinuz")+" - cached")
	}
	return pickKernel(strings.Join(names, "\n"))
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// copyFile copies src to dst through a temporary file, so that dst appears
// complete or not at all.
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return errors.Join(fmt.Errorf("copying %s: %w", src, err), tmp.Close())
	}
	if err := tmp.Chmod(0o755); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
