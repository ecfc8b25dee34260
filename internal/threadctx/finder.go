package threadctx

import (
	"errors"
	"fmt"
	"os"

	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// Bounds of looking at one process.
const (
	// MaxFilesPerProcess bounds the mapped files read per process.
	MaxFilesPerProcess = 1024
	// maxCachedModules bounds the files whose Module a Finder remembers.
	maxCachedModules = 4096
)

// Finder finds the variable in processes of the live system (or of a
// test tree), remembering what each file said by its version (identity,
// size, modification time), so that a library mapped by many processes is
// read once. It is for one goroutine at a time.
type Finder struct {
	// FS is the /proc the processes are listed in.
	FS procfs.FS
	// Memory returns a reader of a process's memory; nil reads the live
	// process (procfs.ProcessMemory).
	Memory func(pid int) Memory
	// PageSize is the size of the pages the processes' mappings are made
	// of; 0 means the collector's.
	PageSize uint64

	modules map[procfs.FileVersion]*Module
}

// Result is what Find found in one process.
type Result struct {
	// Access is how its threads reach the variable (Found).
	Access Access
	// Found says a module defines the variable and Access holds.
	Found bool
	// Files counts the mapped ELF files read or remembered.
	Files int
	// Context is the process's OTEP 4719 process context (Find's
	// withContext), nil when it has none.
	Context *ProcessContext
}

// mappedFile is one file a process maps, with where it maps it.
type mappedFile struct {
	path  string
	id    procfs.FileID
	spans [][2]uint64 // start address and file offset of each mapping
}

// Find looks for the variable in every ELF file process pid maps (opened
// inside its root directory by the path the process sees, and refused
// when that path now names another file) and resolves how its threads
// reach it (Resolve). With withContext it also reads the process's OTEP
// 4719 context. A process with no module defining the variable is a
// Result with Found unset; ErrNotReady says to look again later.
func (f *Finder) Find(pid int, withContext bool) (Result, error) {
	var res Result
	maps, err := f.FS.Maps(pid)
	if err != nil {
		return res, fmt.Errorf("reading the mappings of process %d: %w", pid, err)
	}
	mem := f.memory(pid)
	var files []*mappedFile
	byID := map[procfs.FileID]*mappedFile{}
	var contextAt uint64
	for _, m := range maps {
		if withContext && contextAt == 0 && IsProcessContext(m.Path) {
			contextAt = m.Start
		}
		if !m.IsFile() || m.Deleted {
			continue
		}
		mf := byID[m.ID()]
		if mf == nil {
			if len(files) >= MaxFilesPerProcess {
				continue
			}
			mf = &mappedFile{path: m.Path, id: m.ID()}
			byID[m.ID()] = mf
			files = append(files, mf)
		}
		if len(mf.spans) < 64 {
			mf.spans = append(mf.spans, [2]uint64{m.Start, m.FileOffset})
		}
	}
	if contextAt != 0 {
		res.Context = readContext(mem, contextAt)
	}
	exe, _ := f.FS.ExecutableID(pid)
	dir, err := f.FS.OpenProcessRoot(pid)
	if err != nil {
		return res, fmt.Errorf("opening the root of process %d: %w", pid, err)
	}
	defer dir.Close()
	var loaded []Loaded
	for _, mf := range files {
		m := f.module(dir, mf)
		if m == nil {
			continue
		}
		res.Files++
		if !m.Relevant() {
			continue
		}
		for _, s := range mf.spans {
			if bias, ok := LoadBias(m, s[0], s[1], f.pageSize()); ok {
				loaded = append(loaded, Loaded{Module: m, Path: mf.path, Bias: bias, Main: mf.id == exe})
				break
			}
		}
	}
	res.Access, err = Resolve(loaded, mem)
	if errors.Is(err, ErrNoVariable) {
		return res, nil
	}
	res.Found = err == nil
	return res, err
}

// ProcessContext reads process pid's OTEP 4719 process context; nil when
// it has none (or none that reads).
func (f *Finder) ProcessContext(pid int) (*ProcessContext, error) {
	maps, err := f.FS.Maps(pid)
	if err != nil {
		return nil, fmt.Errorf("reading the mappings of process %d: %w", pid, err)
	}
	for _, m := range maps {
		if IsProcessContext(m.Path) {
			return readContext(f.memory(pid), m.Start), nil
		}
	}
	return nil, nil
}

// readContext reads the process context at addr, nil when it does not
// read.
func readContext(mem Memory, addr uint64) *ProcessContext {
	pc, err := ReadProcessContext(mem, addr)
	if err != nil {
		return nil
	}
	return &pc
}

// module returns what a mapped file says, read once per version; nil for
// a file that cannot be opened as the one mapped or is no ELF file this
// package reads.
func (f *Finder) module(dir *procfs.Dir, mf *mappedFile) *Module {
	fh, _, err := dir.OpenRegular(mf.path)
	if err != nil {
		return nil
	}
	defer fh.Close()
	v, err := procfs.VersionOf(fh)
	if err != nil || v.FileID != mf.id {
		return nil // the path names another file now
	}
	if m, ok := f.modules[v]; ok {
		return m
	}
	m, err := ReadModule(fh)
	if err != nil && !errors.Is(err, ErrNotELF) {
		m = nil // unreadable: not remembered, read again next time
	} else {
		if err != nil {
			m = nil
		}
		if f.modules == nil || len(f.modules) >= maxCachedModules {
			f.modules = map[procfs.FileVersion]*Module{}
		}
		f.modules[v] = m
	}
	return m
}

func (f *Finder) memory(pid int) Memory {
	if f.Memory != nil {
		return f.Memory(pid)
	}
	return procfs.ProcessMemory{PID: pid}
}

func (f *Finder) pageSize() uint64 {
	if f.PageSize != 0 {
		return f.PageSize
	}
	return uint64(os.Getpagesize())
}
