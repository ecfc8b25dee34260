package debuginfo

import (
	"debug/dwarf"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
)

// Language is a compile unit's source language, as DW_AT_language gives it.
type Language uint16

// The languages the package treats specially; others keep their DWARF code.
const (
	LangC    Language = 0x0c // DW_LANG_C99 (any C dialect is reported as C)
	LangCPP  Language = 0x04 // DW_LANG_C_plus_plus (any C++ dialect)
	LangGo   Language = 0x16
	LangRust Language = 0x1c
)

// normLang folds the dialects of C and C++ into LangC and LangCPP.
func normLang(l int64) Language {
	switch l {
	case 0x01, 0x02, 0x0c, 0x1d, 0x2c: // C89, C, C99, C11, C17
		return LangC
	case 0x04, 0x1a, 0x21, 0x2a, 0x2b: // C++, C++03, C++11, C++14, C++17/20
		return LangCPP
	}
	return Language(l)
}

// compUnit is what the package keeps of one compile unit's DIE.
type compUnit struct {
	entry   *dwarf.Entry
	name    string
	compDir string
	lang    Language
	// base is the unit's base address for location lists (DW_AT_low_pc).
	base            uint64
	addrBase        uint64
	hasAddrBase     bool
	loclistsBase    uint64
	hasLoclistsBase bool
	unit            *unit
	// stmtList is the offset of the unit's line program in .debug_line,
	// -1 when it has none.
	stmtList int64
	// files is the unit's line-table file list, read on first use.
	files    []*dwarf.LineFile
	filesErr error
	filesOK  bool
}

// Path returns the unit's source path: DW_AT_name joined to DW_AT_comp_dir
// when relative.
func (cu *compUnit) Path() string {
	if cu.name == "" || path.IsAbs(cu.name) || cu.compDir == "" {
		return cu.name
	}
	return path.Join(cu.compDir, cu.name)
}

// Function is one function with code: a DW_TAG_subprogram with an address
// (abstract instances of inline functions have none and are not listed;
// their inlined copies are found by line).
type Function struct {
	// Name is DW_AT_name, found through DW_AT_abstract_origin or
	// DW_AT_specification when the DIE has none: "handle_request", Go's
	// "main.(*Server).Handle", C++'s unqualified "handle".
	Name string
	// LinkageName is the mangled DW_AT_linkage_name (C++, Rust), "" if none.
	LinkageName string
	// Demangled is the demangled linkage name with parameters, such as
	// "srv::Server::handle(int)", and DemangledNoParams the same without
	// them ("srv::Server::handle"); "" when there is no linkage name or it
	// does not demangle.
	Demangled, DemangledNoParams string
	// CU is the compile unit's source path (DW_AT_name joined to
	// DW_AT_comp_dir); for Go it is the package path.
	CU string
	// DeclFile and DeclLine are where the function is declared; DeclFile is
	// a path from the line table, "" when unknown.
	DeclFile string
	DeclLine int
	// Entry is the virtual address of the function's first instruction
	// (DW_AT_entry_pc, DW_AT_low_pc, or the start of its first range).
	Entry uint64
	// Ranges are the function's [low, high) virtual address ranges; more
	// than one when the compiler split it (e.g. GCC's .cold parts).
	Ranges [][2]uint64
	// Language is the compile unit's language.
	Language Language
	// Offset is the DIE's offset in .debug_info.
	Offset dwarf.Offset

	cu *compUnit
}

// Contains reports whether pc is in one of the function's ranges.
func (fn *Function) Contains(pc uint64) bool {
	for _, r := range fn.Ranges {
		if pc >= r[0] && pc < r[1] {
			return true
		}
	}
	return false
}

// Names returns every name the function matches by: Name, LinkageName,
// Demangled and DemangledNoParams, without empty or repeated ones.
func (fn *Function) Names() []string {
	out := make([]string, 0, 4)
	for _, n := range []string{fn.Name, fn.LinkageName, fn.Demangled, fn.DemangledNoParams} {
		if n == "" {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == n
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}

// String returns the function's best display name and entry address.
func (fn *Function) String() string {
	n := fn.Name
	if fn.DemangledNoParams != "" {
		n = fn.DemangledNoParams
	}
	return fmt.Sprintf("%s at %#x", n, fn.Entry)
}

// global is a variable defined at unit or namespace level.
type global struct {
	name string
	off  dwarf.Offset
	cu   *compUnit
}

// index is every function and global of a file, built on first use.
type index struct {
	cus     []*compUnit
	funcs   []*Function // by Entry
	byName  map[string][]*Function
	globals map[string][]global
	// skeletons counts the split-DWARF skeleton units (-gsplit-dwarf),
	// whose DWARF is in the .dwo file dwo names (the first one's).
	skeletons int
	dwo       string
}

// maxDIEDepth bounds the nesting the index follows (namespaces, classes).
const maxDIEDepth = 64

// maxNullRun bounds a run of null entries outside any list of children.
// Valid DWARF has at most a few (padding at a unit's end). debug/dwarf
// returns a null entry without moving when a unit ends in an unterminated
// LEB128 (its last bytes all have the high bit set), forever: a 89-byte
// .debug_info made the index loop without end (FuzzCompressedSections).
const maxNullRun = 1 << 12

// index builds the file's index once.
func (f *File) index() (*index, error) {
	f.once.Do(func() {
		f.idx, f.idxErr = f.buildIndex()
		if f.idxErr != nil {
			f.idxErr = fmt.Errorf("indexing DWARF of %s: %w", f.DebugPath, f.idxErr)
		}
	})
	return f.idx, f.idxErr
}

func (f *File) buildIndex() (*index, error) {
	idx := &index{byName: map[string][]*Function{}, globals: map[string][]global{}}
	r := f.data.Reader()
	names := newNameResolver(f.data)
	var cu *compUnit
	depth, nulls := 0, 0
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			if depth > 0 {
				depth--
			} else if nulls++; nulls > maxNullRun {
				return nil, fmt.Errorf("over %d null entries outside any children: %w", maxNullRun, ErrMalformed)
			}
			continue
		}
		nulls = 0
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagSkeletonUnit {
			dwo, ok := e.Val(dwarf.AttrDwoName).(string)
			if !ok {
				dwo, ok = e.Val(attrGNUDwoName).(string)
			}
			if ok {
				if idx.skeletons++; idx.dwo == "" {
					idx.dwo = dwo
				}
			}
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			cu = f.newCompUnit(e)
			idx.cus = append(idx.cus, cu)
			depth = 0
			if e.Children {
				depth++
			}
			continue
		case dwarf.TagSubprogram:
			if fn, err := f.newFunction(e, cu, names); err != nil {
				return nil, err
			} else if fn != nil {
				n := int64(functionCost + len(fn.Name) + len(fn.LinkageName) + len(fn.Demangled) + len(fn.DemangledNoParams) + 16*len(fn.Ranges))
				if err := f.budget.charge(n, "functions"); err != nil {
					return nil, err
				}
				idx.funcs = append(idx.funcs, fn)
			}
			if err := skipChildren(r, e); err != nil {
				return nil, err
			}
			continue
		case dwarf.TagVariable:
			if cu != nil && hasLocation(e) {
				if n := names.name(e); n != "" {
					if err := f.budget.charge(int64(globalCost+len(n)), "globals"); err != nil {
						return nil, err
					}
					idx.globals[n] = append(idx.globals[n], global{name: n, off: e.Offset, cu: cu})
				}
			}
		case dwarf.TagNamespace, dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagModule:
			if e.Children && depth < maxDIEDepth {
				depth++
				continue
			}
		}
		if err := skipChildren(r, e); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(idx.funcs, func(i, j int) bool { return idx.funcs[i].Entry < idx.funcs[j].Entry })
	for _, fn := range idx.funcs {
		for _, n := range fn.Names() {
			idx.byName[n] = append(idx.byName[n], fn)
		}
	}
	return idx, nil
}

// hasLocation reports whether a variable DIE has a location or a constant
// value (declarations have neither).
func hasLocation(e *dwarf.Entry) bool {
	return e.Val(dwarf.AttrLocation) != nil || e.Val(dwarf.AttrConstValue) != nil
}

func (f *File) newCompUnit(e *dwarf.Entry) *compUnit {
	cu := &compUnit{entry: e, unit: f.unitOf(e.Offset)}
	cu.name, _ = e.Val(dwarf.AttrName).(string)
	cu.compDir, _ = e.Val(dwarf.AttrCompDir).(string)
	cu.stmtList = -1
	if v, ok := e.Val(dwarf.AttrStmtList).(int64); ok {
		cu.stmtList = v
	}
	if l, ok := e.Val(dwarf.AttrLanguage).(int64); ok {
		cu.lang = normLang(l)
	}
	if lo, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
		cu.base = lo
	}
	if v, ok := e.Val(dwarf.AttrAddrBase).(int64); ok {
		cu.addrBase, cu.hasAddrBase = uint64(v), true
	}
	if v, ok := e.Val(dwarf.AttrLoclistsBase).(int64); ok {
		cu.loclistsBase, cu.hasLoclistsBase = uint64(v), true
	}
	if cu.unit != nil {
		cu.unit.cu = cu
	}
	return cu
}

// lineFiles returns the unit's line-table files. Units that share one
// line program share its file list, read and charged to the budget once.
func (f *File) lineFiles(cu *compUnit) ([]*dwarf.LineFile, error) {
	if !cu.filesOK {
		cu.filesOK = true
		if other, ok := f.lineTables[cu.stmtList]; ok && cu.stmtList >= 0 {
			cu.files, cu.filesErr = other.files, other.filesErr
			return cu.files, cu.filesErr
		}
		var lr *dwarf.LineReader
		err := error(nil)
		if cu.stmtList >= 0 {
			err = checkLineHeader(f.sections.line, uint64(cu.stmtList), f.order, &f.budget)
		}
		if err == nil {
			lr, err = f.data.LineReader(cu.entry)
		}
		switch {
		case err != nil:
			cu.filesErr = err
		case lr != nil:
			cu.files = lr.Files()
		}
		if cu.stmtList >= 0 {
			if f.lineTables == nil {
				f.lineTables = map[int64]*compUnit{}
			}
			f.lineTables[cu.stmtList] = cu
		}
	}
	return cu.files, cu.filesErr
}

// newFunction makes a Function of a subprogram DIE, or nil when it has no
// code (a declaration or an abstract instance).
func (f *File) newFunction(e *dwarf.Entry, cu *compUnit, names *nameResolver) (*Function, error) {
	if cu == nil {
		return nil, nil
	}
	ranges, err := f.data.Ranges(e)
	if err != nil {
		return nil, fmt.Errorf("ranges of DIE %#x: %w", e.Offset, err)
	}
	var nonEmpty [][2]uint64
	for _, rg := range ranges {
		if rg[1] > rg[0] {
			nonEmpty = append(nonEmpty, rg)
		}
	}
	if len(nonEmpty) == 0 {
		return nil, nil
	}
	fn := &Function{
		Name:     names.name(e),
		CU:       cu.Path(),
		Ranges:   nonEmpty,
		Entry:    nonEmpty[0][0],
		Language: cu.lang,
		Offset:   e.Offset,
		cu:       cu,
	}
	if lo, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
		fn.Entry = lo
	}
	if ep, ok := e.Val(dwarf.AttrEntrypc).(uint64); ok {
		fn.Entry = ep
	} else if ep, ok := e.Val(dwarf.AttrEntrypc).(int64); ok {
		// DWARF 5: an entry_pc of class constant is an offset from low_pc.
		if lo, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
			fn.Entry = lo + uint64(ep)
		}
	}
	fn.LinkageName = names.linkageName(e)
	if fn.LinkageName != "" {
		if d, err := demangle.ToString(fn.LinkageName, demangle.NoClones); err == nil {
			fn.Demangled = d
		}
		if d, err := demangle.ToString(fn.LinkageName, demangle.NoParams, demangle.NoClones); err == nil {
			fn.DemangledNoParams = d
		}
	}
	declFile, declLine := names.decl(e)
	fn.DeclLine = declLine
	if declFile >= 0 {
		files, _ := f.lineFiles(cu)
		if declFile < len(files) && files[declFile] != nil {
			fn.DeclFile = files[declFile].Name
		}
	}
	if fn.Name == "" && fn.DemangledNoParams == "" && fn.LinkageName == "" {
		fn.Name = fmt.Sprintf("<anonymous at %#x>", fn.Entry)
	}
	return fn, nil
}

// nameResolver finds the names and declarations of DIEs that borrow them
// through DW_AT_abstract_origin or DW_AT_specification.
type nameResolver struct {
	data  *dwarf.Data
	r     *dwarf.Reader
	cache map[dwarf.Offset]*dwarf.Entry
}

func newNameResolver(d *dwarf.Data) *nameResolver {
	return &nameResolver{data: d, r: d.Reader(), cache: map[dwarf.Offset]*dwarf.Entry{}}
}

// maxOriginHops bounds chains of abstract origins and specifications.
const maxOriginHops = 8

// entryAt reads the DIE at off.
func (n *nameResolver) entryAt(off dwarf.Offset) (*dwarf.Entry, error) {
	if e, ok := n.cache[off]; ok {
		return e, nil
	}
	n.r.Seek(off)
	e, err := n.r.Next()
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("no DIE at %#x: %w", off, ErrMalformed)
	}
	if len(n.cache) > 1<<16 {
		clear(n.cache)
	}
	n.cache[off] = e
	return e, nil
}

// origins returns e and the DIEs it borrows from, nearest first.
func (n *nameResolver) origins(e *dwarf.Entry) []*dwarf.Entry {
	out := []*dwarf.Entry{e}
	for i := 0; i < maxOriginHops; i++ {
		off, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			off, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
		}
		if !ok {
			break
		}
		o, err := n.entryAt(off)
		if err != nil {
			break
		}
		out = append(out, o)
		e = o
	}
	return out
}

// attr returns the first value of attr along e's origins.
func (n *nameResolver) attr(e *dwarf.Entry, attr dwarf.Attr) any {
	if v := e.Val(attr); v != nil {
		return v
	}
	for _, o := range n.origins(e)[1:] {
		if v := o.Val(attr); v != nil {
			return v
		}
	}
	return nil
}

func (n *nameResolver) name(e *dwarf.Entry) string {
	s, _ := n.attr(e, dwarf.AttrName).(string)
	return s
}

func (n *nameResolver) linkageName(e *dwarf.Entry) string {
	if s, ok := n.attr(e, dwarf.AttrLinkageName).(string); ok {
		return s
	}
	s, _ := n.attr(e, attrMIPSLinkageName).(string)
	return s
}

// decl returns the DW_AT_decl_file index (-1 if none) and DW_AT_decl_line.
func (n *nameResolver) decl(e *dwarf.Entry) (int, int) {
	file, line := -1, 0
	if v, ok := n.attr(e, dwarf.AttrDeclFile).(int64); ok {
		file = int(v)
	}
	if v, ok := n.attr(e, dwarf.AttrDeclLine).(int64); ok {
		line = int(v)
	}
	return file, line
}

// Functions returns every function of the file with code, by entry address.
// The slice is shared: do not modify it.
func (f *File) Functions() ([]*Function, error) {
	idx, err := f.index()
	if err != nil {
		return nil, err
	}
	return idx.funcs, nil
}

// FunctionsByName returns the functions one of whose Names is exactly name.
func (f *File) FunctionsByName(name string) ([]*Function, error) {
	idx, err := f.index()
	if err != nil {
		return nil, err
	}
	return idx.byName[name], nil
}

// Selector picks functions: by a Glob on their names (Function.Names) and,
// when Source is set, on their source file (Function.CU or DeclFile, with
// Glob.MatchPath). A nil Name matches every name.
type Selector struct {
	Name   *glob.Glob
	Source *glob.Glob
}

// ParseSelector parses "NAME_GLOB", "source_file:PATH_GLOB" or
// "source_file:PATH_GLOB NAME_GLOB" (source first, a blank between).
func ParseSelector(text string) (Selector, error) {
	var s Selector
	rest := strings.TrimSpace(text)
	if after, ok := strings.CutPrefix(rest, "source_file:"); ok {
		src, name, _ := strings.Cut(strings.TrimSpace(after), " ")
		g, err := glob.Compile(src)
		if err != nil {
			return Selector{}, err
		}
		s.Source = g
		rest = strings.TrimSpace(name)
		if rest == "" {
			return s, nil
		}
	}
	if rest == "" {
		return Selector{}, fmt.Errorf("function selector %q: empty", text)
	}
	g, err := glob.Compile(rest)
	if err != nil {
		return Selector{}, err
	}
	s.Name = g
	return s, nil
}

// Match reports whether fn is selected.
func (s Selector) Match(fn *Function) bool {
	if s.Source != nil && !s.matchSource(fn) {
		return false
	}
	if s.Name == nil {
		return true
	}
	for _, n := range fn.Names() {
		if s.Name.Match(n) {
			return true
		}
	}
	return false
}

// matchSource reports whether the source glob matches one of the paths
// of fn's source file, with Glob.MatchPath (a path suffix of whole
// components; a relative path lies under some directory): the compile
// unit's path (DW_AT_name joined to DW_AT_comp_dir), DW_AT_name and
// DW_AT_comp_dir + "/" + DW_AT_name as the DWARF spells them (Debian's
// "./libio" and "fileops.c" give "libio/fileops.c", "fileops.c" and
// "./libio/fileops.c"), and the declaration's file.
func (s Selector) matchSource(fn *Function) bool {
	if s.Source.MatchPath(fn.CU) || (fn.DeclFile != "" && s.Source.MatchPath(fn.DeclFile)) {
		return true
	}
	if cu := fn.cu; cu != nil && cu.name != "" {
		if cu.name != fn.CU && s.Source.MatchPath(cu.name) {
			return true
		}
		if cu.compDir != "" && !path.IsAbs(cu.name) {
			if raw := cu.compDir + "/" + cu.name; raw != fn.CU && s.Source.MatchPath(raw) {
				return true
			}
		}
	}
	return false
}

// Select returns the functions s selects, by entry address. A literal name
// uses the name index; a pattern scans every function.
func (f *File) Select(s Selector) ([]*Function, error) {
	idx, err := f.index()
	if err != nil {
		return nil, err
	}
	cands := idx.funcs
	if s.Name != nil && s.Name.Literal() {
		cands = idx.byName[unescape(s.Name.String())]
	}
	var out []*Function
	for _, fn := range cands {
		if s.Match(fn) {
			out = append(out, fn)
		}
	}
	return out, nil
}

// unescape removes the backslashes of a literal pattern.
func unescape(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+1 < len(p) {
			i++
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// Function returns the one function named name (any of its Names); the
// error lists the candidates when there are several, and wraps ErrNotFound
// when there is none.
func (f *File) Function(name string) (*Function, error) {
	fns, err := f.FunctionsByName(name)
	if err != nil {
		return nil, err
	}
	switch len(fns) {
	case 0:
		return nil, fmt.Errorf("function %q in %s%s: %w", name, f.Path, f.idx.splitNote(), ErrNotFound)
	case 1:
		return fns[0], nil
	}
	var at []string
	for _, fn := range fns {
		at = append(at, fmt.Sprintf("%#x (%s)", fn.Entry, fn.CU))
	}
	return nil, fmt.Errorf("function %q in %s: %d functions have that name, at %s", name, f.Path, len(fns), strings.Join(at, ", "))
}

// FunctionAt returns the function whose ranges hold pc.
func (f *File) FunctionAt(pc uint64) (*Function, error) {
	idx, err := f.index()
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(idx.funcs), func(i int) bool { return idx.funcs[i].Entry > pc })
	for j := i - 1; j >= 0; j-- {
		if idx.funcs[j].Contains(pc) {
			return idx.funcs[j], nil
		}
		if i-j > 64 {
			break
		}
	}
	// Split functions: a cold part may lie before the entry.
	for _, fn := range idx.funcs {
		if len(fn.Ranges) > 1 && fn.Contains(pc) {
			return fn, nil
		}
	}
	return nil, fmt.Errorf("pc %#x in %s: no function: %w", pc, f.Path, ErrNotFound)
}

// attrGNUDwoName is DW_AT_GNU_dwo_name, GCC's name of a DWARF 4 split
// unit's .dwo file.
const attrGNUDwoName dwarf.Attr = 0x2130

// splitNote says, for an error, that the file's DWARF is split
// (-gsplit-dwarf): the .dwo files (and .dwp packages) that hold it are
// not read. It is "" for other files.
func (idx *index) splitNote() string {
	if idx.skeletons == 0 {
		return ""
	}
	return fmt.Sprintf(" (its DWARF is split, -gsplit-dwarf: %d skeleton units whose DWARF is in .dwo files such as %q, which are not read; build without -gsplit-dwarf)", idx.skeletons, idx.dwo)
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, older GCC's linkage
// name, which debug/dwarf does not name.
const attrMIPSLinkageName dwarf.Attr = 0x2007
