//go:build linux

package procfs

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// debianTree is a Debian-like root (merged /usr, multiarch directories)
// with an ld.so.cache in the given format.
func debianTree(t *testing.T, cache func([]LDCacheEntry) []byte) tree {
	tr := newTree(t)
	amd64, arm64 := elfHeader(elf.EM_X86_64), elfHeader(elf.EM_AARCH64)
	const d = "usr/lib/x86_64-linux-gnu/"
	tr.symlink("lib", "usr/lib")
	tr.file(d+"libc.so.6", amd64, 0o755)
	tr.file(d+"glibc-hwcaps/x86-64-v3/libc.so.6", amd64, 0o755)
	tr.file(d+"libc.so", "/* GNU ld script */\nGROUP ( /lib/x86_64-linux-gnu/libc.so.6 )\n", 0o644)
	tr.file(d+"libpthread.so.0", amd64, 0o644)
	tr.file(d+"libssl.so.3", amd64, 0o644)
	tr.file(d+"libssl.so.1.1", amd64, 0o644)
	tr.file(d+"libssl.so.10", arm64, 0o644) // a newer version, wrong machine
	tr.file(d+"libnocache.so.2", amd64, 0o644)
	tr.file(d+"libbar.so.1", arm64, 0o644)
	tr.file("usr/lib/libbar.so.1", amd64, 0o644)
	tr.file("usr/local/lib/libstale.so.1", amd64, 0o644)
	tr.file("etc/shadow", "secret", 0o600)
	tr.file("usr/bin/bash", amd64, 0o755)
	tr.file("usr/local/bin/bash", amd64, 0o755)
	tr.file("usr/bin/script.sh", "#!/bin/sh\n", 0o755)
	tr.file("usr/bin/noexec", amd64, 0o644)
	tr.file("usr/sbin/libvirtd", amd64, 0o755)
	tr.file("etc/ld.so.cache", string(cache([]LDCacheEntry{
		{Name: "libssl.so.3", Path: "/lib/x86_64-linux-gnu/libssl.so.3", Flags: x8664},
		{Name: "libssl.so.1.1", Path: "/lib/x86_64-linux-gnu/libssl.so.1.1", Flags: x8664},
		{Name: "libssl.so.10", Path: "/lib/x86_64-linux-gnu/libssl.so.10", Flags: x8664},
		{Name: "libstale.so.1", Path: "/lib/x86_64-linux-gnu/libstale.so.1", Flags: x8664},
		{Name: "libstale.so.1", Path: "/usr/local/lib/libstale.so.1", Flags: x8664},
		{Name: "libpthread.so.0", Path: "/lib/x86_64-linux-gnu/libpthread.so.0", Flags: x8664},
		{Name: "libevil.so.1", Path: "/../../../../../../etc/shadow", Flags: x8664},
		{Name: "libc.so.6", Path: "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libc.so.6", Flags: x8664, HWCap: 1<<62 | 1},
		{Name: "libc.so.6", Path: "/lib/x86_64-linux-gnu/libc.so.6", Flags: x8664},
		{Name: "libc.so.6", Path: "/lib/i386-linux-gnu/libc.so.6", Flags: FlagELFLibc6},
		{Name: "libc.so", Path: "/lib/x86_64-linux-gnu/libc.so", Flags: x8664},
	})), 0o644)
	return tr
}

func newFormat(libs []LDCacheEntry) []byte { b, _ := newCache(libs); return b }
func oldFormat(libs []LDCacheEntry) []byte { return oldCache(libs, true) }

func TestResolveLibrary(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	const hwcap = "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libc.so.6"
	tests := []struct {
		name, lib, want string
		source          Source
		alternatives    []string
	}{
		{"libc", "libc", libc, SourceLDCache, []string{hwcap}},
		{"without lib prefix, as bcc", "c", libc, SourceLDCache, []string{hwcap}},
		{"unversioned soname prefers a version to the linker script", "libc.so", libc, SourceLDCache, []string{hwcap}},
		{"exact soname", "libc.so.6", libc, SourceLDCache, []string{hwcap}},
		{"pthread", "pthread", "/lib/x86_64-linux-gnu/libpthread.so.0", SourceLDCache, nil},
		{"newest usable version", "ssl", "/lib/x86_64-linux-gnu/libssl.so.3", SourceLDCache, nil},
		{"exact older version", "libssl.so.1.1", "/lib/x86_64-linux-gnu/libssl.so.1.1", SourceLDCache, nil},
		{"stale cache entry skipped", "libstale", "/usr/local/lib/libstale.so.1", SourceLDCache, nil},
		{"not in the cache", "nocache", "/lib/x86_64-linux-gnu/libnocache.so.2", SourceLibraryDir, nil},
		{"wrong machine skipped", "libbar", "/lib/libbar.so.1", SourceLibraryDir, nil}, // /lib is a link to usr/lib, and searched first
		{"absolute path", "/usr/lib/libbar.so.1", "/usr/lib/libbar.so.1", SourceAbsolute, nil},
	}
	for _, format := range []struct {
		name  string
		cache func([]LDCacheEntry) []byte
	}{{"new cache", newFormat}, {"old cache", oldFormat}} {
		tr := debianTree(t, format.cache)
		r := Resolver{Root: Root(tr.dir), Arch: "amd64"}
		for _, tt := range tests {
			t.Run(format.name+"/"+tt.name, func(t *testing.T) {
				got, err := r.Library(tt.lib)
				require.NoError(t, err)
				assert.Equal(t, tt.want, got.Path)
				assert.Equal(t, tt.source, got.Source)
				assert.Equal(t, tt.alternatives, got.Alternatives)
				_, id, err := r.Root.Stat(tt.want)
				require.NoError(t, err)
				assert.Equal(t, id, got.ID)
			})
		}
	}
}

func TestResolveLibraryErrors(t *testing.T) {
	tr := debianTree(t, newFormat)
	r := Resolver{Root: Root(tr.dir), Arch: "amd64"}
	tests := []struct{ lib, want string }{
		{"libmissing", `library "libmissing" (libmissing.so*) not found in ` + tr.dir + `/etc/ld.so.cache or /lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64, /lib, /usr/lib`},
		{"libssl.so.10", "is for EM_AARCH64, not EM_X86_64"},
		// The path in the cache climbs out of the root: it resolves to the
		// root's own /etc/shadow, which is no library.
		{"evil", "ld.so.cache entries unusable: " + tr.dir + "/etc/shadow is not an ELF file"},
		{"relative/path", `"relative/path": a path must be absolute`},
		{"", `"" is not a file name`},
		{"..", `".." is not a file name`},
	}
	for _, tt := range tests {
		_, err := r.Library(tt.lib)
		require.Error(t, err, tt.lib)
		assert.Contains(t, err.Error(), tt.want, tt.lib)
	}
}

func TestResolveExecutable(t *testing.T) {
	tr := debianTree(t, newFormat)
	r := Resolver{Root: Root(tr.dir), Arch: "amd64", SearchPath: "relative/bin:/usr/local/bin:/usr/bin:/usr/sbin"}
	got, err := r.Executable("bash")
	require.NoError(t, err)
	assert.Equal(t, "/usr/local/bin/bash", got.Path)
	assert.Equal(t, SourceSearchPath, got.Source)

	r.SearchPath = "/usr/bin"
	got, err = r.Executable("bash")
	require.NoError(t, err)
	assert.Equal(t, "/usr/bin/bash", got.Path)

	_, err = r.Executable("script.sh")
	require.EqualError(t, err, `executable "script.sh": no ELF executable for amd64 in PATH (/usr/bin): `+tr.dir+`/usr/bin/script.sh is not an ELF file`)
	_, err = r.Executable("noexec")
	require.EqualError(t, err, `executable "noexec" not found in PATH (/usr/bin)`)
	_, err = r.Executable("../bin/bash")
	require.EqualError(t, err, `"../bin/bash" is not a file name`)
}

func TestResolve(t *testing.T) {
	tr := debianTree(t, newFormat)
	r := Resolver{Root: Root(tr.dir), Arch: "amd64", SearchPath: "/usr/bin:/usr/sbin"}
	tests := []struct {
		name, want string
		source     Source
	}{
		{"bash", "/usr/bin/bash", SourceSearchPath},
		{"c", "/lib/x86_64-linux-gnu/libc.so.6", SourceLDCache},
		{"libc", "/lib/x86_64-linux-gnu/libc.so.6", SourceLDCache},
		{"libvirtd", "/usr/sbin/libvirtd", SourceSearchPath},
		{"/usr/bin/bash", "/usr/bin/bash", SourceAbsolute},
		{"/usr/bin/../bin/bash", "/usr/bin/bash", SourceAbsolute},
	}
	for _, tt := range tests {
		got, err := r.Resolve(tt.name)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got.Path, tt.name)
		assert.Equal(t, tt.source, got.Source, tt.name)
	}
	_, err := r.Resolve("nothing")
	require.EqualError(t, err, `executable "nothing" not found in PATH (/usr/bin:/usr/sbin); library "nothing" (libnothing.so*) not found in `+tr.dir+`/etc/ld.so.cache or /lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64, /lib, /usr/lib`)
	_, err = r.Resolve("/usr/lib")
	require.EqualError(t, err, tr.dir+"/usr/lib: not a regular file")
}

// TestResolveMusl: an Alpine-like root has no ld.so.cache; its C library
// is musl's dynamic loader.
func TestResolveMusl(t *testing.T) {
	tr := newTree(t)
	tr.file("lib/ld-musl-x86_64.so.1", elfHeader(elf.EM_X86_64), 0o755)
	tr.symlink("lib/libc.musl-x86_64.so.1", "ld-musl-x86_64.so.1")
	tr.file("usr/lib/libz.so.1.3", elfHeader(elf.EM_X86_64), 0o755)
	tr.symlink("usr/lib/libz.so.1", "libz.so.1.3")
	r := Resolver{Root: Root(tr.dir), Arch: "amd64"}
	for _, name := range []string{"c", "libc"} {
		got, err := r.Library(name)
		require.NoError(t, err)
		assert.Equal(t, "/lib/libc.musl-x86_64.so.1", got.Path)
		assert.Equal(t, SourceLibraryDir, got.Source)
	}
	got, err := r.Library("z")
	require.NoError(t, err)
	assert.Equal(t, "/usr/lib/libz.so.1.3", got.Path, "newest version: 1.3 before 1")
	_, err = r.Library("libc.so.6")
	require.Error(t, err)
}

func TestResolveArm64(t *testing.T) {
	tr := newTree(t)
	const d = "usr/lib/aarch64-linux-gnu/"
	tr.file(d+"libc.so.6", elfHeader(elf.EM_AARCH64), 0o755)
	tr.file("usr/lib/x86_64-linux-gnu/libc.so.6", elfHeader(elf.EM_X86_64), 0o755)
	tr.file("etc/ld.so.cache", string(newFormat([]LDCacheEntry{
		{Name: "libc.so.6", Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", Flags: x8664},
		{Name: "libc.so.6", Path: "/" + d + "libc.so.6", Flags: FlagELFLibc6 | FlagAArch64Lib64},
	})), 0o644)
	got, err := Resolver{Root: Root(tr.dir), Arch: "arm64"}.Library("libc")
	require.NoError(t, err)
	assert.Equal(t, "/"+d+"libc.so.6", got.Path)
	got, err = Resolver{Root: Root(tr.dir), Arch: "amd64"}.Library("libc")
	require.NoError(t, err)
	assert.Equal(t, "/usr/lib/x86_64-linux-gnu/libc.so.6", got.Path)
}

func TestCompareVersions(t *testing.T) {
	v := func(s string) []string { return strings.Split(s, ".") }
	assert.Positive(t, compareVersions(v("3"), v("1.1")))
	assert.Positive(t, compareVersions(v("10"), v("9")))
	assert.Positive(t, compareVersions(v("1.0.2"), v("1.0")))
	assert.Zero(t, compareVersions(v("6"), v("6")))
	assert.Negative(t, compareVersions(v("0d"), v("1")))
}

func TestLibraryInProcessFake(t *testing.T) {
	tr := newTree(t)
	line := func(ino int, path string) string {
		return "7f0000000000-7f0000001000 r-xp 00000000 fe:00 " + strconv.Itoa(ino) + "                    " + path
	}
	tr.file("proc/1/maps", strings.Join([]string{
		line(1, "/usr/bin/app"),
		line(2, "/usr/lib/libc-client.so.2007e"),
		line(3, "/lib/x86_64-linux-gnu/libc-2.28.so"),
		line(4, "/usr/lib/libssl.so.1.1"),
		line(5, "/usr/lib/libssl.so.3"),
		"7f0000000000-7f0000001000 r--p 00000000 fe:00 6                    /usr/lib/libdata.so.1",
		line(7, "/a/libfoo.so.1"),
		line(8, "/b/libfoo.so.1"),
		line(9, "/lib/ld-musl-x86_64.so.1"),
	}, "\n")+"\n", 0o444)
	fs := FS{Root: tr.dir}
	tests := []struct{ name, want string }{
		{"libc", "/lib/x86_64-linux-gnu/libc-2.28.so"}, // glibc before 2.34: the real name
		{"libc.so.6", "/lib/x86_64-linux-gnu/libc-2.28.so"},
		{"ssl", "/usr/lib/libssl.so.3"},
		{"libssl.so.1.1", "/usr/lib/libssl.so.1.1"},
		{"/usr/lib/libssl.so.1.1", "/usr/lib/libssl.so.1.1"},
	}
	for _, tt := range tests {
		got, err := fs.LibraryInProcess(1, tt.name)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got.Path, tt.name)
		assert.Equal(t, SourceProcessMaps, got.Source, tt.name)
	}
	_, err := fs.LibraryInProcess(1, "libdata")
	require.EqualError(t, err, `process 1 maps no library "libdata"`, "mapped, but not executable")
	_, err = fs.LibraryInProcess(1, "foo")
	require.EqualError(t, err, `process 1 maps several libraries matching "foo": /a/libfoo.so.1 (254:0:7), /b/libfoo.so.1 (254:0:8)`)

	tr.file("proc/2/maps", line(9, "/lib/ld-musl-x86_64.so.1")+"\n", 0o444)
	got, err := fs.LibraryInProcess(2, "c")
	require.NoError(t, err)
	assert.Equal(t, "/lib/ld-musl-x86_64.so.1", got.Path)
}

// TestResolveHost resolves names on this machine as bcc and bpftrace would.
func TestResolveHost(t *testing.T) {
	r := Resolver{}
	libc, err := r.Library("libc")
	require.NoError(t, err)
	assert.Contains(t, []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"}, libc.Path)
	assert.Equal(t, SourceLDCache, libc.Source)
	fi, err := os.Stat(libc.Path)
	require.NoError(t, err)
	assert.Equal(t, IDOf(fi), libc.ID)
	for _, name := range []string{"c", "libc.so.6", "libc.so"} {
		got, err := r.Library(name)
		require.NoError(t, err, name)
		assert.Equal(t, libc.Path, got.Path, name)
	}
	pthread, err := r.Library("libpthread")
	require.NoError(t, err)
	assert.Equal(t, "libpthread.so.0", filepath.Base(pthread.Path))

	want, err := exec.LookPath("sleep")
	require.NoError(t, err)
	sleep, err := r.Executable("sleep")
	require.NoError(t, err)
	assert.Equal(t, want, sleep.Path)

	// A process's libc, found through its maps, is the same file.
	pid := startProcess(t, "sh", "-c", "echo ready; while :; do sleep 600; done")
	fs := FS{}
	for _, name := range []string{"libc", "c", "libc.so.6"} {
		got, err := fs.LibraryInProcess(pid, name)
		require.NoError(t, err, name)
		assert.Equal(t, libc.ID, got.ID, name)
		assert.Equal(t, SourceProcessMaps, got.Source)
		real, err := filepath.EvalSymlinks(libc.Path)
		require.NoError(t, err)
		assert.Equal(t, real, got.Path, "maps show the path with symbolic links resolved")
	}
	// Resolving "libc" in the process's root finds the same file too.
	inRoot, err := Resolver{Root: fs.ProcessRoot(pid)}.Library("libc")
	require.NoError(t, err)
	assert.Equal(t, libc.ID, inRoot.ID)
	assert.Equal(t, libc.Path, inRoot.Path)
}
