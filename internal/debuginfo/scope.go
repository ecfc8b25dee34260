package debuginfo

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Site says where in a function a probe fires, which decides what is
// readable there.
type Site uint8

// The sites of a probe.
const (
	// SiteEntry is the function's first instruction: its parameters are
	// where the calling convention put them, before the prologue runs.
	SiteEntry Site = iota + 1
	// SiteReturn is a return. With a pc it is the return instruction
	// itself (Go's returns are probed there): results are in the ABI's
	// registers and variables are read by their locations at that pc.
	// With pc 0 it is a uretprobe, which fires after the return, in the
	// caller: only $return (and globals of non-PIE files) can be read.
	SiteReturn
	// SiteLine is any instruction of the function (a line probe):
	// parameters and locals in scope there, by their locations at that pc.
	SiteLine
)

// String returns "entry", "return" or "line".
func (s Site) String() string {
	switch s {
	case SiteEntry:
		return "entry"
	case SiteReturn:
		return "return"
	case SiteLine:
		return "line"
	}
	return "invalid"
}

// VarKind is what a variable is to the function.
type VarKind uint8

// The kinds of variables.
const (
	// VarParam is a formal parameter.
	VarParam VarKind = iota + 1
	// VarLocal is a local variable of the function or a block in scope.
	VarLocal
	// VarResult is a Go result (named, or ~rN), or C's return value.
	VarResult
	// VarGlobal is a variable of unit or namespace scope, or a static local.
	VarGlobal
)

// String returns "parameter", "local", "result" or "global".
func (k VarKind) String() string {
	switch k {
	case VarParam:
		return "parameter"
	case VarLocal:
		return "local"
	case VarResult:
		return "result"
	case VarGlobal:
		return "global"
	}
	return "invalid"
}

// Variable is one variable visible at a scope's pc, with its location there.
type Variable struct {
	Name string
	Kind VarKind
	// Type is the declared type; nil for void or unknown.
	Type dwarf.Type
	// DeclLine is the line of the declaration, 0 when unknown.
	DeclLine int
	// Function is the name of the function (inlined or not) that declares
	// it, "" for globals.
	Function string
	// Loc is the location at the scope's pc, valid when Err is nil.
	Loc Loc
	// Err says why the variable cannot be read at the pc; it wraps
	// ErrOptimizedOut or ErrTooComplex.
	Err error
	// How says where Loc came from: "location list", "location
	// expression", "constant value", "SysV calling convention at entry",
	// "Go ABI result registers", "SysV return registers".
	How string
	// Offset is the DIE's offset in .debug_info; 0 for results the ABI
	// alone describes.
	Offset dwarf.Offset

	// level is the nesting of the declaring scope: 0 the function, more
	// for blocks and inlined calls; lookups prefer the highest.
	level int
	// fnLevel is the nesting of the declaring (inlined) function.
	fnLevel int
	// static is set for variables with an absolute address.
	static bool
}

// Scope is what a probe at one pc of one function can name: the function's
// parameters, the locals of the blocks and inlined calls that hold the pc,
// its results at a return, and globals. Create it with File.Scope.
type Scope struct {
	File     *File
	Function *Function
	// PC is the virtual address of the probed instruction; 0 for a
	// uretprobe.
	PC   uint64
	Site Site
	// Inlined lists the inlined calls the pc is in, outermost first.
	Inlined []string
	// Vars are the variables, outermost scope first; lookups take the last
	// of a name, so an inner one shadows an outer one.
	Vars []*Variable
	// Results are the function's results (Go) or its return value (C, one
	// Variable named "$return"), located only at SiteReturn.
	Results []*Variable
	// ReturnType is the declared return type of a C function (nil: void).
	ReturnType dwarf.Type

	fbExpr   *dwarf.Field
	innerFn  int
	isGo     bool
	resolver *nameResolver
}

// maxScopeVars bounds the variables collected for one scope.
const maxScopeVars = 4096

// Scope returns what can be named at pc in fn for a probe of kind site.
// For SiteEntry, pc is ignored and the function's entry is used.
func (f *File) Scope(fn *Function, pc uint64, site Site) (*Scope, error) {
	if fn == nil {
		return nil, fmt.Errorf("scope: no function")
	}
	switch site {
	case SiteEntry:
		pc = fn.Entry
	case SiteLine:
		if !fn.Contains(pc) {
			return nil, fmt.Errorf("function %s: pc %#x is outside it", fn.Name, pc)
		}
	case SiteReturn:
		if pc != 0 && !fn.Contains(pc) {
			return nil, fmt.Errorf("function %s: return pc %#x is outside it", fn.Name, pc)
		}
	default:
		return nil, fmt.Errorf("function %s: unknown site %d", fn.Name, site)
	}
	s := &Scope{File: f, Function: fn, PC: pc, Site: site, isGo: fn.Language == LangGo, resolver: newNameResolver(f.data)}
	r := f.data.Reader()
	r.Seek(fn.Offset)
	e, err := r.Next()
	if err != nil || e == nil {
		return nil, fmt.Errorf("function %s: reading DIE %#x: %w", fn.Name, fn.Offset, errors.Join(err, ErrMalformed))
	}
	if fb := e.AttrField(dwarf.AttrFrameBase); fb != nil {
		s.fbExpr = fb
	}
	if t := s.resolver.attr(e, dwarf.AttrType); t != nil {
		if s.ReturnType, err = f.types.typeOf(t); err != nil {
			return nil, fmt.Errorf("function %s: return type: %w", fn.Name, err)
		}
	}
	var results []*Variable
	if e.Children {
		if err := s.walk(r, fn.Name, 0, 0, &results, 0); err != nil {
			return nil, fmt.Errorf("function %s: %w", fn.Name, err)
		}
	}
	s.locate(results)
	return s, nil
}

// walk reads the children of the DIE just read, up to their terminator.
func (s *Scope) walk(r *dwarf.Reader, fnName string, level, fnLevel int, results *[]*Variable, depth int) error {
	if depth > maxDIEDepth {
		return fmt.Errorf("scopes nested over %d deep: %w", maxDIEDepth, ErrMalformed)
	}
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		descended := false
		switch e.Tag {
		case dwarf.TagFormalParameter:
			v, err := s.newVariable(e, VarParam, fnName, level, fnLevel)
			if err != nil {
				return err
			}
			if s.isGo {
				if isResult, _ := e.Val(dwarf.AttrVarParam).(bool); isResult {
					v.Kind = VarResult
					if fnLevel == 0 {
						*results = append(*results, v)
					}
					if s.Site != SiteLine {
						break
					}
				}
			}
			s.add(v)
		case dwarf.TagVariable:
			if s.Site == SiteEntry {
				break
			}
			v, err := s.newVariable(e, VarLocal, fnName, level, fnLevel)
			if err != nil {
				return err
			}
			s.add(v)
		case dwarf.TagLexDwarfBlock:
			if s.Site == SiteEntry || s.PC == 0 || !e.Children {
				break
			}
			in, err := s.contains(e)
			if err != nil {
				return err
			}
			if in {
				descended = true
				if err := s.walk(r, fnName, level+1, fnLevel, results, depth+1); err != nil {
					return err
				}
			}
		case dwarf.TagInlinedSubroutine:
			if s.Site == SiteEntry || s.PC == 0 || !e.Children {
				break
			}
			in, err := s.contains(e)
			if err != nil {
				return err
			}
			if in {
				descended = true
				name := s.resolver.name(e)
				s.Inlined = append(s.Inlined, name)
				s.innerFn = fnLevel + 1
				if err := s.walk(r, name, level+1, fnLevel+1, results, depth+1); err != nil {
					return err
				}
			}
		}
		if !descended {
			if err := skipChildren(r, e); err != nil {
				return err
			}
		}
		if len(s.Vars) > maxScopeVars {
			return fmt.Errorf("over %d variables in scope: %w", maxScopeVars, ErrMalformed)
		}
	}
}

// contains reports whether a block or inlined call holds the scope's pc;
// one without addresses holds every pc.
func (s *Scope) contains(e *dwarf.Entry) (bool, error) {
	ranges, err := s.File.data.Ranges(e)
	if err != nil {
		return false, fmt.Errorf("ranges of DIE %#x: %w", e.Offset, err)
	}
	if len(ranges) == 0 {
		return true, nil
	}
	for _, rg := range ranges {
		if s.PC >= rg[0] && s.PC < rg[1] {
			return true, nil
		}
	}
	return false, nil
}

func (s *Scope) add(v *Variable) { s.Vars = append(s.Vars, v) }

// newVariable reads a variable's name and type, and locates it at the pc.
func (s *Scope) newVariable(e *dwarf.Entry, kind VarKind, fnName string, level, fnLevel int) (*Variable, error) {
	v := &Variable{Kind: kind, Function: fnName, Offset: e.Offset, level: level, fnLevel: fnLevel}
	v.Name = s.resolver.name(e)
	if v.Name == "" {
		v.Name = fmt.Sprintf("<unnamed %#x>", e.Offset)
	}
	_, v.DeclLine = s.resolver.decl(e)
	if t := s.resolver.attr(e, dwarf.AttrType); t != nil {
		typ, err := s.File.types.typeOf(t)
		if err != nil {
			return nil, fmt.Errorf("type of %s: %w", v.Name, err)
		}
		v.Type = typ
	}
	if kind == VarResult {
		return v, nil
	}
	if s.Site == SiteReturn && s.PC == 0 {
		v.Err = fmt.Errorf("after the function returns (a uretprobe) its variables are gone; read them at its entry: %w", ErrOptimizedOut)
		return v, nil
	}
	v.Loc, v.How, v.Err = s.File.locate(e, s.resolver, s.Function, s.PC, s.Site, s.frameBase)
	if v.Err == nil && len(v.Loc.Pieces) == 1 && v.Loc.Pieces[0].Addr.Absolute {
		v.static = true
		if kind == VarLocal {
			v.Kind = VarGlobal // a static local
		}
	}
	return v, nil
}

// locate finds results at a return, and the SysV registers of parameters
// whose DWARF location is a stack slot the prologue has yet to fill.
func (s *Scope) locate(goResults []*Variable) {
	f := s.File
	if s.Site == SiteEntry && f.Arch.Machine == archX86_64.Machine && !s.isGo {
		s.sysvEntry()
	}
	switch {
	case s.isGo:
		// Go results keep their DWARF locations at a line (-N -l gives
		// stack slots); at a return the ABI's registers replace them.
		s.Results = goResults
		if s.Site == SiteReturn {
			s.goResults()
		}
	case s.Site == SiteReturn:
		ret := &Variable{Name: "$return", Kind: VarResult, Type: s.ReturnType, Function: s.Function.Name}
		ret.Loc, ret.Err = sysvReturn(f.Arch, s.ReturnType)
		ret.How = "SysV return registers"
		if f.Arch.Machine == archARM64.Machine {
			ret.How = "AAPCS64 return register"
		}
		s.Results = []*Variable{ret}
	}
}

// frameBase evaluates the function's DW_AT_frame_base at the pc.
func (s *Scope) frameBase() (Addr, error) {
	if s.fbExpr == nil {
		return Addr{}, fmt.Errorf("function %s has no DW_AT_frame_base: %w", s.Function.Name, ErrMalformed)
	}
	loc, _, err := s.File.evalAttr(s.fbExpr, s.Function.cu, s.Function, s.PC, s.Site, nil)
	if err != nil {
		return Addr{}, err
	}
	if len(loc.Pieces) != 1 {
		return Addr{}, fmt.Errorf("frame base in pieces: %w", ErrTooComplex)
	}
	p := loc.Pieces[0]
	switch p.Kind {
	case LocRegister:
		return Addr{Reg: p.Reg}, nil
	case LocMemory:
		return p.Addr, nil
	}
	return Addr{}, fmt.Errorf("frame base of kind %s: %w", p.Kind, ErrTooComplex)
}

// locate evaluates a DIE's DW_AT_location (or DW_AT_const_value) at pc.
func (f *File) locate(e *dwarf.Entry, res *nameResolver, fn *Function, pc uint64, site Site, fb func() (Addr, error)) (Loc, string, error) {
	if field := e.AttrField(dwarf.AttrLocation); field != nil {
		return f.evalAttr(field, fn.cu, fn, pc, site, fb)
	}
	cv := e.AttrField(dwarf.AttrConstValue)
	if cv == nil {
		for _, o := range res.origins(e)[1:] {
			if cv = o.AttrField(dwarf.AttrConstValue); cv != nil {
				break
			}
		}
	}
	if cv != nil {
		switch v := cv.Val.(type) {
		case int64:
			return Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: -1, Off: v}}}}, "constant value", nil
		case []byte:
			if len(v) <= 8 {
				var b [8]byte
				copy(b[:], v)
				return Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: -1, Off: int64(f.order.Uint64(b[:]))}}}}, "constant value", nil
			}
		}
		return Loc{}, "constant value", fmt.Errorf("constant value of %T: %w", cv.Val, ErrTooComplex)
	}
	return Loc{}, "", fmt.Errorf("no location in the debuginfo: %w", ErrOptimizedOut)
}

// evalAttr evaluates a location-class attribute at pc: an expression, or
// the entry of a location list that covers pc.
func (f *File) evalAttr(field *dwarf.Field, cu *compUnit, fn *Function, pc uint64, site Site, fb func() (Addr, error)) (Loc, string, error) {
	var (
		expr []byte
		how  string
		list bool
	)
	switch field.Class {
	case dwarf.ClassExprLoc, dwarf.ClassBlock:
		expr, _ = field.Val.([]byte)
		how = "location expression"
	case dwarf.ClassLocListPtr, dwarf.ClassLocList:
		how, list = "location list", true
		entries, err := f.locList(field, cu)
		if err != nil {
			return Loc{}, how, err
		}
		if pc == 0 {
			return Loc{}, how, fmt.Errorf("no pc after the return: %w", ErrOptimizedOut)
		}
		var ok bool
		if expr, ok = pick(entries, pc); !ok {
			return Loc{}, how, fmt.Errorf("the location list does not cover pc %#x (%s): %w", pc, rangesText(entries), ErrOptimizedOut)
		}
	default:
		return Loc{}, "", fmt.Errorf("location of class %s: %w", field.Class, ErrMalformed)
	}
	u := cu.unit
	env := &exprEnv{
		order:     f.order,
		addrSize:  f.Arch.PtrSize,
		frameBase: fb,
		atEntry:   site == SiteEntry || (fn != nil && pc == fn.Entry),
		cfa:       func() (Addr, error) { return f.cfaAddr(fn, pc) },
	}
	if u != nil {
		env.addrSize = u.addrSize
		env.debugAddr = func(idx uint64) (uint64, error) { return f.debugAddr(u, idx) }
	}
	loc, err := evalExpr(expr, env)
	if err != nil {
		if errors.Is(err, ErrOptimizedOut) && len(expr) == 0 {
			if list {
				err = fmt.Errorf("an empty location at pc %#x: %w", pc, ErrOptimizedOut)
			} else {
				err = fmt.Errorf("an empty location expression: %w", ErrOptimizedOut)
			}
		}
		return Loc{}, how, err
	}
	if site == SiteEntry && !list && !validAtEntry(f.Arch, loc) {
		return loc, how, errPrologueSlot
	}
	if site == SiteReturn && belowSP(f.Arch, loc) {
		return loc, how, fmt.Errorf("its stack slot lies below the stack pointer at the return (the frame is popped): %w", ErrOptimizedOut)
	}
	return loc, how, nil
}

// errPrologueSlot says a variable lives in a stack slot the function's
// prologue has not written yet at its first instruction.
var errPrologueSlot = fmt.Errorf("its stack slot is written by the function's prologue, after the entry: %w", ErrOptimizedOut)

// validAtEntry reports whether a location, taken from one expression that
// claims to hold over the whole function, holds at its first instruction:
// memory below the stack pointer or relative to another register (the
// frame pointer is not set up yet) is a slot the prologue fills later.
func validAtEntry(a *Arch, loc Loc) bool {
	for _, p := range loc.Pieces {
		if p.Kind != LocMemory || p.Addr.Reg < 0 {
			continue
		}
		if p.Addr.Reg != a.SP || len(p.Addr.Derefs) > 0 || p.Addr.Off < 0 {
			return false
		}
	}
	return true
}

// belowSP reports whether a location has memory below the stack pointer.
func belowSP(a *Arch, loc Loc) bool {
	for _, p := range loc.Pieces {
		if p.Kind == LocMemory && p.Addr.Reg == a.SP && len(p.Addr.Derefs) == 0 && p.Addr.Off < 0 {
			return true
		}
	}
	return false
}

func rangesText(entries []LocEntry) string {
	var parts []string
	for i, e := range entries {
		if i == 8 {
			parts = append(parts, "…")
			break
		}
		if e.Default {
			parts = append(parts, "default")
			continue
		}
		parts = append(parts, fmt.Sprintf("[%#x, %#x)", e.Low, e.High))
	}
	if len(parts) == 0 {
		return "it is empty"
	}
	return "it covers " + strings.Join(parts, " ")
}

// locList decodes the location list a DW_AT_location refers to.
func (f *File) locList(field *dwarf.Field, cu *compUnit) ([]LocEntry, error) {
	u := cu.unit
	if u == nil {
		return nil, fmt.Errorf("location list outside any unit: %w", ErrMalformed)
	}
	env := &locListEnv{
		order:     f.order,
		addrSize:  u.addrSize,
		dwarf64:   u.dwarf64,
		base:      cu.base,
		debugAddr: func(idx uint64) (uint64, error) { return f.debugAddr(u, idx) },
	}
	switch field.Class {
	case dwarf.ClassLocList:
		idx, _ := field.Val.(uint64)
		base := cu.loclistsBase
		if !cu.hasLoclistsBase {
			base = 12 // after the header of the first contribution
			if u.dwarf64 {
				base = 20
			}
		}
		off, err := loclistxOffset(f.sections.loclists, base, idx, f.order, u.dwarf64)
		if err != nil {
			return nil, err
		}
		return decodeLoclists(f.sections.loclists, off, env)
	default:
		off, _ := field.Val.(int64)
		if u.version >= 5 {
			return decodeLoclists(f.sections.loclists, uint64(off), env)
		}
		return decodeLoc(f.sections.loc, uint64(off), env)
	}
}

// cfaAddr returns the CFA at pc as an Addr: by the CFI, or at a function's
// first instruction by the machine's rule when there is no CFI.
func (f *File) cfaAddr(fn *Function, pc uint64) (Addr, error) {
	if pc == 0 {
		return Addr{}, fmt.Errorf("the frame is gone after the return: %w", ErrOptimizedOut)
	}
	cfa, err := f.CFAAt(pc)
	if err != nil {
		if fn != nil && pc == fn.Entry && errors.Is(err, ErrNotFound) {
			return Addr{Reg: f.Arch.SP, Off: f.Arch.EntryCFAOffset}, nil
		}
		return Addr{}, err
	}
	if cfa.Expr != nil {
		return Addr{}, fmt.Errorf("CFA at %#x is a DWARF expression: %w", pc, ErrTooComplex)
	}
	return Addr{Reg: cfa.Reg, Off: cfa.Offset}, nil
}

// Lookup returns the innermost variable of that name: a local, parameter
// or result, else a global. The error names the function and lists what
// is in scope.
func (s *Scope) Lookup(name string) (*Variable, error) {
	for i := len(s.Vars) - 1; i >= 0; i-- {
		if s.Vars[i].Name == name {
			return s.Vars[i], nil
		}
	}
	for _, v := range s.Results {
		if v.Name == name {
			if s.Site == SiteReturn {
				return v, nil
			}
			return nil, fmt.Errorf("%s: %s is a result, only known at a return: %w", s.where(), name, ErrNotFound)
		}
	}
	if v, err := s.File.globalVar(name, s); err == nil {
		return v, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	hint := ""
	if name == "params" {
		// The collector's configuration turns $$ into $.
		hint = "; for every parameter write $$$$params in the collector's configuration, where $$ stands for $"
	}
	return nil, fmt.Errorf("%s: no variable %q (%s)%s: %w", s.where(), name, s.InScope(), hint, ErrNotFound)
}

// where names the function and site for messages.
func (s *Scope) where() string {
	w := fmt.Sprintf("function %s at %s", s.Function.Name, s.Site)
	if s.PC != 0 && s.Site != SiteEntry {
		w += fmt.Sprintf(" (pc %#x)", s.PC)
	}
	if len(s.Inlined) > 0 {
		w += ", inlined " + strings.Join(s.Inlined, " > ")
	}
	return w
}

// InScope lists the names in scope for messages: "in scope: req, fl,
// count, n" with results at a return.
func (s *Scope) InScope() string {
	seen := map[string]bool{}
	var names []string
	for i := len(s.Vars) - 1; i >= 0; i-- {
		v := s.Vars[i]
		if seen[v.Name] {
			continue
		}
		seen[v.Name] = true
		names = append(names, v.Name)
	}
	sort.Strings(names)
	out := "in scope: " + strings.Join(names, ", ")
	if len(names) == 0 {
		out = "nothing in scope"
	}
	if s.Site == SiteReturn {
		var rs []string
		for _, v := range s.Results {
			rs = append(rs, v.Name)
		}
		out += "; results: $return"
		if len(rs) > 0 && s.isGo {
			out += ", " + strings.Join(rs, ", ")
		}
	}
	return out
}

// Params returns the parameters of the innermost function at the pc (the
// inlined one, at a line in inlined code), in declaration order.
func (s *Scope) Params() []*Variable {
	var out []*Variable
	for _, v := range s.Vars {
		if v.Kind == VarParam && v.fnLevel == s.innerFn {
			out = append(out, v)
		}
	}
	return out
}

// globalVar finds a global by name for a scope: in the function's unit
// first, else the only one of that name.
func (f *File) globalVar(name string, s *Scope) (*Variable, error) {
	idx, err := f.index()
	if err != nil {
		return nil, err
	}
	gs := idx.globals[name]
	if len(gs) == 0 {
		return nil, ErrNotFound
	}
	g := gs[0]
	if len(gs) > 1 {
		found := false
		for _, c := range gs {
			if c.cu == s.Function.cu {
				g, found = c, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("global %q: %d units define one: %w", name, len(gs), ErrTooComplex)
		}
	}
	r := f.data.Reader()
	r.Seek(g.off)
	e, err := r.Next()
	if err != nil || e == nil {
		return nil, fmt.Errorf("global %q: reading DIE %#x: %w", name, g.off, errors.Join(err, ErrMalformed))
	}
	v := &Variable{Name: name, Kind: VarGlobal, Offset: g.off, static: true}
	if t := s.resolver.attr(e, dwarf.AttrType); t != nil {
		if v.Type, err = f.types.typeOf(t); err != nil {
			return nil, fmt.Errorf("type of global %q: %w", name, err)
		}
	}
	_, v.DeclLine = s.resolver.decl(e)
	fn := &Function{Name: s.Function.Name, cu: g.cu, Entry: s.Function.Entry}
	v.Loc, v.How, v.Err = f.locate(e, s.resolver, fn, s.PC, SiteLine, nil)
	return v, nil
}
