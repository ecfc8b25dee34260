package armvm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteInitramfs(t *testing.T) {
	src := filepath.Join(t.TempDir(), "payload")
	payload := bytes.Repeat([]byte("arm64!"), 1000)
	require.NoError(t, os.WriteFile(src, payload, 0o600))

	var buf bytes.Buffer
	require.NoError(t, WriteInitramfs(&buf, []File{
		{Path: "/init", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Path: "/bin/busybox", Mode: 0o755, Source: src},
		{Path: "/bin/sh", Mode: fs.ModeSymlink | 0o777, Link: "busybox"},
		{Path: "/tmp", Mode: fs.ModeDir | 0o1777},
		{Path: "/tests/deep/x.test", Mode: 0o700, Data: []byte{1, 2, 3}},
		{Path: "/empty", Mode: 0o644},
	}))
	require.Zero(t, buf.Len()%4, "entries are padded to 4 bytes")
	got, err := readInitramfs(buf.Bytes())
	require.NoError(t, err)

	var paths []string
	byPath := map[string]File{}
	for _, f := range got {
		paths = append(paths, f.Path)
		byPath[f.Path] = f
	}
	// Parents first, in path order.
	assert.Equal(t, []string{"/bin", "/bin/busybox", "/bin/sh", "/empty", "/init", "/tests", "/tests/deep", "/tests/deep/x.test", "/tmp"}, paths)
	assert.Equal(t, payload, byPath["/bin/busybox"].Data)
	assert.Equal(t, fs.FileMode(0o755), byPath["/bin/busybox"].Mode)
	assert.Equal(t, "busybox", byPath["/bin/sh"].Link)
	assert.True(t, byPath["/bin/sh"].Mode&fs.ModeSymlink != 0)
	assert.Equal(t, fs.ModeDir|0o755, byPath["/tests/deep"].Mode, "created parents")
	assert.Equal(t, fs.ModeDir|0o777, byPath["/tmp"].Mode&^fs.ModeSticky, "sticky bit aside")
	assert.Equal(t, []byte("#!/bin/sh\n"), byPath["/init"].Data)
	assert.Equal(t, fs.FileMode(0o700), byPath["/tests/deep/x.test"].Mode)
	assert.Empty(t, byPath["/empty"].Data)

	// The same inputs give the same bytes.
	var again bytes.Buffer
	require.NoError(t, WriteInitramfs(&again, []File{
		{Path: "/tests/deep/x.test", Mode: 0o700, Data: []byte{1, 2, 3}},
		{Path: "/empty", Mode: 0o644},
		{Path: "/init", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Path: "/bin/sh", Mode: fs.ModeSymlink | 0o777, Link: "busybox"},
		{Path: "/tmp", Mode: fs.ModeDir | 0o1777},
		{Path: "/bin/busybox", Mode: 0o755, Source: src},
	}))
	assert.Equal(t, buf.Bytes(), again.Bytes())
}

func TestWriteInitramfsErrors(t *testing.T) {
	for _, tt := range []struct {
		files []File
		want  string
	}{
		{[]File{{Path: "relative", Mode: 0o644}}, `initramfs entry "relative": want an absolute path below /`},
		{[]File{{Path: "/", Mode: fs.ModeDir}}, `want an absolute path below /`},
		{[]File{{Path: "/a", Mode: 0o644}, {Path: "/a/", Mode: 0o644}}, `initramfs entry "/a": listed twice`},
		{[]File{{Path: "/a", Mode: 0o644}, {Path: "/a/b", Mode: 0o644}}, `initramfs entry "/a/b": parent "/a" is not a directory`},
		{[]File{{Path: "/l", Mode: fs.ModeSymlink}}, `symbolic link without a target`},
		{[]File{{Path: "/p", Mode: fs.ModeNamedPipe}}, `unsupported file type`},
		{[]File{{Path: "/s", Mode: 0o644, Source: "/nonexistent/file"}}, `initramfs entry "/s": open /nonexistent/file`},
		{[]File{{Path: "/d", Mode: 0o644, Source: os.TempDir()}}, `is not a regular file`},
	} {
		err := WriteInitramfs(&bytes.Buffer{}, tt.files)
		require.Error(t, err, fmt.Sprint(tt.files))
		assert.Contains(t, err.Error(), tt.want)
	}
}

// errNotCPIO is returned by readInitramfs for bytes that are not a newc
// archive.
var errNotCPIO = errors.New("not a newc cpio archive")

// readInitramfs parses a newc archive written by WriteInitramfs back into
// its entries (without the trailer), for tests: paths, types, permissions,
// contents and link targets.
func readInitramfs(b []byte) ([]File, error) {
	var out []File
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if len(b)-off < 110 || string(b[off:off+6]) != "070701" {
			return nil, fmt.Errorf("offset %d: %w", off, errNotCPIO)
		}
		var fields [13]uint32
		for i := range fields {
			var v uint32
			if _, err := fmt.Sscanf(string(b[off+6+8*i:off+14+8*i]), "%08x", &v); err != nil {
				return nil, fmt.Errorf("offset %d: field %d: %w", off, i, err)
			}
			fields[i] = v
		}
		mode, size, namesize := fields[1], int(fields[6]), int(fields[11])
		nameEnd := off + 110 + namesize
		if namesize < 1 || nameEnd > len(b) || b[nameEnd-1] != 0 {
			return nil, fmt.Errorf("offset %d: bad name: %w", off, errNotCPIO)
		}
		name := string(b[off+110 : nameEnd-1])
		data := align(nameEnd)
		if data+size > len(b) {
			return nil, fmt.Errorf("offset %d: %q runs past the end: %w", off, name, errNotCPIO)
		}
		if name == "TRAILER!!!" {
			return out, nil
		}
		f := File{Path: "/" + name, Mode: fs.FileMode(mode & 0o777)}
		switch mode &^ 0o7777 {
		case cpioDir:
			f.Mode |= fs.ModeDir
		case cpioSymlink:
			f.Mode |= fs.ModeSymlink
			f.Link = string(b[data : data+size])
		case cpioRegular:
			f.Data = b[data : data+size]
		default:
			return nil, fmt.Errorf("offset %d: %q: mode %o: %w", off, name, mode, errNotCPIO)
		}
		out = append(out, f)
		off = align(data + size)
	}
}
