package usdt

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"

	"github.com/otel-uprobe/uprobereceiver/internal/elfaddr"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// ErrUnsupportedArch is wrapped by Location.ArgsErr when the file is neither
// x86-64 nor arm64: argument specs are parsed for those two only.
var ErrUnsupportedArch = errors.New("argument specs of this architecture are not supported")

// Probe is every site of one provider:name probe.
type Probe struct {
	// Provider and Name name the probe: provider:name.
	Provider, Name string
	// Locations are the probe's sites, in note order.
	Locations []Location
}

// String returns "provider:name".
func (p Probe) String() string { return p.Provider + ":" + p.Name }

// Location is one call site of a probe.
type Location struct {
	// Address is the virtual address of the site.
	Address uint64
	// FileOffset is the file offset of the site, where a uprobe attaches.
	FileOffset uint64
	// SemaphoreAddress is the virtual address of the semaphore, 0 if none.
	SemaphoreAddress uint64
	// SemaphoreFileOffset is the file offset of the semaphore (the
	// uprobe's reference-counter offset), 0 if none.
	SemaphoreFileOffset uint64
	// ArgsText is the argument specs as written in the note.
	ArgsText string
	// Args is ArgsText parsed; nil when ArgsErr != nil.
	Args []Arg
	// ArgsErr says why ArgsText did not parse (an unsupported form, or a
	// file that is neither x86-64 nor arm64, see ErrUnsupportedArch); the
	// site is still listed.
	ArgsErr error
}

// DefaultMaxSites is the default bound of ProbesWithin: the distinct
// sites of all probes of one file.
const DefaultMaxSites = 10000

// ErrTooManySites says a file has more distinct USDT sites than the bound
// (the receiver's max_sites_per_file).
var ErrTooManySites = errors.New("too many USDT sites")

// Probes is ProbesWithin(f, DefaultMaxSites).
func Probes(f *elf.File) ([]Probe, error) { return ProbesWithin(f, DefaultMaxSites) }

// ProbesWithin groups Notes(f) by provider and name, sorted by provider
// then name, with each probe's sites in note order, and converts every
// site's and semaphore's virtual address into a file offset through f's
// PT_LOAD segments. Copies of one note (the same probe at the same
// address) are one site: a probe attached twice at one address fires
// twice per hit. Two notes of one probe at one address that disagree on
// the semaphore or the arguments are an error: one of them does not
// describe the code. Argument specs are parsed in the syntax of f.Machine
// (ParseArgsFor): EM_X86_64 or EM_AARCH64; for other machines each
// Location.ArgsErr wraps ErrUnsupportedArch. It returns an error for
// structural problems: a malformed note, a virtual address outside every
// PT_LOAD segment, more than maxSites distinct sites (0 means
// DefaultMaxSites; the error wraps ErrTooManySites). It returns nil, nil
// when f has no .note.stapsdt section.
func ProbesWithin(f *elf.File, maxSites int) ([]Probe, error) {
	if maxSites <= 0 {
		maxSites = DefaultMaxSites
	}
	arch, archErr := regs.ArchOf(f.Machine)
	type key struct{ provider, name string }
	type site struct {
		key  key
		addr uint64
	}
	index := map[key]int{}
	seen := map[site]*Note{}
	var probes []Probe
	sites := 0
	err := eachNote(f, func(n Note) error {
		k := key{n.Provider, n.Name}
		if first, ok := seen[site{k, n.Address}]; ok {
			if first.SemaphoreAddress != n.SemaphoreAddress || first.Args != n.Args {
				return fmt.Errorf("probe %s:%s has two notes at %#x that disagree (semaphore %#x and %#x, arguments %q and %q): the file's notes do not describe its code",
					n.Provider, n.Name, n.Address, first.SemaphoreAddress, n.SemaphoreAddress, first.Args, n.Args)
			}
			return nil // a copy of a note: one site
		}
		if sites++; sites > maxSites {
			return fmt.Errorf("more than %d distinct USDT sites in the file (max_sites_per_file): %w", maxSites, ErrTooManySites)
		}
		seen[site{k, n.Address}] = &n
		loc := Location{
			Address:          n.Address,
			SemaphoreAddress: n.SemaphoreAddress,
			ArgsText:         n.Args,
		}
		var err error
		if loc.FileOffset, err = elfaddr.FileOffset(f.Progs, n.Address); err != nil {
			return fmt.Errorf("locate site of %s:%s: %w", n.Provider, n.Name, err)
		}
		if n.SemaphoreAddress != 0 {
			if loc.SemaphoreFileOffset, err = elfaddr.FileOffset(f.Progs, n.SemaphoreAddress); err != nil {
				return fmt.Errorf("locate semaphore of %s:%s: %w", n.Provider, n.Name, err)
			}
		}
		if archErr == nil {
			loc.Args, loc.ArgsErr = ParseArgsFor(arch, n.Args)
		} else {
			loc.ArgsErr = fmt.Errorf("parse arguments %q: %w: %v", n.Args, ErrUnsupportedArch, f.Machine)
		}
		i, ok := index[k]
		if !ok {
			i = len(probes)
			index[k] = i
			probes = append(probes, Probe{Provider: n.Provider, Name: n.Name})
		}
		probes[i].Locations = append(probes[i].Locations, loc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(probes) == 0 {
		return nil, nil
	}
	slices.SortFunc(probes, func(a, b Probe) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Name, b.Name))
	})
	return probes, nil
}
