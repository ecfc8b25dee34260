package procfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// cgroupPathByHandle opens the cgroup directory whose kernfs id is id by
// its file handle (open_by_handle_at) and reads its path.
func cgroupPathByHandle(m CgroupMount, id uint64) (string, error) {
	mount, err := unix.Open(m.dir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening cgroup mount %s: %w", m.dir(), err)
	}
	defer unix.Close(mount)
	var h [8]byte
	binary.NativeEndian.PutUint64(h[:], id)
	fd, err := unix.OpenByHandleAt(mount, unix.NewFileHandle(fileIDKernfs, h[:]), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("cgroup %d in %s: %w", id, m.Point, fs.ErrNotExist)
		}
		return "", fmt.Errorf("opening cgroup %d in %s: %w", id, m.Point, err)
	}
	defer unix.Close(fd)
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("reading the path of cgroup %d in %s: %w", id, m.Point, err)
	}
	return relativeCgroup(m, p)
}
