//go:build !linux

package procfs

import (
	"errors"
	"fmt"
)

// cgroupPathByHandle: only Linux has cgroups and open_by_handle_at.
func cgroupPathByHandle(m CgroupMount, id uint64) (string, error) {
	return "", fmt.Errorf("opening cgroup %d in %s by handle: %w", id, m.Point, errors.ErrUnsupported)
}
