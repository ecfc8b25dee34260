//go:build linux

package procfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMapsLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Mapping
	}{
		{
			name: "executable text of a library",
			line: "7f3c9a428000-7f3c9a57d000 r-xp 00026000 fe:00 263418                     /usr/lib/x86_64-linux-gnu/libc.so.6",
			want: Mapping{Start: 0x7f3c9a428000, End: 0x7f3c9a57d000, Perms: "r-xp", FileOffset: 0x26000, Dev: Mkdev(0xfe, 0), Inode: 263418, Path: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		},
		{
			name: "overlay file of a container",
			line: "5636d1456000-5636d1458000 r--p 00000000 00:26 9978043                    /usr/bin/sleep",
			want: Mapping{Start: 0x5636d1456000, End: 0x5636d1458000, Perms: "r--p", Dev: Mkdev(0, 0x26), Inode: 9978043, Path: "/usr/bin/sleep"},
		},
		{
			name: "replaced by a package upgrade",
			line: "7f0000000000-7f0000001000 r-xp 00001000 08:01 1234                       /usr/lib/libssl.so.3 (deleted)",
			want: Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Perms: "r-xp", FileOffset: 0x1000, Dev: Mkdev(8, 1), Inode: 1234, Path: "/usr/lib/libssl.so.3", Deleted: true},
		},
		{
			name: "path with spaces",
			line: "00400000-00401000 r-xp 00000000 103:02 42 /opt/My App/bin/my app",
			want: Mapping{Start: 0x400000, End: 0x401000, Perms: "r-xp", Dev: Mkdev(0x103, 2), Inode: 42, Path: "/opt/My App/bin/my app"},
		},
		{
			name: "memfd",
			line: "7f1000000000-7f1000200000 rw-s 00000000 00:01 5121                       /memfd:jit-code (deleted)",
			want: Mapping{Start: 0x7f1000000000, End: 0x7f1000200000, Perms: "rw-s", Dev: Mkdev(0, 1), Inode: 5121, Path: "/memfd:jit-code", Deleted: true},
		},
		{
			name: "heap",
			line: "55d4c8e2b000-55d4c8e4c000 rw-p 00000000 00:00 0                          [heap]",
			want: Mapping{Start: 0x55d4c8e2b000, End: 0x55d4c8e4c000, Perms: "rw-p", Path: "[heap]"},
		},
		{
			name: "anonymous without padding",
			line: "7f3c9a5d9000-7f3c9a5e6000 rw-p 00000000 00:00 0",
			want: Mapping{Start: 0x7f3c9a5d9000, End: 0x7f3c9a5e6000, Perms: "rw-p"},
		},
		{
			name: "anonymous with padding",
			line: "7f3c9a5d9000-7f3c9a5e6000 rw-p 00000000 00:00 0 ",
			want: Mapping{Start: 0x7f3c9a5d9000, End: 0x7f3c9a5e6000, Perms: "rw-p"},
		},
		{
			name: "vsyscall",
			line: "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
			want: Mapping{Start: 0xffffffffff600000, End: 0xffffffffff601000, Perms: "--xp", Path: "[vsyscall]"},
		},
		{
			name: "large device numbers",
			line: "1000-2000 r--p 00000000 fff:fffff 1 /x",
			want: Mapping{Start: 0x1000, End: 0x2000, Perms: "r--p", Dev: Mkdev(0xfff, 0xfffff), Inode: 1, Path: "/x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMapsLine(tt.line)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseMapsLineErrors(t *testing.T) {
	tests := []struct{ line, want string }{
		{"", "no address range"},
		{"zz-10 r-xp 0 00:00 0", `maps start address "zz"`},
		{"10 r-xp 0 00:00 0", "no '-'"},
		{"20-10 r-xp 0 00:00 0", "ends before it starts"},
		{"10-20 r-x 0 00:00 0", "want 4 characters"},
		{"10-20 r-xp 0 0000 0", "want MAJOR:MINOR"},
		{"10-20 r-xp 0 00:00 x /a", `maps inode "x"`},
		{"10-20 r-xp 0 00:00", "no device"},
		{"10-20 r-xp g 00:00 0", `maps file offset "g"`},
	}
	for _, tt := range tests {
		_, err := ParseMapsLine(tt.line)
		require.Error(t, err, "line %q", tt.line)
		assert.Contains(t, err.Error(), tt.want, "line %q", tt.line)
	}
}

// lines is a reader of n copies of line.
type lines struct {
	line string
	n    int
	buf  string
}

func (l *lines) Read(p []byte) (int, error) {
	if l.buf == "" {
		if l.n == 0 {
			return 0, io.EOF
		}
		l.n--
		l.buf = l.line
	}
	n := copy(p, l.buf)
	l.buf = l.buf[n:]
	return n, nil
}

func TestParseMapsBounds(t *testing.T) {
	line := "1000-2000 r-xp 00000000 fe:00 1 /bin/x\n"
	n := 0
	require.NoError(t, ParseMaps(&lines{line: line, n: MaxMappings}, func(Mapping) error { n++; return nil }))
	assert.Equal(t, MaxMappings, n)

	err := ParseMaps(&lines{line: line, n: MaxMappings + 1}, func(Mapping) error { return nil })
	require.EqualError(t, err, fmt.Sprintf("more than %d mappings", MaxMappings))

	long := "1000-2000 r-xp 00000000 fe:00 1 /" + strings.Repeat("a", MaxMapsLine) + "\n"
	err = ParseMaps(strings.NewReader(line+long), func(Mapping) error { return nil })
	require.EqualError(t, err, fmt.Sprintf("line 2: longer than %d bytes", MaxMapsLine))

	err = ParseMaps(strings.NewReader(line+"garbage\n"), func(Mapping) error { return nil })
	require.ErrorContains(t, err, "line 2: maps line")
}

func TestMappedFilesFake(t *testing.T) {
	tr := newTree(t)
	tr.file("proc/42/maps", strings.Join([]string{
		"55a000000000-55a000001000 r--p 00000000 fe:00 10                         /usr/bin/app",
		"55a000001000-55a000005000 r-xp 00001000 fe:00 10                         /usr/bin/app",
		"55a000005000-55a000006000 rw-p 00005000 fe:00 10                         /usr/bin/app",
		"55a000006000-55a000027000 rw-p 00000000 00:00 0                          [heap]",
		"7f0000000000-7f0000028000 r--p 00000000 fe:00 20                         /usr/lib/x86_64-linux-gnu/libc.so.6",
		"7f0000028000-7f000017d000 r-xp 00028000 fe:00 20                         /usr/lib/x86_64-linux-gnu/libc.so.6",
		"7f0000200000-7f0000201000 r--s 00000000 fe:00 30                         /usr/share/data.bin",
		"7f0000300000-7f0000301000 r-xp 00000000 00:26 20                         /usr/lib/x86_64-linux-gnu/libc.so.6 (deleted)",
		"7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]",
	}, "\n")+"\n", 0o444)
	fs := FS{Root: tr.dir}
	all, err := fs.Maps(42)
	require.NoError(t, err)
	assert.Len(t, all, 9)

	files, err := fs.MappedFiles(42)
	require.NoError(t, err)
	assert.Equal(t, []MappedFile{
		{Path: "/usr/bin/app", ID: FileID{Mkdev(0xfe, 0), 10}, Executable: true, FileOffsets: []uint64{0, 0x1000, 0x5000}},
		{Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", ID: FileID{Mkdev(0xfe, 0), 20}, Executable: true, FileOffsets: []uint64{0, 0x28000}},
		{Path: "/usr/share/data.bin", ID: FileID{Mkdev(0xfe, 0), 30}, FileOffsets: []uint64{0}},
		{Path: "/usr/lib/x86_64-linux-gnu/libc.so.6", ID: FileID{Mkdev(0, 0x26), 20}, Deleted: true, Executable: true, FileOffsets: []uint64{0}},
	}, files)

	_, err = fs.Maps(43)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestDevEncoding(t *testing.T) {
	for _, d := range [][2]uint32{{0, 0}, {8, 1}, {0xfe, 0}, {259, 2}, {0xfff, 0xfffff}, {0xfffff, 0xfffff}, {1 << 20, 1 << 25}} {
		dev := Mkdev(d[0], d[1])
		assert.Equal(t, d[0], DevMajor(dev), "major of %v", d)
		assert.Equal(t, d[1], DevMinor(dev), "minor of %v", d)
	}
	// st_dev of a file on device 254:0 (0xfe00) as stat(2) reports it.
	assert.Equal(t, uint64(65024), Mkdev(0xfe, 0))
}

// TestMapsSelf reads this test process's maps: its executable is mapped
// with the device and inode stat(2) reports.
func TestMapsSelf(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)
	fi, err := os.Stat(exe)
	require.NoError(t, err)

	files, err := FS{}.MappedFiles(os.Getpid())
	require.NoError(t, err)
	var found *MappedFile
	for i := range files {
		if files[i].Path == exe {
			found = &files[i]
		}
	}
	require.NotNil(t, found, "%s not in own maps: %+v", exe, files)
	assert.Equal(t, IDOf(fi), found.ID)
	assert.True(t, found.Executable)
	assert.False(t, found.Deleted)
}

func FuzzParseMapsLine(f *testing.F) {
	for _, s := range []string{
		"7f3c9a428000-7f3c9a57d000 r-xp 00026000 fe:00 263418                     /usr/lib/x86_64-linux-gnu/libc.so.6",
		"7f0000000000-7f0000001000 r-xp 00001000 08:01 1234 /usr/lib/libssl.so.3 (deleted)",
		"7f3c9a5d9000-7f3c9a5e6000 rw-p 00000000 00:00 0",
		"55d4c8e2b000-55d4c8e4c000 rw-p 00000000 00:00 0                          [heap]",
		"00400000-00401000 r-xp 00000000 103:02 42 /opt/My App/bin/my app",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, err := ParseMapsLine(line)
		if err != nil {
			return
		}
		if m.End < m.Start || len(m.Perms) != 4 {
			t.Fatalf("%q parsed to an impossible mapping %+v", line, m)
		}
		// Printing it back as the kernel does parses to the same mapping.
		p := m.Path
		if m.Deleted {
			p += deletedSuffix
		}
		again := fmt.Sprintf("%x-%x %s %08x %02x:%02x %d %s", m.Start, m.End, m.Perms, m.FileOffset, DevMajor(m.Dev), DevMinor(m.Dev), m.Inode, p)
		m2, err := ParseMapsLine(again)
		if err != nil {
			t.Fatalf("%q parsed to %+v, printed as %q, which fails: %v", line, m, again, err)
		}
		if m2 != m {
			t.Fatalf("%q parsed to %+v, printed as %q, parsed to %+v", line, m, again, m2)
		}
	})
}
