//go:build linux

package armvm

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// File is one entry of an initramfs: a regular file (from Data, or copied
// from Source on the host), a directory, or a symbolic link.
type File struct {
	// Path is the absolute path inside the initramfs, e.g. "/bin/busybox".
	Path string
	// Mode holds the permission bits and the type (fs.ModeDir,
	// fs.ModeSymlink; none for a regular file).
	Mode fs.FileMode
	// Data is a regular file's content when Source is empty.
	Data []byte
	// Source is the host path of a regular file's content.
	Source string
	// Link is a symbolic link's target.
	Link string
}

// newc mode bits.
const (
	cpioDir     = 0o040000
	cpioRegular = 0o100000
	cpioSymlink = 0o120000
)

// WriteInitramfs writes files as an uncompressed cpio archive in the "newc"
// format the kernel unpacks into its root file system at boot
// (Documentation/driver-api/early-userspace/buffer-format.rst). Parent
// directories are created as needed, before their contents, and entries are
// written in path order. Files are owned by root; their modification time is
// 0, so that the same inputs give the same bytes. The kernel also accepts a
// gzip-compressed archive, but decompressing tens of megabytes in an
// emulated CPU costs seconds, while qemu loads the plain one at no cost.
func WriteInitramfs(w io.Writer, files []File) error {
	entries := map[string]File{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(p) || p == "/" {
			return fmt.Errorf("initramfs entry %q: want an absolute path below /", f.Path)
		}
		if _, dup := entries[p]; dup {
			return fmt.Errorf("initramfs entry %q: listed twice", p)
		}
		f.Path = p
		entries[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if e, ok := entries[d]; ok {
				if !e.Mode.IsDir() {
					return fmt.Errorf("initramfs entry %q: parent %q is not a directory", p, d)
				}
				continue
			}
			entries[d] = File{Path: d, Mode: fs.ModeDir | 0o755}
		}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	// Sorting puts every directory before its contents.
	slices.Sort(paths)

	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &cpioWriter{w: bw}
	for i, p := range paths {
		if err := cw.entry(uint32(i+1), entries[p]); err != nil {
			return err
		}
	}
	if err := cw.header("TRAILER!!!", 0, 0, 0, 1); err != nil {
		return err
	}
	if err := cw.pad(); err != nil {
		return err
	}
	return bw.Flush()
}

type cpioWriter struct {
	w   io.Writer
	off int64
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.off += int64(n)
	return err
}

// pad writes zeros up to the next multiple of 4 bytes.
func (c *cpioWriter) pad() error {
	if r := c.off % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// header writes a newc header and the NUL-terminated name, padded.
func (c *cpioWriter) header(name string, ino, mode uint32, size int64, nlink uint32) error {
	if size > 0xffffffff {
		return fmt.Errorf("initramfs entry %q: %d bytes is too large for cpio", name, size)
	}
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(h)); err != nil {
		return err
	}
	if err := c.write(append([]byte(name), 0)); err != nil {
		return err
	}
	return c.pad()
}

func (c *cpioWriter) entry(ino uint32, f File) error {
	name := strings.TrimPrefix(f.Path, "/")
	perm := uint32(f.Mode.Perm())
	switch {
	case f.Mode.IsDir():
		return c.header(name, ino, cpioDir|perm, 0, 2)
	case f.Mode&fs.ModeSymlink != 0:
		if f.Link == "" {
			return fmt.Errorf("initramfs entry %q: symbolic link without a target", f.Path)
		}
		if err := c.header(name, ino, cpioSymlink|0o777, int64(len(f.Link)), 1); err != nil {
			return err
		}
		if err := c.write([]byte(f.Link)); err != nil {
			return err
		}
		return c.pad()
	case f.Mode.IsRegular():
	default:
		return fmt.Errorf("initramfs entry %q: unsupported file type %v", f.Path, f.Mode.Type())
	}
	if f.Source == "" {
		if err := c.header(name, ino, cpioRegular|perm, int64(len(f.Data)), 1); err != nil {
			return err
		}
		if err := c.write(f.Data); err != nil {
			return err
		}
		return c.pad()
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("initramfs entry %q: %w", f.Path, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("initramfs entry %q: %w", f.Path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("initramfs entry %q: source %s is not a regular file", f.Path, f.Source)
	}
	if err := c.header(name, ino, cpioRegular|perm, st.Size(), 1); err != nil {
		return err
	}
	n, err := io.Copy(writerFunc(c.write), src)
	if err != nil {
		return fmt.Errorf("initramfs entry %q: copying %s: %w", f.Path, f.Source, err)
	}
	if n != st.Size() {
		return fmt.Errorf("initramfs entry %q: %s changed size while being copied", f.Path, f.Source)
	}
	return c.pad()
}

// writerFunc adapts a write function to io.Writer.
type writerFunc func([]byte) error

func (f writerFunc) Write(b []byte) (int, error) {
	if err := f(b); err != nil {
		return 0, err
	}
	return len(b), nil
}
