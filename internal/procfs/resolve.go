package procfs

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Source says how a name was resolved to a file.
type Source string

// The ways a name is resolved.
const (
	// SourceAbsolute: the name was an absolute path.
	SourceAbsolute Source = "absolute path"
	// SourceSearchPath: an executable found in a directory of PATH.
	SourceSearchPath Source = "PATH"
	// SourceLDCache: a library listed in /etc/ld.so.cache.
	SourceLDCache Source = "ld.so.cache"
	// SourceLibraryDir: a library found in a default library directory.
	SourceLibraryDir Source = "library directory"
	// SourceProcessMaps: a file a process has mapped (/proc/PID/maps).
	SourceProcessMaps Source = "process maps"
	// SourceLibraryPath: a library found in a program's LD_LIBRARY_PATH or
	// DT_RUNPATH (Resolver.LibraryPath).
	SourceLibraryPath Source = "library path"
)

// Resolved is the file a name resolved to.
type Resolved struct {
	// Path is the file's absolute path as seen from the root it was
	// resolved in (not prefixed with that root's directory). For
	// SourceProcessMaps it is the path the process sees.
	Path string
	// Source says how the name was resolved.
	Source Source
	// ID is the file's device and inode (through symbolic links).
	ID FileID
	// Alternatives are other files the dynamic loader may load under the
	// same name instead of Path, on CPUs that support them (glibc-hwcaps
	// variants listed in ld.so.cache, such as
	// /usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libfoo.so.1).
	// Resolve a library in a process to know which one it loaded.
	Alternatives []string
	// Deleted (SourceProcessMaps only) says the mapped file was removed or
	// replaced since it was mapped: Path no longer leads to it.
	Deleted bool
}

// DefaultSearchPath is the search path used when the collector's PATH is
// empty (Debian's default for root).
const DefaultSearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// maxDirEntries bounds the entries read from one library directory.
const maxDirEntries = 1 << 16

// Resolver resolves executable and library names to files, as bcc, bpftrace
// and perf do, in one file system tree. The zero Resolver resolves in the
// collector's own view with its PATH, for the host's architecture.
type Resolver struct {
	// Root is the tree names are resolved in: nil or Root("/") for the
	// collector's own view, or a process's root ([FS.ProcessRoot], best
	// opened once as a [Dir]) to resolve as a container sees its own files.
	Root Tree
	// SearchPath is the colon-separated list of directories searched for
	// executables; empty means the collector's $PATH, or DefaultSearchPath
	// when that is empty too. Relative directories are ignored.
	SearchPath string
	// Arch is the GOARCH whose libraries are wanted ("amd64" or "arm64");
	// empty means the host's.
	Arch string
	// LibraryPath lists directories searched for libraries before
	// /etc/ld.so.cache, as the dynamic loader searches a program's
	// LD_LIBRARY_PATH and DT_RUNPATH (see [FS.LibraryPath]).
	LibraryPath []string
}

// tree returns the tree names are resolved in.
func (r Resolver) tree() Tree {
	if r.Root == nil {
		return Root("")
	}
	return r.Root
}

func (r Resolver) arch() string {
	if r.Arch != "" {
		return r.Arch
	}
	return runtime.GOARCH
}

func (r Resolver) searchPath() string {
	if r.SearchPath != "" {
		return r.SearchPath
	}
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return DefaultSearchPath
}

// LibraryDirs returns the directories searched for libraries not in
// ld.so.cache, in order, for arch (a GOARCH): the multiarch directories of
// Debian and Ubuntu, then /lib64 and /usr/lib64 (Fedora, RHEL, SUSE), then
// /lib and /usr/lib (Alpine, Arch).
func LibraryDirs(arch string) []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	var dirs []string
	if triplet != "" {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
}

// Resolve resolves a target name as bpftrace does: an absolute path is
// taken as it is; otherwise the name is looked for as an executable in
// PATH and as a library ([Resolver.Library]), a name that looks like a
// library ("lib…" or containing ".so") as a library first. "bash" is
// /usr/bin/bash, "libc" and "c" are libc.so.6, "libvirtd" (an executable
// named like a library) is found in PATH after no library matched.
func (r Resolver) Resolve(name string) (Resolved, error) {
	if strings.Contains(name, "/") {
		return r.absolute(name)
	}
	first, second := r.Executable, r.Library
	if looksLikeLibrary(name) {
		first, second = r.Library, r.Executable
	}
	res, err1 := first(name)
	if err1 == nil {
		return res, nil
	}
	res, err2 := second(name)
	if err2 == nil {
		return res, nil
	}
	return Resolved{}, fmt.Errorf("%w; %w", err1, err2)
}

func looksLikeLibrary(name string) bool {
	return strings.HasPrefix(name, "lib") || strings.Contains(name, ".so")
}

// absolute checks an absolute path.
func (r Resolver) absolute(name string) (Resolved, error) {
	if !path.IsAbs(name) {
		return Resolved{}, fmt.Errorf("%q: a path must be absolute", name)
	}
	p := path.Clean(name)
	fi, id, err := r.tree().Stat(p)
	if err != nil {
		return Resolved{}, err
	}
	if !fi.Mode().IsRegular() {
		return Resolved{}, fmt.Errorf("%s: not a regular file", r.tree().Display(p))
	}
	return Resolved{Path: p, Source: SourceAbsolute, ID: id}, nil
}

// Executable finds an executable name in the directories of the search
// path, as exec.LookPath would (the first regular file with an execute
// bit), and checks that it is an ELF file of the resolver's architecture.
func (r Resolver) Executable(name string) (Resolved, error) {
	if err := checkName(name); err != nil {
		return Resolved{}, err
	}
	var skipped []string
	for _, dir := range strings.Split(r.searchPath(), ":") {
		if !path.IsAbs(dir) {
			continue
		}
		p := path.Join(dir, name)
		fi, id, err := r.tree().Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if err := r.checkELF(p); err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		return Resolved{Path: p, Source: SourceSearchPath, ID: id}, nil
	}
	if len(skipped) > 0 {
		return Resolved{}, fmt.Errorf("executable %q: no ELF executable for %s in PATH (%s): %s", name, r.arch(), r.searchPath(), strings.Join(skipped, "; "))
	}
	return Resolved{}, fmt.Errorf("executable %q not found in PATH (%s)", name, r.searchPath())
}

// Library resolves a library name as bcc's bcc_procutils_which_so does,
// then checks the file is an ELF library of the resolver's architecture:
//
//   - "c", "libc" and "libc.so" ask for the newest libc.so.N: a name
//     without ".so" gets the "lib" prefix it lacks, then versions of
//     libNAME.so are preferred, newest first, to libNAME.so itself (often
//     a linker script or a development link);
//   - a name with a version ("libc.so.6", "ld-linux-x86-64.so.2") asks
//     for exactly that soname.
//
// The library is looked for in /etc/ld.so.cache (entries of the
// architecture's ABI; baseline entries before glibc-hwcaps variants, which
// are listed in Alternatives), then in [LibraryDirs]. Asking for the C
// library ("c", "libc") also finds musl's (libc.musl-ARCH.so.1, or
// ld-musl-ARCH.so.1 itself) when there is no glibc.
func (r Resolver) Library(name string) (Resolved, error) {
	if strings.Contains(name, "/") {
		return r.absolute(name)
	}
	q, err := parseLibraryName(name, r.arch())
	if err != nil {
		return Resolved{}, err
	}
	var notes []string
	if len(r.LibraryPath) > 0 {
		res, err := r.libraryFromDirs(q, r.LibraryPath, SourceLibraryPath)
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, errNoMatch) {
			notes = append(notes, err.Error())
		}
	}
	res, err := r.libraryFromCache(q)
	if err == nil {
		return res, nil
	}
	if !errors.Is(err, errNoMatch) {
		notes = append(notes, err.Error())
	}
	res, err = r.libraryFromDirs(q, LibraryDirs(r.arch()), SourceLibraryDir)
	if err == nil {
		return res, nil
	}
	if !errors.Is(err, errNoMatch) {
		notes = append(notes, err.Error())
	}
	msg := fmt.Sprintf("library %q (%s) not found in %s or %s", name, q, r.tree().Display("/etc/ld.so.cache"), strings.Join(LibraryDirs(r.arch()), ", "))
	if len(notes) > 0 {
		msg += ": " + strings.Join(notes, "; ")
	}
	return Resolved{}, errors.New(msg)
}

var errNoMatch = errors.New("no match")

func (r Resolver) libraryFromCache(q libraryQuery) (Resolved, error) {
	data, _, err := r.tree().ReadFile("/etc/ld.so.cache", MaxLDCache)
	if errors.Is(err, fs.ErrNotExist) {
		return Resolved{}, errNoMatch
	}
	if err != nil {
		return Resolved{}, err
	}
	entries, err := ParseLDCache(data)
	if err != nil {
		return Resolved{}, fmt.Errorf("%s: %w", r.tree().Display("/etc/ld.so.cache"), err)
	}
	type cand struct {
		rank
		order int
		e     LDCacheEntry
	}
	var cands []cand
	for i, e := range entries {
		if !cacheFlagsMatch(e.Flags, r.arch()) {
			continue
		}
		if rk, ok := q.rankName(e.Name, false); ok {
			cands = append(cands, cand{rk, i, e})
		}
	}
	// Best name first; for one name, the baseline before hwcap variants,
	// then file order (the order of ld.so.conf's directories).
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if c := a.rank.compare(b.rank); c != 0 {
			return c < 0
		}
		if (a.e.HWCap == 0) != (b.e.HWCap == 0) {
			return a.e.HWCap == 0
		}
		return a.order < b.order
	})
	var skipped []string
	for _, c := range cands {
		if c.e.HWCap != 0 || !path.IsAbs(c.e.Path) {
			continue
		}
		_, id, err := r.tree().Stat(c.e.Path)
		if err == nil {
			err = r.checkELF(c.e.Path)
		}
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		res := Resolved{Path: path.Clean(c.e.Path), Source: SourceLDCache, ID: id}
		for _, o := range cands {
			if o.e.Name == c.e.Name && o.e.HWCap != 0 {
				res.Alternatives = append(res.Alternatives, o.e.Path)
			}
		}
		return res, nil
	}
	if len(skipped) > 0 {
		return Resolved{}, fmt.Errorf("ld.so.cache entries unusable: %s", strings.Join(skipped, "; "))
	}
	return Resolved{}, errNoMatch
}

func (r Resolver) libraryFromDirs(q libraryQuery, dirs []string, source Source) (Resolved, error) {
	type cand struct {
		rank
		dir  int
		path string
	}
	var cands []cand
	for i, dir := range dirs {
		if !path.IsAbs(dir) {
			continue
		}
		names, err := r.readDirNames(dir)
		if err != nil {
			continue
		}
		for _, n := range names {
			if rk, ok := q.rankName(n, false); ok {
				cands = append(cands, cand{rk, i, path.Join(dir, n)})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if c := cands[i].rank.compare(cands[j].rank); c != 0 {
			return c < 0
		}
		return cands[i].dir < cands[j].dir
	})
	var skipped []string
	for _, c := range cands {
		fi, id, err := r.tree().Stat(c.path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := r.checkELF(c.path); err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		return Resolved{Path: c.path, Source: source, ID: id}, nil
	}
	if len(skipped) > 0 {
		return Resolved{}, fmt.Errorf("candidates unusable: %s", strings.Join(skipped, "; "))
	}
	return Resolved{}, errNoMatch
}

// LibraryPath returns the directories process pid's dynamic loader searches
// before its library cache: those of LD_LIBRARY_PATH in its environment,
// then the DT_RUNPATH (or DT_RPATH) of its executable, with $ORIGIN
// expanded, as paths the process sees; root is the process's root (see
// [FS.ProcessRoot]), which its executable is read from. Unreadable parts
// are left out.
func (f FS) LibraryPath(pid int, root Tree) []string {
	var dirs []string
	if env, _, err := readPathLimited(f.pidPath(pid, "environ"), maxEnviron); err == nil {
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
				dirs = append(dirs, strings.Split(v, ":")...)
			}
		}
	}
	exe, _, err := f.Executable(pid)
	if err != nil {
		return dirs
	}
	file, _, err := root.OpenRegular(exe)
	if err != nil {
		return dirs
	}
	defer file.Close()
	ef, err := elf.NewFile(file)
	if err != nil {
		return dirs
	}
	defer ef.Close()
	if !dynamicReadable(ef) {
		return dirs
	}
	runpath, _ := ef.DynString(elf.DT_RUNPATH)
	if len(runpath) == 0 {
		runpath, _ = ef.DynString(elf.DT_RPATH)
	}
	origin := path.Dir(exe)
	for _, rp := range runpath {
		for _, d := range strings.Split(rp, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// maxEnviron bounds what is read of a process's environment for its
// LD_LIBRARY_PATH: execve takes at most 6 MiB of arguments and
// environment, and a loader search path beyond the first MiB is ignored.
const maxEnviron = 1 << 20

// maxDynamicSection bounds the .dynamic section and its string table that
// LibraryPath reads from a process's executable (a large C++ program's
// .dynstr is a few MiB).
const maxDynamicSection = 16 << 20

// dynamicReadable says whether the .dynamic section of a process's
// executable and the string table it links to can be read within bounds:
// stored as they are (debug/elf decompresses whatever size a compressed
// section's header declares, and the file is the process's) and at most
// maxDynamicSection bytes each.
func dynamicReadable(ef *elf.File) bool {
	ds := ef.SectionByType(elf.SHT_DYNAMIC)
	if ds == nil {
		return true // statically linked: DynString reads nothing
	}
	if ds.Link == 0 || int(ds.Link) >= len(ef.Sections) {
		return false
	}
	for _, s := range []*elf.Section{ds, ef.Sections[ds.Link]} {
		if s.Flags&elf.SHF_COMPRESSED != 0 || s.Size > maxDynamicSection {
			return false
		}
	}
	return true
}

// readPathLimited reads at most limit bytes of the file at path (no root)
// and says whether it is longer.
func readPathLimited(path string, limit int64) ([]byte, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	return readLimited(f, limit)
}

// readDirNames reads at most maxDirEntries names of directory dir of the
// tree ([Dir.ReadDirNames]: a FIFO or a device named as a directory, in
// a process's LD_LIBRARY_PATH say, is not opened).
func (r Resolver) readDirNames(dir string) ([]string, error) {
	var d *Dir
	switch t := r.tree().(type) {
	case *Dir:
		d = t
	case Root:
		var err error
		if d, err = t.OpenDir(); err != nil {
			return nil, err
		}
		defer d.Close()
	default:
		return nil, fmt.Errorf("reading directory %s: a tree of type %T", t.Display(dir), t)
	}
	names, _, err := d.ReadDirNames(dir, maxDirEntries)
	return names, err
}

// elfMachine is the ELF machine of each supported GOARCH.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkELF says whether the file is a 64-bit little-endian ELF file for the
// resolver's architecture (which rules out linker scripts, shell scripts
// and the 32-bit libraries some distributions keep in /usr/lib).
func (r Resolver) checkELF(p string) error {
	f, _, err := r.tree().OpenRegular(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var hdr [20]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || string(hdr[:4]) != elf.ELFMAG {
		return fmt.Errorf("%s is not an ELF file", r.tree().Display(p))
	}
	if elf.Class(hdr[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(hdr[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return fmt.Errorf("%s is not a 64-bit little-endian ELF file", r.tree().Display(p))
	}
	want, ok := elfMachine[r.arch()]
	if !ok {
		return fmt.Errorf("architecture %q is not supported (amd64, arm64)", r.arch())
	}
	if m := elf.Machine(binary.LittleEndian.Uint16(hdr[18:])); m != want {
		return fmt.Errorf("%s is for %s, not %s", r.tree().Display(p), m, want)
	}
	return nil
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q is not a file name", name)
	}
	return nil
}

// libraryQuery is what a library name asks for.
type libraryQuery struct {
	exact string // a soname with its version ("libc.so.6"), or ""
	stem  string // "libc": matches libc.so.N, libc.so (and libc-V.so in maps)
	musl  []string
}

func (q libraryQuery) String() string {
	if q.exact != "" {
		return q.exact
	}
	return q.stem + ".so*"
}

func parseLibraryName(name, arch string) (libraryQuery, error) {
	if err := checkName(name); err != nil {
		return libraryQuery{}, err
	}
	var q libraryQuery
	if i := strings.Index(name, ".so"); i > 0 && (len(name) == i+3 || name[i+3] == '.') {
		q.stem = name[:i]
		if len(name) > i+3 {
			q.exact = name
		}
	} else {
		q.stem = name
		if !strings.HasPrefix(q.stem, "lib") {
			q.stem = "lib" + q.stem
		}
	}
	if q.stem == "libc" && q.exact == "" {
		if m := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]; m != "" {
			q.musl = []string{"libc.musl-" + m + ".so.1", "ld-musl-" + m + ".so.1"}
		}
	}
	return q, nil
}

// rank orders candidate file names: a lower class is better; within a
// class, a higher version.
type rank struct {
	class   int
	sub     int // within a class, lower is better (musl's names in order)
	version []string
}

const (
	rankExact     = iota // the soname asked for
	rankVersioned        // stem.so.VERSION
	rankBare             // stem.so
	rankRealName         // stem-VERSION.so (maps only: old glibc's libc-2.28.so)
	rankMusl             // musl's C library
)

func (a rank) compare(b rank) int {
	if a.class != b.class {
		return a.class - b.class
	}
	if a.sub != b.sub {
		return a.sub - b.sub
	}
	return -compareVersions(a.version, b.version)
}

// rankName says whether a file name matches the query, and how well.
// inMaps allows the real file names behind sonames, which maps show.
func (q libraryQuery) rankName(name string, inMaps bool) (rank, bool) {
	if q.exact != "" {
		if name == q.exact {
			return rank{class: rankExact}, true
		}
		if !inMaps {
			return rank{}, false
		}
	}
	if rest, ok := strings.CutPrefix(name, q.stem); ok {
		switch {
		case rest == ".so" && q.exact == "":
			return rank{class: rankBare}, true
		case strings.HasPrefix(rest, ".so.") && q.exact == "":
			return rank{class: rankVersioned, version: strings.Split(rest[len(".so."):], ".")}, true
		case inMaps && strings.HasPrefix(rest, "-") && strings.HasSuffix(rest, ".so"):
			return rank{class: rankRealName, version: strings.Split(rest[1:len(rest)-len(".so")], ".")}, true
		}
	}
	for i, m := range q.musl {
		if name == m {
			return rank{class: rankMusl, sub: i}, true
		}
	}
	return rank{}, false
}

// compareVersions compares dotted versions element by element, numerically
// where both elements are numbers.
func compareVersions(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, errx := strconv.ParseUint(a[i], 10, 64)
		y, erry := strconv.ParseUint(b[i], 10, 64)
		switch {
		case errx == nil && erry == nil && x != y:
			if x < y {
				return -1
			}
			return 1
		case (errx != nil || erry != nil) && a[i] != b[i]:
			return strings.Compare(a[i], b[i])
		}
	}
	return len(a) - len(b)
}

// LibraryInProcess resolves a library name as process pid sees it: among
// the files it has mapped executable (/proc/PID/maps), the one whose base
// name matches the name as [Resolver.Library] would match it, plus the
// real names maps show behind sonames (libc-2.28.so for "libc" or
// "libc.so.6" on glibc before 2.34). An absolute path is matched against
// the mapped paths. This is what a target on "libc" scoped to one process
// needs inside a container: the path (as the process sees it) and the
// device and inode the process actually runs. Two different files that
// match equally well are an error naming both.
func (f FS) LibraryInProcess(pid int, name string) (Resolved, error) {
	files, err := f.MappedFiles(pid)
	if err != nil {
		return Resolved{}, err
	}
	var q libraryQuery
	abs := strings.Contains(name, "/")
	if abs {
		if !path.IsAbs(name) {
			return Resolved{}, fmt.Errorf("%q: a path must be absolute", name)
		}
		name = path.Clean(name)
	} else if q, err = parseLibraryName(name, runtime.GOARCH); err != nil {
		return Resolved{}, err
	}
	var best []MappedFile
	var bestRank rank
	for _, mf := range files {
		if !mf.Executable {
			continue
		}
		var rk rank
		if abs {
			if mf.Path != name {
				continue
			}
		} else {
			var ok bool
			if rk, ok = q.rankName(path.Base(mf.Path), true); !ok {
				continue
			}
		}
		switch {
		case best == nil || rk.compare(bestRank) < 0:
			best, bestRank = []MappedFile{mf}, rk
		case rk.compare(bestRank) == 0 && !slices.ContainsFunc(best, func(b MappedFile) bool { return b.ID == mf.ID }):
			best = append(best, mf)
		}
	}
	switch {
	case best == nil:
		return Resolved{}, fmt.Errorf("process %d maps no library %q", pid, name)
	case len(best) > 1:
		var paths []string
		for _, b := range best {
			paths = append(paths, fmt.Sprintf("%s (%s)", b.Path, b.ID))
		}
		return Resolved{}, fmt.Errorf("process %d maps several libraries matching %q: %s", pid, name, strings.Join(paths, ", "))
	}
	return Resolved{Path: best[0].Path, Source: SourceProcessMaps, ID: best[0].ID, Deleted: best[0].Deleted}, nil
}
