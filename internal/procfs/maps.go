package procfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Bounds of reading /proc/PID/maps.
const (
	// MaxMappings bounds the lines read from one maps file: Linux's
	// vm.max_map_count is 65530 by default and 262144 where Elasticsearch
	// asks for it.
	MaxMappings = 1 << 18
	// MaxMapsLine bounds one line: a path of PATH_MAX (4096) bytes, the
	// " (deleted)" mark and the fixed fields.
	MaxMapsLine = 8192
	// MaxMapsBytes bounds the bytes read from one maps file, and so what
	// is kept of it: a process's mappings are its own to choose, and
	// 60,000 mappings of files with 4,000-byte paths (hard links of one
	// file, made in seconds) are 243 MB of text, which took 2.9 s and 254
	// MB of the collector's heap at every look. 65,530 mappings (Linux's
	// default vm.max_map_count) with 300-byte paths fit.
	MaxMapsBytes = 32 << 20
)

// errMapsTooLong says a maps file is longer than MaxMapsBytes.
var errMapsTooLong = fmt.Errorf("longer than %d bytes", MaxMapsBytes)

// boundedReader reads at most limit bytes of r, and then fails with err.
type boundedReader struct {
	r     io.Reader
	limit int64
	err   error
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.limit <= 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.limit {
		p = p[:b.limit]
	}
	n, err := b.r.Read(p)
	b.limit -= int64(n)
	return n, err
}

// deletedSuffix is what the kernel appends to the path of a mapped file that
// was removed or replaced (by rename, as package upgrades do) since.
const deletedSuffix = " (deleted)"

// Mapping is one line of /proc/PID/maps: a range of the process's virtual
// addresses and what is mapped there.
type Mapping struct {
	// Start and End are the virtual addresses of the range [Start, End).
	Start, End uint64
	// Perms are the permissions as the kernel prints them: "r-xp" is
	// readable, not writable, executable and private ("s" for shared).
	Perms string
	// FileOffset is the file offset mapped at Start (0 for anonymous
	// memory).
	FileOffset uint64
	// Dev is the device of the mapped file as st_dev encodes it ([Mkdev]);
	// 0 for anonymous memory.
	Dev uint64
	// Inode is the inode number of the mapped file; 0 for anonymous memory.
	Inode uint64
	// Path is the mapped file's path as the process sees it (in its mount
	// namespace), without the " (deleted)" mark; a pseudo-name such as
	// "[heap]", "[stack]" or "[vdso]"; or empty for anonymous memory. A
	// newline in a file name is printed by the kernel as "\012" and kept so.
	Path string
	// Deleted says the kernel marked the path " (deleted)": the file was
	// removed or replaced since it was mapped, and Path now names another
	// file or none.
	Deleted bool
}

// IsFile says whether the mapping is backed by a file (an inode and an
// absolute path), rather than anonymous memory or a pseudo-name.
func (m Mapping) IsFile() bool { return m.Inode != 0 && strings.HasPrefix(m.Path, "/") }

// Executable says whether the mapping may be executed.
func (m Mapping) Executable() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// ID returns the identity of the mapped file.
func (m Mapping) ID() FileID { return FileID{Dev: m.Dev, Ino: m.Inode} }

// ParseMapsLine parses one line of /proc/PID/maps (without its newline).
func ParseMapsLine(line string) (Mapping, error) {
	var m Mapping
	field := func(what string) (string, error) {
		i := strings.IndexByte(line, ' ')
		if i <= 0 {
			return "", fmt.Errorf("maps line %q: no %s", truncate(line), what)
		}
		f := line[:i]
		line = line[i+1:]
		return f, nil
	}
	addrs, err := field("address range")
	if err != nil {
		return m, err
	}
	start, end, ok := strings.Cut(addrs, "-")
	if !ok {
		return m, fmt.Errorf("maps address range %q: no '-'", truncate(addrs))
	}
	if m.Start, err = strconv.ParseUint(start, 16, 64); err != nil {
		return m, fmt.Errorf("maps start address %q: %w", truncate(start), err)
	}
	if m.End, err = strconv.ParseUint(end, 16, 64); err != nil {
		return m, fmt.Errorf("maps end address %q: %w", truncate(end), err)
	}
	if m.End < m.Start {
		return m, fmt.Errorf("maps address range %q ends before it starts", addrs)
	}
	if m.Perms, err = field("permissions"); err != nil {
		return m, err
	}
	if len(m.Perms) != 4 {
		return m, fmt.Errorf("maps permissions %q: want 4 characters", truncate(m.Perms))
	}
	off, err := field("file offset")
	if err != nil {
		return m, err
	}
	if m.FileOffset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return m, fmt.Errorf("maps file offset %q: %w", truncate(off), err)
	}
	dev, err := field("device")
	if err != nil {
		return m, err
	}
	major, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return m, fmt.Errorf("maps device %q: want MAJOR:MINOR", truncate(dev))
	}
	ma, err := strconv.ParseUint(major, 16, 32)
	if err != nil {
		return m, fmt.Errorf("maps device major %q: %w", truncate(major), err)
	}
	mi, err := strconv.ParseUint(minor, 16, 32)
	if err != nil {
		return m, fmt.Errorf("maps device minor %q: %w", truncate(minor), err)
	}
	m.Dev = Mkdev(uint32(ma), uint32(mi))
	// The inode is the last fixed field: an anonymous mapping's line may
	// end right after it, with or without padding.
	ino := line
	if i := strings.IndexByte(line, ' '); i >= 0 {
		ino, line = line[:i], line[i+1:]
	} else {
		line = ""
	}
	if m.Inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return m, fmt.Errorf("maps inode %q: %w", truncate(ino), err)
	}
	m.Path = strings.TrimLeft(line, " ")
	if strings.HasPrefix(m.Path, "/") {
		if p, ok := strings.CutSuffix(m.Path, deletedSuffix); ok {
			m.Path, m.Deleted = p, true
		}
	}
	return m, nil
}

// ParseMaps parses a /proc/PID/maps file and calls fn for each mapping, in
// address order; an error from fn ends the parse and is returned. It reads
// at most MaxMappings lines of at most MaxMapsLine bytes.
func ParseMaps(r io.Reader, fn func(Mapping) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxMapsLine)
	n := 0
	for sc.Scan() {
		n++
		if n > MaxMappings {
			return fmt.Errorf("more than %d mappings", MaxMappings)
		}
		m, err := ParseMapsLine(sc.Text())
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes", n+1, MaxMapsLine)
		}
		return err
	}
	return nil
}

// Maps returns every mapping of process pid (file-backed or not).
func (f FS) Maps(pid int) ([]Mapping, error) {
	var out []Mapping
	err := f.walkMaps(pid, func(m Mapping) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

// MappedFile is one file mapped by a process, however many mappings it has.
type MappedFile struct {
	// Path is the file's path as the process sees it.
	Path string
	// ID is the file's device and inode as the kernel reports them in the
	// maps file (on overlayfs, the overlay's: the same as stat(2) through
	// /proc/PID/root).
	ID FileID
	// Deleted says the file was removed or replaced since it was mapped.
	Deleted bool
	// Executable says at least one of its mappings may be executed.
	Executable bool
	// FileOffsets lists the file offsets of its mappings, in address order.
	FileOffsets []uint64
}

// MappedFiles returns the distinct files process pid maps, in the order of
// their first mapping.
func (f FS) MappedFiles(pid int) ([]MappedFile, error) {
	type key struct {
		id   FileID
		path string
	}
	index := map[key]int{}
	var out []MappedFile
	err := f.walkMaps(pid, func(m Mapping) error {
		if !m.IsFile() {
			return nil
		}
		k := key{m.ID(), m.Path}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, MappedFile{Path: m.Path, ID: m.ID(), Deleted: m.Deleted})
		}
		out[i].Executable = out[i].Executable || m.Executable()
		if len(out[i].FileOffsets) < maxOffsetsPerFile {
			out[i].FileOffsets = append(out[i].FileOffsets, m.FileOffset)
		}
		return nil
	})
	return out, err
}

// maxOffsetsPerFile bounds MappedFile.FileOffsets (an ELF file usually has
// four or five mappings).
const maxOffsetsPerFile = 64

func (f FS) walkMaps(pid int, fn func(Mapping) error) error {
	p := f.pidPath(pid, "maps")
	file, err := os.Open(p)
	if err != nil {
		return err
	}
	defer file.Close()
	if err := ParseMaps(&boundedReader{r: file, limit: MaxMapsBytes, err: errMapsTooLong}, fn); err != nil {
		return fmt.Errorf("reading %s: %w", p, err)
	}
	return nil
}

// truncate shortens text quoted in error messages.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
