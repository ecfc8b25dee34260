package procfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The two formats of /etc/ld.so.cache (glibc's sysdeps/generic/dl-cache.h).
// glibc 2.32 and later write only the new one; older ldconfig wrote the old
// one with the new one appended, aligned to 8 bytes, after its entries.
const (
	oldCacheMagic = "ld.so-1.7.0"          // 11 bytes, then nlibs at offset 12
	newCacheMagic = "glibc-ld.so.cache1.1" // 20 bytes
	oldHeaderSize = 16                     // magic (11, padded to 12) + nlibs
	oldEntrySize  = 12                     // flags int32, key, value uint32
	newHeaderSize = 48                     // magic+version, nlibs, len_strings, flags, pad, extension_offset, unused[3]
	newEntrySize  = 24                     // flags, key, value, osversion uint32; hwcap uint64
)

// Flags of an ld.so.cache entry (dl-cache.h): the low byte is the library
// type, the next the ABI it needs.
const (
	FlagTypeMask     = 0x00ff
	FlagELF          = 0x0001
	FlagELFLibc6     = 0x0003
	FlagRequiredMask = 0xff00
	FlagX8664Lib64   = 0x0300
	FlagAArch64Lib64 = 0x0a00
)

// MaxLDCache bounds the size of an ld.so.cache file read (Debian's, with
// some 500 libraries, is 34 KB; a distribution with 20,000 has ~2 MB).
const MaxLDCache = 16 << 20

// maxCacheString bounds one name or path in the cache.
const maxCacheString = 4096

// LDCacheEntry is one library of /etc/ld.so.cache.
type LDCacheEntry struct {
	// Name is the library's soname, e.g. "libc.so.6".
	Name string
	// Path is where the dynamic loader finds it, e.g.
	// "/lib/x86_64-linux-gnu/libc.so.6", in the file system the cache
	// belongs to.
	Path string
	// Flags are the entry's type and ABI (FlagELFLibc6|FlagX8664Lib64 for
	// an x86-64 glibc library).
	Flags int32
	// HWCap is non-zero for a variant the loader picks only on some CPUs
	// (a glibc-hwcaps subdirectory such as x86-64-v3, or a legacy hwcap
	// directory); 0 for the baseline library. The old format has none.
	HWCap uint64
}

// ParseLDCache parses the contents of an ld.so.cache file, in either format,
// and returns its entries in file order (ldconfig sorts them by name, most
// recent version first). When the old format carries the new one after it,
// the new one is read (it has the hwcap information).
func ParseLDCache(data []byte) ([]LDCacheEntry, error) {
	if len(data) > MaxLDCache {
		return nil, fmt.Errorf("ld.so.cache: %d bytes, more than %d", len(data), MaxLDCache)
	}
	switch {
	case bytes.HasPrefix(data, []byte(newCacheMagic)):
		return parseNewCache(data)
	case bytes.HasPrefix(data, []byte(oldCacheMagic)):
		if len(data) < oldHeaderSize {
			return nil, fmt.Errorf("ld.so.cache: old-format header cut short")
		}
		n := uint64(binary.LittleEndian.Uint32(data[12:]))
		end := oldHeaderSize + n*oldEntrySize
		if end > uint64(len(data)) {
			return nil, fmt.Errorf("ld.so.cache: %d old-format entries do not fit in %d bytes", n, len(data))
		}
		if next := (end + 7) &^ 7; next < uint64(len(data)) && bytes.HasPrefix(data[next:], []byte(newCacheMagic)) {
			return parseNewCache(data[next:])
		}
		return parseOldCache(data[oldHeaderSize:end], data[end:], int(n))
	default:
		return nil, fmt.Errorf("ld.so.cache: unknown format (no %q or %q magic)", oldCacheMagic, newCacheMagic)
	}
}

// parseOldCache reads the old format's entries; their strings are indexed
// from the end of the entries.
func parseOldCache(entries, strs []byte, n int) ([]LDCacheEntry, error) {
	out := make([]LDCacheEntry, 0, n)
	for i := 0; i < n; i++ {
		e := entries[i*oldEntrySize:]
		name, err := cacheString(strs, binary.LittleEndian.Uint32(e[4:]))
		if err != nil {
			return nil, fmt.Errorf("ld.so.cache entry %d name: %w", i, err)
		}
		path, err := cacheString(strs, binary.LittleEndian.Uint32(e[8:]))
		if err != nil {
			return nil, fmt.Errorf("ld.so.cache entry %d path: %w", i, err)
		}
		out = append(out, LDCacheEntry{Name: name, Path: path, Flags: int32(binary.LittleEndian.Uint32(e))})
	}
	return out, nil
}

// parseNewCache reads the new format, whose strings are indexed from the
// start of its header.
func parseNewCache(data []byte) ([]LDCacheEntry, error) {
	if len(data) < newHeaderSize {
		return nil, fmt.Errorf("ld.so.cache: header cut short")
	}
	// Byte 28 says the byte order of the file (glibc 2.33): 0 unset (older
	// ldconfig, the host's), 1 invalid, 2 little endian, 3 big endian. The
	// receiver runs on little-endian hosts (x86-64, aarch64).
	switch data[28] {
	case 0, 2:
	case 3:
		return nil, fmt.Errorf("ld.so.cache: big-endian cache; only little-endian hosts are supported")
	default:
		return nil, fmt.Errorf("ld.so.cache: byte order marked invalid (%d)", data[28])
	}
	n := uint64(binary.LittleEndian.Uint32(data[20:]))
	if newHeaderSize+n*newEntrySize > uint64(len(data)) {
		return nil, fmt.Errorf("ld.so.cache: %d entries do not fit in %d bytes", n, len(data))
	}
	out := make([]LDCacheEntry, 0, n)
	for i := uint64(0); i < n; i++ {
		e := data[newHeaderSize+i*newEntrySize:]
		name, err := cacheString(data, binary.LittleEndian.Uint32(e[4:]))
		if err != nil {
			return nil, fmt.Errorf("ld.so.cache entry %d name: %w", i, err)
		}
		path, err := cacheString(data, binary.LittleEndian.Uint32(e[8:]))
		if err != nil {
			return nil, fmt.Errorf("ld.so.cache entry %d path: %w", i, err)
		}
		out = append(out, LDCacheEntry{
			Name:  name,
			Path:  path,
			Flags: int32(binary.LittleEndian.Uint32(e)),
			HWCap: binary.LittleEndian.Uint64(e[16:]),
		})
	}
	return out, nil
}

// cacheString returns the NUL-terminated string at offset off of strs.
func cacheString(strs []byte, off uint32) (string, error) {
	if uint64(off) >= uint64(len(strs)) {
		return "", fmt.Errorf("string offset %d outside the %d-byte table", off, len(strs))
	}
	s := strs[off:]
	if len(s) > maxCacheString+1 {
		s = s[:maxCacheString+1]
	}
	end := bytes.IndexByte(s, 0)
	if end < 0 {
		return "", fmt.Errorf("string at offset %d has no NUL within %d bytes", off, maxCacheString)
	}
	return string(s[:end]), nil
}

// cacheFlagsMatch says whether the dynamic loader of arch (a GOARCH) would
// use an entry with these flags, as glibc's _dl_cache_check_flags does:
// on x86-64 an x86-64 libc6 library or an untyped ELF one; on aarch64 an
// aarch64 libc6 library only.
func cacheFlagsMatch(flags int32, arch string) bool {
	switch arch {
	case "amd64":
		return flags == FlagELFLibc6|FlagX8664Lib64 || flags == FlagELF
	case "arm64":
		return flags == FlagELFLibc6|FlagAArch64Lib64
	}
	return false
}
