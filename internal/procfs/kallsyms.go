package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// maxKallsyms bounds what KernelHas reads of /proc/kallsyms (about 10 MiB
// on a distribution kernel with modules).
const maxKallsyms = 64 << 20

// KernelHas reports which of names are symbols of the running kernel
// (/proc/kallsyms, which lists names without privileges; only addresses
// are hidden). It reads the file once, at most 64 MiB, and stops as soon
// as every name was seen.
func (f FS) KernelHas(names ...string) (map[string]bool, error) {
	file, err := os.Open(filepath.Join(f.root(), "proc", "kallsyms"))
	if err != nil {
		return nil, err
	}
	defer file.Close()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	found := make(map[string]bool, len(names))
	sc := bufio.NewScanner(io.LimitReader(file, maxKallsyms))
	for sc.Scan() && len(found) < len(want) {
		// "ffffffff81000000 T _text" or "... t name\t[module]"
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 3 {
			continue
		}
		if name := string(fields[2]); want[name] {
			found[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		return found, fmt.Errorf("reading /proc/kallsyms: %w", err)
	}
	return found, nil
}
