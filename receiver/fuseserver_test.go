//go:build linux && (amd64 || arm64)

package receiver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// FUSE protocol (include/uapi/linux/fuse.h): the opcodes and sizes the
// one-file server below uses.
const (
	fuseLookup      = 1
	fuseForget      = 2
	fuseGetattr     = 3
	fuseOpen        = 14
	fuseRead        = 15
	fuseRelease     = 18
	fuseFlush       = 25
	fuseInit        = 26
	fuseOpendir     = 27
	fuseReaddir     = 28
	fuseReleasedir  = 29
	fuseInterrupt   = 36
	fuseBatchForget = 42
	fuseInHeader    = 40
	fuseFileNode    = 2
)

// oneFileFUSE serves, at its mount point, one file: name, with contents
// data, mode 0755. Once stall is set it answers no GETATTR of the file
// any more (a server that hangs, or a tenant's on purpose): the file's
// attributes from a lookup hold for 20 ms (an exec right after it needs
// no GETATTR), and then every stat of the file waits.
type oneFileFUSE struct {
	name  string
	data  []byte
	stall atomic.Bool
	fd    int
}

// mountOneFileFUSE mounts a oneFileFUSE at dir and serves it until the
// test ends (its cleanup aborts the connection: waiting requests fail).
func mountOneFileFUSE(t *testing.T, dir, name string, data []byte) *oneFileFUSE {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		testutil.SkipOrFail(t, "opening /dev/fuse: %v", err)
	}
	if err := unix.Mount("onefile", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)); err != nil {
		unix.Close(fd)
		testutil.SkipOrFail(t, "mounting FUSE at %s: %v", dir, err)
	}
	s := &oneFileFUSE{name: name, data: data, fd: fd}
	done := make(chan struct{})
	go func() { defer close(done); s.serve() }()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatalf("stat %s: %v", dir, err)
	}
	// A request the server read waits for its answer uninterruptibly:
	// only aborting the connection (fusectl) ends it.
	abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev))
	if _, err := os.Stat(abort); err != nil {
		if err := unix.Mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, ""); err != nil {
			t.Fatalf("mounting fusectl: %v", err)
		}
	}
	t.Cleanup(func() {
		if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
			t.Errorf("aborting the FUSE connection: %v", err)
		}
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		<-done // the server's read ends (ENODEV) once aborted
		unix.Close(fd)
	})
	return s
}

func (s *oneFileFUSE) serve() {
	buf := make([]byte, 1<<20+4096)
	le := binary.LittleEndian
	for {
		n, err := unix.Read(s.fd, buf)
		if err == unix.EINTR || err == unix.EAGAIN || err == unix.ENOENT {
			continue // ENOENT: a request interrupted meanwhile
		}
		if err != nil || n < fuseInHeader {
			return // ENODEV once unmounted and aborted
		}
		req := buf[:n]
		op, unique, node := le.Uint32(req[4:]), le.Uint64(req[8:]), le.Uint64(req[16:])
		in := req[fuseInHeader:]
		switch op {
		case fuseForget, fuseBatchForget, fuseInterrupt:
			continue // no answer
		case fuseInit:
			out := make([]byte, 64)
			le.PutUint32(out[0:], 7)
			le.PutUint32(out[4:], 31)
			le.PutUint32(out[8:], le.Uint32(in[8:])) // max_readahead
			le.PutUint32(out[20:], 128<<10)          // max_write
			le.PutUint32(out[24:], 1)                // time_gran
			s.reply(unique, 0, out)
		case fuseLookup:
			name, _, _ := bytes.Cut(in, []byte{0})
			if string(name) != s.name || node != 1 {
				s.reply(unique, -int32(unix.ENOENT), nil)
				continue
			}
			out := make([]byte, 40, 128)
			le.PutUint64(out[0:], fuseFileNode)
			le.PutUint64(out[16:], 3600)       // entry_valid: the name stays
			le.PutUint32(out[36:], 20_000_000) // attr_valid_nsec: 20 ms
			s.reply(unique, 0, append(out, s.attr(fuseFileNode)...))
		case fuseGetattr:
			if node == fuseFileNode && s.stall.Load() {
				continue // never answered
			}
			s.reply(unique, 0, append(make([]byte, 16), s.attr(node)...))
		case fuseOpen, fuseOpendir:
			s.reply(unique, 0, make([]byte, 16))
		case fuseRead:
			off, size := le.Uint64(in[8:]), uint64(le.Uint32(in[16:]))
			if off > uint64(len(s.data)) {
				off = uint64(len(s.data))
			}
			s.reply(unique, 0, s.data[off:min(off+size, uint64(len(s.data)))])
		case fuseReaddir, fuseRelease, fuseReleasedir, fuseFlush:
			s.reply(unique, 0, nil)
		default:
			s.reply(unique, -int32(unix.ENOSYS), nil)
		}
	}
}

// attr is the fuse_attr of node: the root directory or the file.
func (s *oneFileFUSE) attr(node uint64) []byte {
	le := binary.LittleEndian
	a := make([]byte, 88)
	le.PutUint64(a[0:], node)
	mode := uint32(unix.S_IFDIR | 0o755)
	if node == fuseFileNode {
		mode = unix.S_IFREG | 0o755
		le.PutUint64(a[8:], uint64(len(s.data)))
		le.PutUint64(a[16:], uint64(len(s.data)+511)/512)
	}
	le.PutUint32(a[60:], mode)
	le.PutUint32(a[64:], 1)    // nlink
	le.PutUint32(a[80:], 4096) // blksize
	return a
}

func (s *oneFileFUSE) reply(unique uint64, errno int32, payload []byte) {
	out := make([]byte, 16, 16+len(payload))
	binary.LittleEndian.PutUint32(out[0:], uint32(16+len(payload)))
	binary.LittleEndian.PutUint32(out[4:], uint32(errno))
	binary.LittleEndian.PutUint64(out[8:], unique)
	_, _ = unix.Write(s.fd, append(out, payload...))
}
