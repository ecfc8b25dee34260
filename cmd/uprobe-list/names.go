package main

import (
	"debug/dwarf"
	"fmt"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

// candidate is a value that may be offered at a span end: a $name path
// with the fields below it, or a register expression.
type candidate struct {
	key, expr string
	// what describes a register expression (no DWARF type to show).
	what string
	// note is a comment row instead: fields left out and how to list them.
	note string
}

// names writes the attributes: (exit: exit_attributes:) block of a span
// item at locs: every value that can be named there, each a row "key:
// value" that the planner takes in span at every location, as the
// receiver requires (a value it refuses is a comment saying why).
// Structs are listed l.depth levels of fields deep, at most maxFields
// fields per variable unless -all, and a row says what was left out.
// Without debuginfo it offers the argument and result registers. It
// returns the keys it offered; taken are those of the span's other end,
// which a key at the exit must not repeat (the collector refuses a key in
// both): a variable read at both ends is "exit.NAME" at the exit.
func (l *lister) names(indent string, span config.Span, locs []planner.Location, exit bool, taken map[string]bool) map[string]bool {
	t, keys := l.namesTable(indent, span, locs, exit, taken)
	if t != nil {
		l.p.table(t)
	}
	return keys
}

// namesTable is the table names writes, nil when there is nothing to
// list, and the keys it offers.
func (l *lister) namesTable(indent string, span config.Span, locs []planner.Location, exit bool, taken map[string]bool) (*table, map[string]bool) {
	keys := map[string]bool{}
	if len(locs) == 0 {
		return nil, keys
	}
	field := "attributes:"
	if exit {
		field = "exit_attributes:"
	}
	t := &table{indent: indent, head: row{yaml: field, cells: []string{"TYPE", "READ AS"}}}
	sc, err := l.in.Scope(locs[0])
	var cands []candidate
	switch {
	case err != nil:
		t.rows = append(t.rows, row{yaml: "# no names here: " + err.Error()})
		cands = l.registers(locs[0], exit)
	case locs[0].USDT != nil:
		cands = append(l.registers(locs[0], exit), l.scopeCandidates(sc, locs[0], exit)...)
	default:
		cands = l.scopeCandidates(sc, locs[0], exit)
	}
	for _, c := range cands {
		if c.note != "" {
			t.rows = append(t.rows, row{yaml: "# " + c.note})
			continue
		}
		if taken[c.key] {
			c.key = "exit." + c.key
		}
		cells, err := l.describe(sc, c)
		if err == nil {
			s := span
			m := map[string]string{c.key: c.expr}
			if exit {
				s.ExitAttributes = m
			} else {
				s.Attributes = m
			}
			if err = l.check([]config.Span{s}); err != nil {
				err = fmt.Errorf("not offered: %s", shortError(err))
			}
		}
		if err != nil {
			t.rows = append(t.rows, row{yaml: fmt.Sprintf("# %s: %v", c.expr, err)})
			continue
		}
		t.rows = append(t.rows, row{yaml: yamlScalar(c.key) + ": " + yamlScalar(collectorEscape(c.expr)), cells: cells})
		keys[c.key] = true
	}
	if !exit && err == nil && sc.Site != debuginfo.SiteReturn && len(sc.Params()) > 0 {
		s := span
		s.Attributes = map[string]string{"params": "$$params"}
		if l.check([]config.Span{s}) == nil && !keys["params"] {
			t.rows = append(t.rows, row{yaml: "params: " + collectorEscape("$$params"),
				cells: []string{"every parameter", "($$ is the collector's escape for $)"}})
			keys["params"] = true
		}
	}
	offered := false
	for _, r := range t.rows {
		offered = offered || !strings.HasPrefix(r.yaml, "#")
	}
	if !offered {
		t.head = row{yaml: "# " + field + " none offered here"}
	}
	return t, keys
}

// describe returns the TYPE and READ AS cells of a candidate, or why it
// cannot be read at the first location.
func (l *lister) describe(sc *debuginfo.Scope, c candidate) ([]string, error) {
	if c.what != "" {
		return []string{"", c.what}, nil
	}
	path, err := fetch.ParsePath(c.expr)
	if err != nil {
		return nil, err
	}
	a, err := sc.Compile(path)
	if err != nil {
		return nil, fmt.Errorf("not readable here: %s", shortError(err))
	}
	read := a.Type.String()
	if a.Enum != nil {
		read += " (enum names)"
	}
	s := a.String()
	return []string{a.TypeName, read + " " + s[:strings.LastIndexByte(s, ':')]}, nil
}

// scopeCandidates lists the paths that can be named in a scope: $return at
// a return, then each variable (only the results after a kernel return
// probe) in declaration order, parameters first, each followed by its
// fields.
func (l *lister) scopeCandidates(sc *debuginfo.Scope, loc planner.Location, exit bool) []candidate {
	goStyle := sc.Function.Language == debuginfo.LangGo
	var out []candidate
	add := func(root string, t dwarf.Type) {
		out = append(out, candidate{key: attributeKey(root), expr: root})
		if t == nil {
			return
		}
		limit := maxFields
		if l.all {
			limit = 0
		}
		paths, omitted, deeper := fieldPaths(t, goStyle, l.depth, limit)
		for _, p := range paths {
			out = append(out, candidate{key: attributeKey(root + p), expr: root + p})
		}
		switch {
		case omitted > 0:
			out = append(out, candidate{note: fmt.Sprintf("%s: %d of %d fields listed (%d level%s deep): -all lists every one, a -depth other than %d changes the levels",
				root, len(paths), len(paths)+omitted, l.depth, plural(l.depth), l.depth)})
		case deeper:
			out = append(out, candidate{note: fmt.Sprintf("%s: fields listed %d level%s deep: -depth %d lists deeper ones", root, l.depth, plural(l.depth), l.depth+1)})
		}
	}
	if loc.Return || sc.Site == debuginfo.SiteReturn {
		var t dwarf.Type
		if len(sc.Results) > 0 && sc.Results[0].Err == nil {
			t = sc.Results[0].Type
		}
		if len(sc.Results) > 0 {
			add("$return", t)
		}
	}
	order := map[string]int{}
	for i, v := range sc.Vars {
		if _, ok := order[v.Name]; !ok {
			order[v.Name] = i
		}
	}
	// Innermost first, so that a name shadowed by an inner one is the
	// inner one; then in declaration order.
	seen := map[string]bool{}
	var vars []*debuginfo.Variable
	for i := len(sc.Vars) - 1; i >= 0; i-- {
		v := sc.Vars[i]
		if seen[v.Name] || (loc.Return && v.Kind != debuginfo.VarResult) {
			continue
		}
		seen[v.Name] = true
		vars = append(vars, v)
	}
	for i := 1; i < len(vars); i++ {
		for j := i; j > 0 && order[vars[j-1].Name] > order[vars[j].Name]; j-- {
			vars[j-1], vars[j] = vars[j], vars[j-1]
		}
	}
	for _, v := range vars {
		var t dwarf.Type
		if v.Err == nil {
			t = v.Type
		}
		add("$"+v.Name, t)
	}
	return out
}

// registers are the values offered without debuginfo: the first integer
// argument registers at entry (argN, and a Go string in two of them), the
// return value register at a return (retval, and a Go string result).
func (l *lister) registers(loc planner.Location, exit bool) []candidate {
	isGo, _ := l.in.Go()
	arch := l.in.Arch()
	args := arch.CIntArgs()
	abi := "the C calling convention"
	if isGo {
		args, abi = arch.GoIntArgs(), "Go's register ABI"
	}
	if exit {
		c := []candidate{{key: "ret", expr: "retval", what: fmt.Sprintf("the return value register (%%%s)", args[0])}}
		if isGo {
			c[0].what = fmt.Sprintf("the first result register (%%%s)", args[0])
			c = append(c, candidate{key: "ret.string", expr: "retval:gostring", what: fmt.Sprintf("a string result (%%%s, %%%s)", args[0], args[1])})
		}
		return c
	}
	if loc.USDT != nil {
		var c []candidate
		for n, a := range loc.USDT.Args {
			c = append(c, candidate{key: fmt.Sprintf("arg%d", n), expr: fmt.Sprintf("arg%d", n), what: describeArg(a)})
		}
		return c
	}
	var c []candidate
	for n := 0; n < 3 && n < len(args); n++ {
		c = append(c, candidate{key: fmt.Sprintf("arg%d", n), expr: fmt.Sprintf("arg%d", n), what: fmt.Sprintf("integer argument %d of %s (%%%s)", n, abi, args[n])})
	}
	if isGo {
		c = append(c, candidate{key: "arg0.string", expr: "arg0:gostring", what: fmt.Sprintf("a string in arguments 0 and 1 (%%%s, %%%s)", args[0], args[1])})
	}
	return c
}

// fieldPaths returns the steps from a value of type t to its fields, and
// to theirs, depth levels deep, through pointers and structs: "->id",
// "->hdr->len", "->inline.len" (Go writes "." for both: ".URL.Path"). At
// most limit (0: no limit) are returned, chosen breadth first (every
// field of the value before its fields' fields) and listed in declaration
// order; omitted is how many were left out, deeper whether fields lie
// below the last level. A struct itself is not listed (it is not one
// value), its fields are.
func fieldPaths(t dwarf.Type, goStyle bool, depth, limit int) (paths []string, omitted int, deeper bool) {
	type node struct {
		path     string
		t        dwarf.Type
		listable bool
		listed   bool
		children []*node
	}
	// maxNodes bounds the fields looked at, whatever the depth.
	const maxNodes = 20000
	root := &node{t: t}
	level := []*node{root}
	var levels [][]*node
	total := 0
	for d := 1; d <= depth && len(level) > 0 && total < maxNodes; d++ {
		var next []*node
		for _, n := range level {
			step, fields := structFields(n.t, goStyle)
			for _, f := range fields {
				inner, isStruct := strip(f.Type).(*dwarf.StructType)
				c := &node{path: n.path + step + f.Name, t: f.Type, listable: !isStruct || isValueStruct(inner)}
				n.children = append(n.children, c)
				next = append(next, c)
				total++
			}
		}
		levels = append(levels, next)
		level = next
	}
	for _, n := range level {
		if _, fields := structFields(n.t, goStyle); len(fields) > 0 {
			deeper = true
			break
		}
	}
	n := 0
	for _, lv := range levels {
		for _, c := range lv {
			if !c.listable {
				continue
			}
			if limit > 0 && n >= limit {
				omitted++
				continue
			}
			c.listed = true
			n++
		}
	}
	var walk func(*node)
	walk = func(n *node) {
		for _, c := range n.children {
			if c.listed {
				paths = append(paths, c.path)
			}
			walk(c)
		}
	}
	walk(root)
	return paths, omitted, deeper
}

// structFields returns the named fields of a struct, or of the struct a
// pointer points to, with the step that reaches them ("." or "->"); none
// for a union, an incomplete struct, and Go's strings and slices (read as
// values).
func structFields(t dwarf.Type, goStyle bool) (string, []*dwarf.StructField) {
	step := "."
	if p, ok := strip(t).(*dwarf.PtrType); ok {
		t, step = p.Type, "->"
	}
	if goStyle {
		step = "."
	}
	st, ok := strip(t).(*dwarf.StructType)
	if !ok || st.Kind == "union" || isValueStruct(st) || st.Incomplete {
		return step, nil
	}
	var out []*dwarf.StructField
	for _, f := range st.Field {
		if f.Name != "" {
			out = append(out, f)
		}
	}
	return step, out
}

// strip removes typedefs and qualifiers.
func strip(t dwarf.Type) dwarf.Type {
	for i := 0; i < 16 && t != nil; i++ {
		switch x := t.(type) {
		case *dwarf.TypedefType:
			t = x.Type
		case *dwarf.QualType:
			t = x.Type
		default:
			return t
		}
	}
	return t
}

// isValueStruct reports Go's string and slice headers, which are read as
// values, not as structs.
func isValueStruct(st *dwarf.StructType) bool {
	return st.StructName == "string" || strings.HasPrefix(st.StructName, "[]")
}

// attributeKey suggests an attribute key for a path: "$req->hdr->len"
// gives "req.hdr.len", "$return" "ret".
func attributeKey(p string) string {
	k := strings.TrimPrefix(p, "$")
	k = strings.ReplaceAll(k, "->", ".")
	if k == "return" {
		return "ret"
	}
	if r, ok := strings.CutPrefix(k, "return."); ok {
		return "ret." + r
	}
	return k
}
