package procfs

import (
	"errors"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Bounds of one Glob: whatever the tree holds (a container's directory of
// a million entries, thousands of directories each matching a wildcard),
// a glob reads at most GlobMaxNames directory entries in all and keeps at
// most GlobMaxPaths partial paths at each component.
const (
	GlobMaxNames = 1 << 16
	GlobMaxPaths = 1 << 10
)

// ReadDirNames reads the names of the entries of directory name, resolved
// inside the root, at most max of them, and says whether there were more.
// The directory is opened with O_DIRECTORY and without blocking: a FIFO or
// a device found where a directory was expected is refused (ENOTDIR)
// without being opened for reading. The names are in the order the
// directory gives them.
func (d *Dir) ReadDirNames(name string, max int) (names []string, more bool, err error) {
	f, err := d.open(name, os.O_RDONLY|oDirectory|oNonblockNoctty)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	for len(names) < max {
		batch, err := f.Readdirnames(min(1024, max-len(names)))
		names = append(names, batch...)
		if errors.Is(err, io.EOF) {
			return names, false, nil
		}
		if err != nil {
			return names, false, err
		}
	}
	// One more name says whether there is more.
	extra, err := f.Readdirnames(1)
	return names, len(extra) > 0 && err == nil, nil
}

// Glob returns the paths, inside the root, that the absolute pattern
// matches: at most max of them, sorted by component as filepath.Glob
// sorts them, and whether the bounds (max, GlobMaxNames, GlobMaxPaths)
// left matches out. The pattern's syntax is path.Match's, one component at
// a time; only components with a wildcard are read as directories (from
// the root's descriptor, never following a path out of the root), the
// others are joined as written. The paths are names: a caller opens each
// through the Dir, where it is resolved inside the root again (a tree that
// changes meanwhile gives another file of the root, or none). An
// unreadable directory (missing, not a directory, a FIFO, no permission,
// a loop of symbolic links) matches nothing. The error is for a malformed
// pattern only.
func (d *Dir) Glob(pattern string, max int) (matches []string, more bool, err error) {
	if !strings.HasPrefix(pattern, "/") {
		return nil, false, errors.New("glob " + pattern + ": not an absolute path")
	}
	parts := strings.Split(strings.Trim(path.Clean(pattern), "/"), "/")
	for _, p := range parts {
		if _, err := path.Match(p, ""); err != nil {
			return nil, false, err
		}
	}
	budget := GlobMaxNames
	paths := []string{"/"}
	for i, part := range parts {
		last := i == len(parts)-1
		limit := GlobMaxPaths
		if last {
			limit = max
		}
		var next []string
		for _, dir := range paths {
			if len(next) == limit {
				more = true
				break
			}
			if !hasMeta(part) {
				next = append(next, path.Join(dir, part))
				continue
			}
			if budget == 0 {
				more = true
				break
			}
			names, truncated, err := d.ReadDirNames(dir, budget)
			budget -= len(names)
			more = more || truncated
			if err != nil {
				continue
			}
			matched := names[:0]
			for _, n := range names {
				if ok, _ := path.Match(part, n); ok {
					matched = append(matched, n)
				}
			}
			sort.Strings(matched)
			for _, n := range matched {
				if len(next) == limit {
					more = true
					break
				}
				next = append(next, path.Join(dir, n))
			}
		}
		paths = next
		if len(paths) == 0 {
			break
		}
	}
	return paths, more, nil
}

// hasMeta says whether a pattern component has a wildcard of path.Match.
func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }
