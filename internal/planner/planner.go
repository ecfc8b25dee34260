// Package planner turns the configured targets into a plan (package plan):
// the deterministic spec of every probe, span definition, attach site and compiled fetch, read
// from the traced ELF files (their own class, byte order and machine, never
// the host's) and the configuration. It opens files but never touches the
// kernel: internal/tracer turns a Plan into kernel objects.
//
// A target that uses $names, line: probes or function patterns has its
// debuginfo opened (package debuginfo) once, from the very file read, and
// closed when its plan is made; other targets never look for it. Names are
// compiled per location into the same fetches register expressions give;
// line: probes are placed on the line table's statement starts with the
// checks of uprobe:SYMBOL+0xOFF; a function pattern becomes one span
// definition per matched function. Inspect reads a file the same way for
// the probe browser (cmd/uprobe-list).
package planner

import (
	"errors"
	"fmt"

	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// Planner holds a plan it made (Resolve) and what it needs to extend it:
// the targets' definitions, read again for each file a target gains while
// the receiver runs (ReadFile; the plan's Append adds the result). Only
// the plan's owner may use it, but ReadFile may run beside the plan's users.
type Planner struct {
	*plan.Plan
	// Refused says which files Resolve found and did not read, and why
	// (another build than the target's build_id).
	Refused []error
	// Unplanned are the files Resolve found and left out because they
	// could not be read or planned, while the target's other files are
	// traced (or the target is optional): see Resolve.
	Unplanned []Unplanned

	opts Options
	defs []*targetDef // per target, what ReadFile needs
}

// ErrReplaced says a file of a plan is no longer the file at its path: a
// package upgrade replaced it after it was read. The plan is right for the
// file it read, which is what the tracer would attach, but processes
// started from the path run the new one: resolve the targets again.
var ErrReplaced = errors.New("replaced at its path after it was read")

// Replaced returns an error wrapping ErrReplaced that names the files of
// the plan, among those of the collector's own view (not found through a
// process's root), whose path leads to another file now; nil when none
// does. It only looks at the paths (stat): nothing is opened by them.
func (pl *Planner) Replaced() error {
	host, err := procfs.Root("").OpenDir()
	if err != nil {
		return nil
	}
	defer host.Close()
	var errs []error
	for _, f := range pl.Files {
		if f.ThroughRoot {
			continue
		}
		_, id, err := host.Stat(f.SeenAs)
		if err == nil && id != f.ID.FileID {
			errs = append(errs, fmt.Errorf("%s: %w (read: inode %d; now: inode %d)", f.Path, ErrReplaced, f.ID.Ino, id.Ino))
		}
	}
	return errors.Join(errs...)
}
