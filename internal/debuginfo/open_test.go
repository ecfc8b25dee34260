package debuginfo

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// split is a fixture stripped of its DWARF with the DWARF in a file of
// its own.
type split struct {
	dir      string
	stripped string // the program, with a .gnu_debuglink to prog.debug
	debug    string // the separate debug file (not yet placed anywhere)
	buildID  string
}

// splitFixture splits a copy of a C fixture: objcopy --only-keep-debug,
// strip --strip-debug, objcopy --add-gnu-debuglink.
func splitFixture(t *testing.T, name string) split {
	t.Helper()
	requireTool(t, "objcopy")
	requireTool(t, "strip")
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog.full")
	b, err := os.ReadFile(fixture(t, name))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	s := split{dir: dir, stripped: filepath.Join(dir, "prog"), debug: filepath.Join(dir, "keep", "prog.debug")}
	require.NoError(t, os.MkdirAll(filepath.Dir(s.debug), 0o755))
	run(t, dir, nil, "objcopy", "--only-keep-debug", bin, s.debug)
	run(t, dir, nil, "strip", "--strip-debug", "-o", s.stripped, bin)
	// --add-gnu-debuglink reads the debug file for its CRC; the link
	// holds only its base name.
	run(t, filepath.Dir(s.debug), nil, "objcopy", "--add-gnu-debuglink=prog.debug", s.stripped)
	ef, err := elf.Open(s.stripped)
	require.NoError(t, err)
	defer ef.Close()
	require.False(t, hasDWARF(ef), "strip --strip-debug left DWARF")
	id, err := BuildID(ef)
	require.NoError(t, err)
	require.NotEmpty(t, id)
	s.buildID = hex.EncodeToString(id)
	return s
}

// place copies the split debug file to path.
func (s split) place(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(s.debug)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// checkUsable checks that a File opened from split debuginfo resolves a
// path the same way the embedded DWARF does.
func checkUsable(t *testing.T, f *File) {
	t.Helper()
	fn, err := f.Function("handle_request")
	require.NoError(t, err)
	s, err := f.Scope(fn, 0, SiteEntry)
	require.NoError(t, err)
	p, err := fetch.ParsePath("$req->hdr->name")
	require.NoError(t, err)
	a, err := s.Compile(p)
	require.NoError(t, err)
	assert.Equal(t, "+4(+16(%rdi))&:string[17]", a.String())
}

func TestOpenEmbedded(t *testing.T) {
	f := open(t, fixture(t, "c-O2"))
	assert.Equal(t, SourceEmbedded, f.Source)
	assert.Equal(t, f.Path, f.DebugPath)
	assert.Len(t, f.BuildID, 40, "gcc's default build id is a SHA-1")
	assert.Equal(t, elf.ET_DYN, f.Type, "Debian's gcc builds PIE by default")
	checkUsable(t, f)
}

func TestOpenBuildIDTree(t *testing.T) {
	s := splitFixture(t, "c-O2")
	root := t.TempDir()
	s.place(t, filepath.Join(root, ".build-id", s.buildID[:2], s.buildID[2:]+".debug"))
	// The debuglink target is absent, so only the build-id tree can serve.
	f, err := Open(context.Background(), s.stripped, Options{DebugDirs: []string{t.TempDir(), root}})
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, SourceBuildID, f.Source)
	assert.Equal(t, filepath.Join(root, ".build-id", s.buildID[:2], s.buildID[2:]+".debug"), f.DebugPath)
	assert.Equal(t, s.buildID, f.BuildID)
	checkUsable(t, f)
}

func TestOpenDebuglink(t *testing.T) {
	for _, where := range []string{"same dir", ".debug dir", "debug root"} {
		t.Run(where, func(t *testing.T) {
			s := splitFixture(t, "c-O2")
			root := t.TempDir()
			var want string
			switch where {
			case "same dir":
				want = filepath.Join(s.dir, "prog.debug")
			case ".debug dir":
				want = filepath.Join(s.dir, ".debug", "prog.debug")
			case "debug root":
				want = filepath.Join(root, s.dir, "prog.debug")
			}
			s.place(t, want)
			f, err := Open(context.Background(), s.stripped, Options{DebugDirs: []string{root}})
			require.NoError(t, err)
			defer f.Close()
			assert.Equal(t, SourceDebuglink, f.Source)
			assert.Equal(t, want, f.DebugPath)
			checkUsable(t, f)
		})
	}
}

func TestOpenDebuglinkCRCMismatch(t *testing.T) {
	s := splitFixture(t, "c-O2")
	s.place(t, filepath.Join(s.dir, "prog.debug"))
	// Append a byte: the file still parses, but its CRC32 differs.
	fh, err := os.OpenFile(filepath.Join(s.dir, "prog.debug"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fh.Write([]byte{0})
	require.NoError(t, err)
	require.NoError(t, fh.Close())
	_, err = Open(context.Background(), s.stripped, Options{DebugDirs: []string{}})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrCRCMismatch)
	assert.ErrorIs(t, err, ErrNoDebugInfo)
	assert.Contains(t, err.Error(), filepath.Join(s.dir, "prog.debug"))
}

func TestOpenBuildIDMismatch(t *testing.T) {
	s := splitFixture(t, "c-O2")
	other := splitFixture(t, "c-O0")
	root := t.TempDir()
	// The O0 build's debug file under the O2 build's id.
	other.place(t, filepath.Join(root, ".build-id", s.buildID[:2], s.buildID[2:]+".debug"))
	_, err := Open(context.Background(), s.stripped, Options{DebugDirs: []string{root}})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrBuildIDMismatch)
	assert.Contains(t, err.Error(), other.buildID)
}

func TestOpenNoDebugInfo(t *testing.T) {
	s := splitFixture(t, "c-O2")
	root := t.TempDir()
	_, err := Open(context.Background(), s.stripped, Options{DebugDirs: []string{root}})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoDebugInfo)
	msg := err.Error()
	for _, p := range []string{
		filepath.Join(root, ".build-id", s.buildID[:2], s.buildID[2:]+".debug"),
		filepath.Join(s.dir, "prog.debug"),
		filepath.Join(s.dir, ".debug", "prog.debug"),
		filepath.Join(root, s.dir, "prog.debug"),
	} {
		assert.Contains(t, msg, p, "the error lists where Open looked")
	}
}

func TestOpenGoStripped(t *testing.T) {
	_, err := Open(context.Background(), fixture(t, "go-stripped"), Options{DebugDirs: []string{}})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoDebugInfo)
	assert.Contains(t, err.Error(), "-ldflags=-w")
}

func TestOpenCompressed(t *testing.T) {
	requireTool(t, "objcopy")
	for _, mode := range []string{"zlib", "zstd", "zlib-gnu"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "prog")
			run(t, dir, nil, "objcopy", "--compress-debug-sections="+mode, fixture(t, "c-O2"), out)
			ef, err := elf.Open(out)
			require.NoError(t, err)
			defer ef.Close()
			switch mode {
			case "zlib-gnu":
				require.NotNil(t, ef.Section(".zdebug_info"), "legacy .zdebug_ sections")
				require.Nil(t, ef.Section(".debug_info"))
			default:
				s := ef.Section(".debug_info")
				require.NotNil(t, s)
				require.NotZero(t, s.Flags&elf.SHF_COMPRESSED, "SHF_COMPRESSED")
				want := map[string]elf.CompressionType{"zlib": elf.COMPRESS_ZLIB, "zstd": elf.COMPRESS_ZSTD}[mode]
				// The Chdr's first word is the compression type; read it
				// from the file (the Section reads decompressed data).
				raw := make([]byte, 4)
				fh, err := os.Open(out)
				require.NoError(t, err)
				_, err = fh.ReadAt(raw, int64(s.Offset))
				fh.Close()
				require.NoError(t, err)
				require.Equal(t, want, elf.CompressionType(ef.ByteOrder.Uint32(raw)))
			}
			// The decompressed size is checked before decompressing.
			_, err = Open(context.Background(), out, Options{DebugDirs: []string{}, MaxBytes: 1000})
			assert.ErrorContains(t, err, "over the 1000-byte budget of one file's debuginfo (max_debuginfo_bytes)")
			assert.ErrorIs(t, err, ErrOverBudget)

			f := open(t, out)
			checkUsable(t, f)
			// Location lists and CFI come from compressed sections too.
			assert.NotEmpty(t, f.sections.loclists)
			fn, err := f.Function("sum_text")
			require.NoError(t, err)
			line := markerLine(t, "prog.c", "total")
			sites, err := f.Lines("prog.c", line)
			require.NoError(t, err)
			require.NotEmpty(t, sites)
			assert.Equal(t, fn, sites[0].Function)
		})
	}
}

func TestDebuginfod(t *testing.T) {
	s := splitFixture(t, "c-O2")
	debug, err := os.ReadFile(s.debug)
	require.NoError(t, err)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/buildid/"+s.buildID+"/debuginfo" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(debug)
	}))
	defer srv.Close()
	cache := t.TempDir()
	d := &Debuginfod{URLs: []string{srv.URL + "/nothing-here", srv.URL}, CacheDir: cache}
	opts := Options{DebugDirs: []string{}, Debuginfod: d}

	f, err := Open(context.Background(), s.stripped, opts)
	require.NoError(t, err)
	assert.Equal(t, SourceDebuginfod, f.Source)
	assert.Equal(t, filepath.Join(cache, s.buildID+".debug"), f.DebugPath)
	checkUsable(t, f)
	require.NoError(t, f.Close())
	assert.Equal(t, int32(2), hits.Load(), "the first server has nothing, the second serves the file")

	// Served from the cache: no more requests.
	f, err = Open(context.Background(), s.stripped, opts)
	require.NoError(t, err)
	assert.Equal(t, SourceDebuginfod, f.Source)
	require.NoError(t, f.Close())
	assert.Equal(t, int32(2), hits.Load())

	// No temporary files are left behind.
	ents, err := os.ReadDir(cache)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.Equal(t, s.buildID+".debug", ents[0].Name())
}

func TestDebuginfodRejects(t *testing.T) {
	s := splitFixture(t, "c-O2")
	other := splitFixture(t, "c-O0")
	wrong, err := os.ReadFile(other.debug)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(wrong)
	}))
	defer srv.Close()
	cache := t.TempDir()

	t.Run("build id mismatch", func(t *testing.T) {
		d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: cache, NegativeTTL: -1}
		_, err := d.Fetch(context.Background(), s.buildID)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrBuildIDMismatch)
	})
	t.Run("size limit", func(t *testing.T) {
		d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: cache, MaxFileBytes: 1024}
		_, err := d.Fetch(context.Background(), s.buildID)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "1024-byte limit")
	})
	t.Run("not hex", func(t *testing.T) {
		d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: cache}
		_, err := d.Fetch(context.Background(), "../../etc/passwd")
		require.Error(t, err)
	})
	ents, err := os.ReadDir(cache)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{s.buildID + ".fail"}, names, "rejected downloads leave only the memory of their failure")
}

func TestDebuginfodEviction(t *testing.T) {
	cache := t.TempDir()
	d := &Debuginfod{CacheDir: cache, MaxCacheBytes: 250}
	for i, name := range []string{"aa.debug", "bb.debug", "cc.debug"} {
		p := filepath.Join(cache, name)
		require.NoError(t, os.WriteFile(p, make([]byte, 100), 0o644))
		// Oldest first.
		mt := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
		require.NoError(t, os.Chtimes(p, mt, mt))
	}
	require.NoError(t, d.evict(filepath.Join(cache, "cc.debug")))
	ents, err := os.ReadDir(cache)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"bb.debug", "cc.debug"}, names, "the least recently used goes first")
}

func TestNewDebuginfodFromEnv(t *testing.T) {
	t.Setenv("DEBUGINFOD_URLS", "")
	d, err := NewDebuginfodFromEnv()
	require.NoError(t, err)
	assert.Nil(t, d)

	t.Setenv("DEBUGINFOD_URLS", "https://a.example/ http://b.example")
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	t.Setenv("DEBUGINFOD_TIMEOUT", "7")
	d, err = NewDebuginfodFromEnv()
	require.NoError(t, err)
	assert.Equal(t, []string{"https://a.example/", "http://b.example"}, d.URLs)
	assert.Equal(t, "/tmp/xdg/otel-uprobe/debuginfod", d.CacheDir)
	assert.Equal(t, 7*time.Second, d.Timeout)

	t.Setenv("DEBUGINFOD_URLS", "ftp://x")
	_, err = NewDebuginfodFromEnv()
	assert.Error(t, err)
}

func TestParseDebuglink(t *testing.T) {
	b := append([]byte("prog.debug\x00\x00"), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[12:], 0xdeadbeef)
	name, crc, err := parseDebuglink(b, binary.LittleEndian)
	require.NoError(t, err)
	assert.Equal(t, "prog.debug", name)
	assert.Equal(t, uint32(0xdeadbeef), crc)

	for _, bad := range [][]byte{nil, {0}, []byte("x"), []byte("prog.debug\x00"), []byte("../x\x00\x00\x00\x00\x00\x00\x00\x00")} {
		_, _, err := parseDebuglink(bad, binary.LittleEndian)
		assert.ErrorIs(t, err, ErrMalformed, "%q", bad)
	}
	// The CRC is the one of the real debug file.
	s := splitFixture(t, "c-O2")
	ef, err := elf.Open(s.stripped)
	require.NoError(t, err)
	defer ef.Close()
	name, crc, ok, err := Debuglink(ef)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "prog.debug", name)
	dbg, err := os.ReadFile(s.debug)
	require.NoError(t, err)
	assert.Equal(t, crc32.ChecksumIEEE(dbg), crc)
}

func FuzzParseDebuglink(f *testing.F) {
	f.Add([]byte("prog.debug\x00\x00\xef\xbe\xad\xde"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, _, err := parseDebuglink(b, binary.LittleEndian)
		if err == nil && (name == "" || strings.Contains(name, "/")) {
			t.Fatalf("accepted name %q", name)
		}
	})
}

func FuzzFindNote(f *testing.F) {
	note := []byte{4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 1, 2, 3, 4}
	f.Add(note)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := findNote(b, binary.LittleEndian, "GNU", 3); d != nil && len(d) > len(b) {
			t.Fatal("descriptor longer than the input")
		}
	})
}

// TestDebuginfodConcurrent fetches one build id from many goroutines: it
// is downloaded once and every caller gets the cached file.
func TestDebuginfodConcurrent(t *testing.T) {
	s := splitFixture(t, "c-O2")
	debug, err := os.ReadFile(s.debug)
	require.NoError(t, err)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write(debug)
	}))
	defer srv.Close()
	d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: t.TempDir()}
	const n = 8
	paths := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			p, err := d.Fetch(context.Background(), s.buildID)
			paths <- p
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
		assert.Equal(t, filepath.Join(d.CacheDir, s.buildID+".debug"), <-paths)
	}
	assert.Equal(t, int32(1), hits.Load())
	assert.Empty(t, d.inflight, "no build id left in flight")
}
