//go:build linux

package procfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/ci"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const x8664 = FlagELFLibc6 | FlagX8664Lib64

// newCache writes libs in the format of glibc 2.32 and later. strBase is
// added to every string offset (for the old format's strings, which share
// the table).
func newCache(libs []LDCacheEntry) (data []byte, strOffsets [][2]uint32) {
	var strs bytes.Buffer
	base := uint32(newHeaderSize + len(libs)*newEntrySize)
	add := func(s string) uint32 {
		off := base + uint32(strs.Len())
		strs.WriteString(s)
		strs.WriteByte(0)
		return off
	}
	hdr := make([]byte, newHeaderSize)
	copy(hdr, newCacheMagic)
	binary.LittleEndian.PutUint32(hdr[20:], uint32(len(libs)))
	hdr[28] = 2 // little endian
	var entries []byte
	for _, l := range libs {
		e := make([]byte, newEntrySize)
		k, v := add(l.Name), add(l.Path)
		strOffsets = append(strOffsets, [2]uint32{k, v})
		binary.LittleEndian.PutUint32(e, uint32(l.Flags))
		binary.LittleEndian.PutUint32(e[4:], k)
		binary.LittleEndian.PutUint32(e[8:], v)
		binary.LittleEndian.PutUint64(e[16:], l.HWCap)
		entries = append(entries, e...)
	}
	binary.LittleEndian.PutUint32(hdr[24:], uint32(strs.Len()))
	return append(append(hdr, entries...), strs.Bytes()...), strOffsets
}

// oldCache writes libs in the old format, with the new format appended as
// ldconfig before glibc 2.32 did when withNew is set.
func oldCache(libs []LDCacheEntry, withNew bool) []byte {
	hdr := make([]byte, oldHeaderSize)
	copy(hdr, oldCacheMagic)
	binary.LittleEndian.PutUint32(hdr[12:], uint32(len(libs)))
	entriesEnd := oldHeaderSize + len(libs)*oldEntrySize
	var tail []byte
	offsets := make([][2]uint32, len(libs))
	if withNew {
		pad := (entriesEnd+7)&^7 - entriesEnd
		block, strOffsets := newCache(libs)
		for i, o := range strOffsets {
			// Old offsets count from the end of the old entries.
			offsets[i] = [2]uint32{o[0] + uint32(pad), o[1] + uint32(pad)}
		}
		tail = append(make([]byte, pad), block...)
	} else {
		var strs bytes.Buffer
		for i, l := range libs {
			offsets[i][0] = uint32(strs.Len())
			strs.WriteString(l.Name + "\x00")
			offsets[i][1] = uint32(strs.Len())
			strs.WriteString(l.Path + "\x00")
		}
		tail = strs.Bytes()
	}
	out := hdr
	for i, l := range libs {
		e := make([]byte, oldEntrySize)
		binary.LittleEndian.PutUint32(e, uint32(l.Flags))
		binary.LittleEndian.PutUint32(e[4:], offsets[i][0])
		binary.LittleEndian.PutUint32(e[8:], offsets[i][1])
		out = append(out, e...)
	}
	return append(out, tail...)
}

var sampleLibs = []LDCacheEntry{
	{Name: "libz.so.1", Path: "/lib/x86_64-linux-gnu/libz.so.1", Flags: x8664},
	{Name: "libc.so.6", Path: "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libc.so.6", Flags: x8664, HWCap: 1<<62 | 2},
	{Name: "libc.so.6", Path: "/lib/x86_64-linux-gnu/libc.so.6", Flags: x8664},
	{Name: "libc.so.6", Path: "/lib/i386-linux-gnu/libc.so.6", Flags: FlagELFLibc6},
}

func TestParseLDCacheFormats(t *testing.T) {
	withoutHWCap := make([]LDCacheEntry, len(sampleLibs))
	for i, l := range sampleLibs {
		l.HWCap = 0
		withoutHWCap[i] = l
	}
	newOnly, _ := newCache(sampleLibs)
	tests := []struct {
		name string
		data []byte
		want []LDCacheEntry
	}{
		{"new format (glibc 2.32+)", newOnly, sampleLibs},
		{"old format with the new appended (glibc 2.2 to 2.31)", oldCache(sampleLibs, true), sampleLibs},
		{"old format alone (libc5, glibc 2.0/2.1)", oldCache(sampleLibs, false), withoutHWCap},
		{"empty new format", func() []byte { b, _ := newCache(nil); return b }(), []LDCacheEntry{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLDCache(tt.data)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseLDCacheErrors(t *testing.T) {
	good, _ := newCache(sampleLibs)
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"no magic", []byte("hello"), `ld.so.cache: unknown format (no "ld.so-1.7.0" or "glibc-ld.so.cache1.1" magic)`},
		{"header cut short", good[:40], "ld.so.cache: header cut short"},
		{"too many entries", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[20:], 1<<30); return b }), "ld.so.cache: 1073741824 entries do not fit in"},
		{"big endian", mutate(func(b []byte) []byte { b[28] = 3; return b }), "big-endian cache"},
		{"invalid byte order", mutate(func(b []byte) []byte { b[28] = 1; return b }), "byte order marked invalid (1)"},
		{"string outside", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[newHeaderSize+4:], 1<<20); return b }), "ld.so.cache entry 0 name: string offset 1048576 outside"},
		{"string without NUL", mutate(func(b []byte) []byte { return b[:len(b)-1] }), "has no NUL"},
		{"old header cut short", []byte(oldCacheMagic + "\x00\x01"), "old-format header cut short"},
		{"old entries do not fit", append([]byte(oldCacheMagic+"\x00"), 0xff, 0xff, 0, 0), "65535 old-format entries do not fit"},
		{"too big", append([]byte(newCacheMagic), make([]byte, MaxLDCache)...), "more than 16777216"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseLDCache(tt.data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestParseLDCacheHost parses this machine's /etc/ld.so.cache and checks
// every entry against what ldconfig -p lists.
func TestParseLDCacheHost(t *testing.T) {
	data, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		ci.SkipOrFail(t, "no /etc/ld.so.cache: %v", err)
	}
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		ldconfig = "/sbin/ldconfig"
	}
	out, err := exec.Command(ldconfig, "-p").Output()
	if err != nil {
		ci.SkipOrFail(t, "ldconfig -p: %v", err)
	}
	entries, err := ParseLDCache(data)
	require.NoError(t, err)

	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Contains(t, lines[0], " libs found in cache")
	lines = lines[1:]
	// glibc 2.33 and later end the listing with the cache's generator.
	if n := len(lines); n > 0 && strings.HasPrefix(lines[n-1], "Cache generated by:") {
		lines = lines[:n-1]
	}
	var want, got []string
	for _, line := range lines {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " (")
		require.True(t, ok, line)
		desc, path, ok := strings.Cut(rest, ") => ")
		require.True(t, ok, line)
		// ldconfig describes the flags: "libc6,x86-64" is
		// FlagELFLibc6|FlagX8664Lib64; hwcap variants say "hwcap:".
		want = append(want, fmt.Sprintf("%s %s x86-64=%t hwcap=%t", name, path,
			strings.HasPrefix(desc, "libc6,x86-64"), strings.Contains(desc, "hwcap:")))
	}
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s %s x86-64=%t hwcap=%t", e.Name, e.Path, e.Flags == x8664, e.HWCap != 0))
	}
	require.Equal(t, want, got)
	assert.Greater(t, len(got), 10)
}

func FuzzParseLDCache(f *testing.F) {
	newOnly, _ := newCache(sampleLibs)
	f.Add(newOnly)
	f.Add(oldCache(sampleLibs, true))
	f.Add(oldCache(sampleLibs, false))
	if host, err := os.ReadFile("/etc/ld.so.cache"); err == nil && len(host) < 64<<10 {
		f.Add(host)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseLDCache(data)
		if err != nil {
			return
		}
		if len(entries) > len(data)/oldEntrySize {
			t.Fatalf("%d entries from %d bytes", len(entries), len(data))
		}
		for _, e := range entries {
			if len(e.Name) > maxCacheString || len(e.Path) > maxCacheString ||
				strings.IndexByte(e.Name, 0) >= 0 || strings.IndexByte(e.Path, 0) >= 0 {
				t.Fatalf("bad strings in %+v", e)
			}
		}
	})
}
