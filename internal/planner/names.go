package planner

import (
	"errors"
	"fmt"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// lineSites places the uprobes of a line: probe where the line's code
// starts (debuginfo.File.Lines: the first is_stmt instruction of the line in
// each block holding it, one per inlined or duplicated copy), each checked
// as uprobe:SYMBOL+0xOFF is: inside a known function, on an instruction
// boundary, on an instruction the kernel runs correctly.
func (fl *file) lineSites(p config.ProbeRef) ([]location, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("target %s: %s: "+format, append([]any{fl.path, p}, args...)...)
	}
	dbg, err := fl.debug()
	if err != nil {
		return nil, fail("a line probe needs the file's debuginfo: %w", err)
	}
	sites, err := dbg.Lines(p.File, p.Line)
	if err != nil {
		return nil, fail("%w", err)
	}
	var locs []location
	for _, s := range sites {
		fn, ok := fl.containing(s.Address)
		if !ok {
			return nil, fail("the line's code at %#x is in no function of the symbol table or call-frame information", s.Address)
		}
		l, err := fl.functionSites(p, fn, s.Address-fn.Address)
		if err != nil {
			return nil, fail("the line's code at %#x: %w", s.Address, err)
		}
		locs = append(locs, l...)
	}
	return locs, nil
}

// siteOf says what a location is to the debuginfo: the kind of site, the
// pc whose variables are read, and an address inside the function.
func siteOf(p config.ProbeRef, loc location) (site debuginfo.Site, pc, inside uint64) {
	switch {
	case loc.Return:
		// A kernel return probe fires in the caller: only the
		// return value (and statics) can be read.
		return debuginfo.SiteReturn, 0, loc.Address
	case p.Returns():
		// A RET instruction (ret:, or a Go function's return).
		return debuginfo.SiteReturn, loc.Address, loc.Address
	case loc.AtEntry:
		return debuginfo.SiteEntry, 0, loc.Address
	case loc.USDT != nil:
		// The note's site, not a nop5 the probe moved onto.
		return debuginfo.SiteLine, loc.USDT.Address, loc.USDT.Address
	}
	return debuginfo.SiteLine, loc.Address, loc.Address
}

// scopeAt returns what can be named at a location.
func (fl *file) scopeAt(p config.ProbeRef, loc location) (*debuginfo.Scope, error) {
	dbg, err := fl.debug()
	if err != nil {
		return nil, fmt.Errorf("$names need the file's debuginfo: %w", err)
	}
	site, pc, inside := siteOf(p, loc)
	fn, err := dbg.FunctionAt(inside)
	if err != nil {
		return nil, fmt.Errorf("no function of the debuginfo holds %#x: %w", inside, err)
	}
	if site == debuginfo.SiteLine && pc == fn.Entry {
		// Before the function's first instruction ran, its parameters
		// are where the calling convention put them.
		site, pc = debuginfo.SiteEntry, 0
	}
	return dbg.Scope(fn, pc, site)
}

// compiler compiles the fetches of one end of a span at one location.
type compiler struct {
	file  *file
	probe config.ProbeRef
	loc   location
	role  role
	// lenient is set for a span expanded from a function pattern: an
	// attribute the function cannot give is left out with a note.
	lenient bool
	// span is the span's name, for notes.
	span string

	scope    *debuginfo.Scope
	scopeErr error
	scoped   bool
}

// all compiles every fetch of one span end, expanding $$params; it leaves
// out (with a note) the parameters $$params cannot read or that would make
// more than bpfobj.MaxFetches values.
func (c *compiler) all(specs []fetchSpec, note func(string, ...any)) ([]plan.Fetch, error) {
	out := make([]plan.Fetch, 0, len(specs))
	var fromParams []bool
	var errs []error
	for _, s := range specs {
		what := fmt.Sprintf("attribute %q", s.Key)
		if s.Role != plan.RoleAttribute {
			what = s.Key
		}
		if s.Expr.Root == fetch.RootName {
			fs, params, err := c.names(s, note)
			if err != nil {
				if c.lenient && s.Role == plan.RoleAttribute {
					note("span %q: %s: %s left out: %v", c.span, c.probe, what, err)
					continue
				}
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
				continue
			}
			for _, f := range fs {
				f.Role = s.Role
				out = append(out, f)
				fromParams = append(fromParams, params)
			}
			continue
		}
		f, err := compile(s.Attribute, c.probe, c.loc, c.role)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		f.Role = s.Role
		out = append(out, f)
		fromParams = append(fromParams, false)
	}
	for len(out) > bpfobj.MaxFetches {
		i := len(out) - 1
		for i >= 0 && !fromParams[i] {
			i--
		}
		if i < 0 {
			break
		}
		note("span %q: %s: attribute %q left out: more than %d values at one span end", c.span, c.probe, out[i].Key, bpfobj.MaxFetches)
		out = append(out[:i], out[i+1:]...)
		fromParams = append(fromParams[:i], fromParams[i+1:]...)
	}
	seen := map[string]bool{}
	for _, f := range out {
		if f.Role != plan.RoleAttribute {
			continue
		}
		if seen[f.Key] {
			errs = append(errs, fmt.Errorf("attribute %q is given twice (once by $$params)", f.Key))
		}
		if why, ok := config.ReservedAttributes[f.Key]; ok {
			errs = append(errs, fmt.Errorf("attribute %q (from $$params) is reserved: %s; choose another key", f.Key, why))
		}
		seen[f.Key] = true
	}
	return out, errors.Join(errs...)
}

// names compiles a $name: one fetch, or one per parameter for $$params
// (params is then true), keyed KEY.NAME.
func (c *compiler) names(s fetchSpec, note func(string, ...any)) (fs []plan.Fetch, params bool, err error) {
	path, err := fetch.ParsePath(s.Expr.Path)
	if err != nil {
		return nil, false, err
	}
	if !c.scoped {
		c.scoped = true
		c.scope, c.scopeErr = c.file.scopeAt(c.probe, c.loc)
	}
	if c.scopeErr != nil {
		return nil, false, c.scopeErr
	}
	if path.Kind == fetch.PathParams {
		if s.Role != plan.RoleAttribute {
			return nil, false, errors.New("$$params stands for several values")
		}
		accs, perr := c.scope.CompileParams()
		if perr != nil {
			note("span %q: %s: $$params leaves out what it cannot read: %v", c.span, c.probe, perr)
		}
		for _, a := range accs {
			f, err := accessFetch(s.Key+"."+a.Name, a.Path, a, false)
			if err != nil {
				note("span %q: %s: $$params leaves out %s: %v", c.span, c.probe, a.Path, err)
				continue
			}
			fs = append(fs, f)
		}
		return fs, true, nil
	}
	var a debuginfo.Access
	if s.Expr.Typed {
		a, err = c.scope.CompileAs(path, s.Expr.Type)
	} else {
		a, err = c.scope.Compile(path)
	}
	if err != nil {
		return nil, false, err
	}
	f, err := accessFetch(s.Key, s.Expr.Text, a, s.Expr.Typed)
	if err != nil {
		return nil, false, err
	}
	switch {
	case s.Role == plan.RoleStatus && f.Store != plan.StoreInt:
		return nil, false, fmt.Errorf("%s is %s (%s), not an integer to compare", a.Path, f.Value.Type, a.TypeName)
	case (s.Role == plan.RoleTraceID || s.Role == plan.RoleParentSpanID) && f.Store == plan.StoreInt:
		return nil, false, fmt.Errorf("%s is an integer (%s), not an id's bytes or hex text", a.Path, a.TypeName)
	}
	return []plan.Fetch{f}, false, nil
}

// accessFetch turns a compiled name into the engine's fetch, checking the
// engine's limits. A string longer than the capture limit by default
// (char[1024]) is cut to it; one typed so is refused, as bytes are.
func accessFetch(key, text string, a debuginfo.Access, typed bool) (plan.Fetch, error) {
	f := plan.Fetch{
		Key: key, Text: text, Base: plan.BaseRegister, Register: a.Register, Disp: a.Disp,
		Derefs: append([]int64(nil), a.Derefs...), LastIsAddress: a.LastIsAddress, LenRegister: a.LenRegister,
	}
	if len(f.Derefs) == 0 {
		f.Derefs = nil
	}
	if a.Register == regs.None {
		f.Base = plan.BaseConstant
	}
	if len(f.Derefs) > bpfobj.MaxDerefs {
		return plan.Fetch{}, fmt.Errorf("%s takes %d memory reads (%s), at most %d", a.Path, len(f.Derefs), a, bpfobj.MaxDerefs)
	}
	typ := a.Type
	switch typ.Kind {
	case fetch.KindString, fetch.KindGoString:
		if int(typ.MaxLen) > bpfobj.StringMax {
			if typed {
				return plan.Fetch{}, fmt.Errorf("%s: %s is longer than the %d-byte capture limit", a.Path, typ, bpfobj.StringMax)
			}
			typ.MaxLen = uint16(bpfobj.StringMax)
		}
		f.Store = plan.StoreString
		if typ.Kind == fetch.KindGoString {
			f.Store = plan.StoreGoString
			if len(f.Derefs) == 0 && f.LenRegister == regs.None {
				return plan.Fetch{}, fmt.Errorf("%s: a Go string without its length", a.Path)
			}
		}
		f.MaxLen = typ.MaxLen
	case fetch.KindBytes:
		if int(typ.MaxLen) > bpfobj.StringMax {
			return plan.Fetch{}, fmt.Errorf("%s is %d bytes (%s), more than the %d-byte capture limit: read a part of it (%s:bytes[%d])",
				a.Path, typ.MaxLen, a.TypeName, bpfobj.StringMax, a.Path, bpfobj.StringMax)
		}
		f.Store, f.MaxLen = plan.StoreBytes, typ.MaxLen
	case fetch.KindUnsigned, fetch.KindSigned, fetch.KindHex:
		f.Store = plan.StoreInt
		f.ReadSize = a.ReadSize
		if f.ReadSize == 0 {
			f.ReadSize = 8
		}
	default:
		return plan.Fetch{}, fmt.Errorf("%s: no way to store %s", a.Path, typ)
	}
	f.Value.Type = typ
	f.Value.Enum = a.Enum
	return f, nil
}
