package debuginfo

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
)

// LineSite is one place a source line starts: the first is_stmt
// instruction of the line in one block of one function (inlined or
// duplicated code gives one site per copy).
type LineSite struct {
	// Address is the instruction's virtual address.
	Address uint64
	// File is the line table's path of the file.
	File string
	Line int
	// Function is the out-of-line function holding Address.
	Function *Function
	// Inlined lists the inlined calls Address is in, outermost first.
	Inlined []string
}

// ParseLineSpec splits "FILE:LINE" (the last colon separates them).
func ParseLineSpec(spec string) (string, int, error) {
	i := strings.LastIndexByte(spec, ':')
	if i <= 0 || i == len(spec)-1 {
		return "", 0, fmt.Errorf("line %q: want FILE:LINE", spec)
	}
	n, err := strconv.Atoi(spec[i+1:])
	if err != nil || n <= 0 {
		return "", 0, fmt.Errorf("line %q: %q is not a line number", spec, spec[i+1:])
	}
	return spec[:i], n, nil
}

// pathSuffix reports whether file names p or ends it at a "/" boundary:
// "prog.c" and "debuginfo/prog.c" match "/src/testdata/debuginfo/prog.c";
// an absolute file must be p itself.
func pathSuffix(p, file string) bool {
	file = path.Clean(file)
	if p == file || path.Clean(p) == file {
		return true
	}
	if strings.HasPrefix(file, "/") {
		return false
	}
	return strings.HasSuffix(p, "/"+file)
}

// maxLineSites bounds the sites of one line.
const maxLineSites = 4096

// Lines returns where line LINE of FILE starts: for every compile unit
// whose line table names a file FILE is a path suffix of, the lowest
// is_stmt address of that line in each block (lexical block, inlined call
// or function) that holds such an address, as gdb places a breakpoint.
// The error wraps ErrNotFound and names the nearest lines with code when
// the line has none.
func (f *File) Lines(file string, line int) ([]LineSite, error) {
	idx, err := f.index()
	if err != nil {
		return nil, err
	}
	var (
		addrs    = map[uint64]string{}
		matched  []string
		codeLine = map[int]bool{}
		// Units that share a line program are read once: a file whose
		// units all name one long program must not cost units × its length.
		programs = map[int64]bool{}
	)
	for _, cu := range idx.cus {
		if cu.stmtList >= 0 {
			if programs[cu.stmtList] {
				continue
			}
			programs[cu.stmtList] = true
		}
		files, err := f.lineFiles(cu) // checks the header first
		if err != nil || len(files) == 0 {
			continue
		}
		named := false
		for _, lf := range files {
			if lf != nil && pathSuffix(lf.Name, file) {
				named = true
				matched = append(matched, lf.Name)
			}
		}
		if !named {
			continue
		}
		lr, err := f.data.LineReader(cu.entry)
		if err != nil || lr == nil {
			continue
		}
		var le dwarf.LineEntry
		for {
			if err := lr.Next(&le); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("reading line table of %s: %w", cu.Path(), err)
			}
			if le.EndSequence || le.File == nil || !pathSuffix(le.File.Name, file) {
				continue
			}
			codeLine[le.Line] = true
			if le.Line == line && le.IsStmt {
				addrs[le.Address] = le.File.Name
				if len(addrs) > maxLineSites*4 {
					return nil, fmt.Errorf("line %s:%d: over %d addresses", file, line, maxLineSites*4)
				}
			}
		}
	}
	if len(matched) == 0 {
		return nil, fmt.Errorf("line %s:%d: no line table of %s names a file %q%s: %w", file, line, f.DebugPath, file, idx.splitNote(), ErrNotFound)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("line %s:%d has no code (%s): %w", file, line, nearest(codeLine, line), ErrNotFound)
	}
	sorted := make([]uint64, 0, len(addrs))
	for a := range addrs {
		sorted = append(sorted, a)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })

	seen := map[dwarf.Offset]bool{}
	var out []LineSite
	for _, a := range sorted {
		fn, err := f.FunctionAt(a)
		if err != nil {
			continue // code without a function DIE (e.g. a stripped CRT part)
		}
		block, inlined, err := f.innermost(fn, a)
		if err != nil {
			return nil, err
		}
		if seen[block] {
			continue
		}
		seen[block] = true
		out = append(out, LineSite{Address: a, File: addrs[a], Line: line, Function: fn, Inlined: inlined})
		if len(out) >= maxLineSites {
			break
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("line %s:%d: its code is in no function the debuginfo describes%s: %w", file, line, idx.splitNote(), ErrNotFound)
	}
	return out, nil
}

// nearest names the lines with code around line for messages.
func nearest(code map[int]bool, line int) string {
	before, after := 0, 0
	for l := range code {
		if l < line && l > before {
			before = l
		}
		if l > line && (after == 0 || l < after) {
			after = l
		}
	}
	switch {
	case before != 0 && after != 0:
		return fmt.Sprintf("nearest lines with code: %d and %d", before, after)
	case before != 0:
		return fmt.Sprintf("nearest line with code: %d", before)
	case after != 0:
		return fmt.Sprintf("nearest line with code: %d", after)
	}
	return "the file has no code"
}

// innermost returns the innermost block (lexical block, inlined call or
// the function) of fn that holds pc, and the inlined calls on the way.
func (f *File) innermost(fn *Function, pc uint64) (dwarf.Offset, []string, error) {
	r := f.data.Reader()
	r.Seek(fn.Offset)
	e, err := r.Next()
	if err != nil || e == nil {
		return 0, nil, fmt.Errorf("function %s: reading DIE %#x: %w", fn.Name, fn.Offset, errors.Join(err, ErrMalformed))
	}
	block := fn.Offset
	var inlined []string
	names := newNameResolver(f.data)
	if !e.Children {
		return block, nil, nil
	}
	for depth := 0; depth < maxDIEDepth; {
		e, err := r.Next()
		if err != nil {
			return 0, nil, err
		}
		if e == nil || e.Tag == 0 {
			break
		}
		if e.Tag != dwarf.TagLexDwarfBlock && e.Tag != dwarf.TagInlinedSubroutine {
			if err := skipChildren(r, e); err != nil {
				return 0, nil, err
			}
			continue
		}
		ranges, err := f.data.Ranges(e)
		if err != nil {
			return 0, nil, err
		}
		in := false
		for _, rg := range ranges {
			in = in || (pc >= rg[0] && pc < rg[1])
		}
		if !in {
			if err := skipChildren(r, e); err != nil {
				return 0, nil, err
			}
			continue
		}
		block = e.Offset
		if e.Tag == dwarf.TagInlinedSubroutine {
			inlined = append(inlined, names.name(e))
		}
		if !e.Children {
			break
		}
		depth++ // descend: the next entries are its children
	}
	return block, inlined, nil
}
