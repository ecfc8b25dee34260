package planner

import (
	"debug/elf"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// withDebug is the resolver's options for a build of testdata/names.
func withDebug(b testutil.NamesBuild) Options {
	return Options{DebugDirs: []string{b.DebugDir}}
}

// noDebug looks for debuginfo nowhere but in the file.
var noDebug = Options{DebugDirs: []string{}}

// namesSpan reads handle_request by name.
func namesSpan() config.Span {
	return config.Span{Function: "handle_request", Attributes: map[string]string{
		"id": "$req->id", "path": "$req->path", "len": "$req->hdr->len", "name": "$req->hdr->name",
		"hex": "$req->hdr->len:x16", "params": "$$params",
	}, ExitAttributes: map[string]string{"ret": "$return"}, StatusError: "$return < 0"}
}

// Names compile to the fetches the engine already runs, at -O0 (stack
// slots the prologue has not written yet: the SysV registers instead) and
// -O2 (location lists), from a build-id debug file.
func TestNamesCompile(t *testing.T) {
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildNames(t, opt)
			pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{namesSpan()}}}, withDebug(b))
			require.NoError(t, err)
			assert.Equal(t, "build-id "+b.DebugFile, pl.Files[0].DebugInfo)
			require.Len(t, pl.Spans, 1)
			assert.Equal(t, "handle_request", pl.Spans[0].Name, "named after the function")
			assert.True(t, pl.Spans[0].Function)
			require.Len(t, pl.Sites, 2)
			entry, exit := pl.Sites[0].Entry, pl.Sites[1].Exit

			assert.Equal(t, plan.Fetch{Key: "id", Text: "$req->id", Base: plan.BaseRegister, Register: regs.RDI, Derefs: []int64{0},
				Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindSigned, Size: 8}}}, fetchByKey(t, entry, "id"))
			assert.Equal(t, plan.Fetch{Key: "path", Text: "$req->path", Base: plan.BaseRegister, Register: regs.RDI, Derefs: []int64{8},
				Store: plan.StoreString, MaxLen: fetch.DefaultStringLen, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindString, MaxLen: fetch.DefaultStringLen}}},
				fetchByKey(t, entry, "path"), "char * is a string at the pointer")
			assert.Equal(t, plan.Fetch{Key: "len", Text: "$req->hdr->len", Base: plan.BaseRegister, Register: regs.RDI, Derefs: []int64{16, 0},
				Store: plan.StoreInt, ReadSize: 4, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindSigned, Size: 4}}}, fetchByKey(t, entry, "len"))
			assert.Equal(t, plan.Fetch{Key: "hex", Text: "$req->hdr->len:x16", Base: plan.BaseRegister, Register: regs.RDI, Derefs: []int64{16, 0},
				Store: plan.StoreInt, ReadSize: 2, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindHex, Size: 2}}}, fetchByKey(t, entry, "hex"), "a type suffix")
			assert.Equal(t, plan.Fetch{Key: "name", Text: "$req->hdr->name", Base: plan.BaseRegister, Register: regs.RDI, Derefs: []int64{16, 4}, LastIsAddress: true,
				Store: plan.StoreString, MaxLen: 17, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindString, MaxLen: 17}}},
				fetchByKey(t, entry, "name"), "char[16] is a string in place")
			flags := fetchByKey(t, entry, "params.flags")
			assert.Equal(t, regs.RSI, flags.Register)
			assert.Equal(t, fetch.Type{Kind: fetch.KindUnsigned, Size: 4}, flags.Value.Type)
			assert.Equal(t, []fetch.Enumerator{{Name: "FLAG_NONE", Value: 0}, {Name: "FLAG_READ", Value: 1}, {Name: "FLAG_WRITE", Value: 2}, {Name: "FLAG_SYNC", Value: 4}}, flags.Value.Enum)
			for key, reg := range map[string]regs.Register{"params.req": regs.RDI, "params.flags": regs.RSI, "params.count": regs.RDX} {
				f := fetchByKey(t, entry, key)
				assert.Equal(t, reg, f.Register, key)
				assert.Empty(t, f.Derefs, key)
			}
			assert.Len(t, entry, 8, "5 names and 3 parameters")

			ret := fetchByKey(t, exit, "ret")
			assert.Equal(t, plan.Fetch{Key: "ret", Text: "$return", Base: plan.BaseRegister, Register: regs.RAX,
				Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindSigned, Size: 4}}}, ret)
			status := exit[1]
			assert.Equal(t, plan.RoleStatus, status.Role)
			assert.Equal(t, regs.RAX, status.Register)
			assert.Empty(t, pl.Targets[0].Notes)
		})
	}
}

// A line probe is placed where the line table says the statement starts,
// checked like uprobe:SYM+0xOFF, and reads the variables in scope there.
func TestLineProbe(t *testing.T) {
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildNames(t, opt)
			line := testutil.MarkerLine(t, b.Source, "total")
			ref := fmt.Sprintf("line:names.c:%d", line)
			pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
				Name: "total", Entry: ref, Exit: "uretprobe:checksum",
				Attributes: map[string]string{"total": "$total", "req": "$req->id"},
			}}, Counters: config.CountersOf(fmt.Sprintf("line:testdata/names/names.c:%d", line))}}, withDebug(b))
			require.NoError(t, err)

			dbg, err := debuginfo.Open(t.Context(), b.Program, debuginfo.Options{DebugDirs: []string{b.DebugDir}})
			require.NoError(t, err)
			defer dbg.Close()
			sites, err := dbg.Lines("names.c", line)
			require.NoError(t, err)
			require.Len(t, sites, 1)
			entry := attachmentsOf(pl.Plan, probeIDs(pl.Plan)[ref])
			require.Len(t, entry, 1)
			assert.Equal(t, sites[0].Address, entry[0].Address, "the statement's first instruction")
			assert.Equal(t, "handle_request", sites[0].Function.Name)
			assert.True(t, entry[0].Class.Probeable())
			assert.NotEqual(t, insn.Unsupported, entry[0].Class)
			counter := attachmentsOf(pl.Plan, probeIDs(pl.Plan)[fmt.Sprintf("line:testdata/names/names.c:%d", line)])
			require.Len(t, counter, 1, "FILE is a path suffix")
			assert.Equal(t, entry[0].Address, counter[0].Address)
			assert.Equal(t, plan.ProgramCount, counter[0].Program)

			total := fetchByKey(t, pl.Sites[entry[0].Cookie].Entry, "total")
			assert.Equal(t, fetch.Type{Kind: fetch.KindSigned, Size: 4}, total.Value.Type)
			if opt == "-O0" {
				assert.Equal(t, regs.RBP, total.Register, "a frame slot at -O0")
				assert.Equal(t, []int64{-4}, total.Derefs)
			}
		})
	}
}

func TestLineProbeErrors(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	line := testutil.MarkerLine(t, b.Source, "total")
	resolve := func(opts Options, spans ...config.Span) error {
		_, err := Resolve([]config.Target{{Path: b.Program, Spans: spans}}, opts)
		return err
	}
	span := func(entry string, attrs map[string]string) config.Span {
		return config.Span{Name: "s", Entry: entry, Exit: "uretprobe:checksum", Attributes: attrs}
	}
	// A line without code names the nearest lines that have some.
	err := resolve(withDebug(b), span("line:names.c:1", nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line names.c:1 has no code (nearest line with code: ")
	// A file no line table names.
	err = resolve(withDebug(b), span("line:nosuch.c:10", nil))
	require.ErrorContains(t, err, `line nosuch.c:10: no line table of `+b.DebugFile+` names a file "nosuch.c": not found`)
	// Without debuginfo: where it was looked for.
	err = resolve(noDebug, span(fmt.Sprintf("line:names.c:%d", line), nil))
	require.ErrorContains(t, err, "a line probe needs the file's debuginfo: reading debuginfo: "+b.Program+": no debuginfo (looked in: "+b.Program)
	// A variable that has no value yet at the line: optimized out, named.
	err = resolve(withDebug(b), span(fmt.Sprintf("line:names.c:%d", line), map[string]string{"sum": "$sum"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `attribute "sum": function handle_request at line (pc `)
	assert.Contains(t, err.Error(), "$sum: local sum: the location list does not cover pc")
	assert.Contains(t, err.Error(), "optimized out here")
	// A name not in scope: the function, the variable and what is in scope.
	err = resolve(withDebug(b), span(fmt.Sprintf("line:names.c:%d", line), map[string]string{"x": "$nope"}))
	require.ErrorContains(t, err, `attribute "x": function handle_request at line (pc `)
	assert.Contains(t, err.Error(), `no variable "nope" (in scope: count, flags, req, sum, total): not found`)
}

func TestNamesErrors(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	resolve := func(opts Options, s config.Span) error {
		_, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{s}}}, opts)
		return err
	}
	for _, c := range []struct {
		name  string
		attrs map[string]string
		exit  map[string]string
		want  string
	}{
		{"unknown variable", map[string]string{"x": "$nope"}, nil,
			`attribute "x": function handle_request at entry: no variable "nope" (in scope: count, flags, req): not found`},
		{"unknown field", map[string]string{"x": "$req->nope"}, nil,
			`attribute "x": function handle_request at entry: $req->nope: $req: struct request has no field "nope" (fields: id, path, hdr): not found`},
		{"a struct", map[string]string{"x": "$req->hdr"}, nil, ""},
		{"the struct itself", map[string]string{"x": "$req[0]"}, nil,
			`attribute "x": function handle_request at entry: $req[0]: $req[0] (struct request (fields: id, path, hdr)): a struct: name one of its fields (id, path, hdr), or read it as bytes[24]: not directly fetchable`},
		{"parameters after the return", nil, map[string]string{"x": "$req->id"},
			`attribute "x": function handle_request at return: $req->id: parameter req: after the function returns (a uretprobe) its variables are gone; read them at its entry: optimized out here`},
		{"a longer string than the engine captures", map[string]string{"x": "$req->hdr->name:bytes[300]"}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := config.Span{Function: "handle_request", Attributes: c.attrs, ExitAttributes: c.exit}
			err := resolve(withDebug(b), s)
			if c.want == "" {
				if c.name == "a struct" {
					require.NoError(t, err, "a pointer to a struct is a hex pointer")
				} else {
					require.Error(t, err)
				}
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), `span "handle_request": u`)
		})
	}
	// Without debuginfo: what is missing and where it was looked for.
	err := resolve(noDebug, namesSpan())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "$names need the file's debuginfo: reading debuginfo: "+b.Program+": no debuginfo (looked in: "+b.Program)
	assert.Contains(t, err.Error(), "install the package's debug symbols, set DEBUGINFOD_URLS, or build with -g")
}

// Debuginfo is only opened for targets that use it: a plan of registers
// never looks for it (not even at a debuginfod server).
func TestNoDebuginfoWithoutNames(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	opts := Options{DebugDirs: []string{}, Debuginfod: &debuginfo.Debuginfod{URLs: []string{srv.URL}, CacheDir: t.TempDir()}}
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Function: "handle_request", Attributes: map[string]string{"req": "arg0"}, ExitAttributes: map[string]string{"ret": "retval:s32"},
	}}, Counters: config.CountersOf("usdt:names:request")}}, opts)
	require.NoError(t, err)
	assert.Empty(t, pl.Files[0].DebugInfo)
	assert.Zero(t, requests.Load())
}

// The debug file from a debuginfod server: downloaded once into the cache,
// then read from there.
func TestNamesFromDebuginfod(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path != "/buildid/"+b.BuildID+"/debuginfo" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, b.DebugFile)
	}))
	defer srv.Close()
	cache := t.TempDir()
	opts := Options{DebugDirs: []string{}, Debuginfod: &debuginfo.Debuginfod{URLs: []string{srv.URL}, CacheDir: cache}}
	for round := 1; round <= 2; round++ {
		pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{namesSpan()}}}, opts)
		require.NoError(t, err)
		assert.Equal(t, "debuginfod "+filepath.Join(cache, b.BuildID+".debug"), pl.Files[0].DebugInfo)
		assert.Equal(t, int64(1), requests.Load(), "round %d", round)
	}
}

// A function pattern is one span definition per matched function, bounded
// by max_functions; functions a span already traces keep it.
func TestFunctionPatterns(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	pattern := config.Span{Function: "ct_*", Attributes: map[string]string{"depth": "$depth", "nope": "$nope"}}
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{
		pattern,
		{Name: "explicit", Function: "ct_07"},
		{Name: "again.", Function: "ct_0?"},
	}}}, withDebug(b))
	require.NoError(t, err)
	require.Len(t, pl.Spans, 50, "ct_07 is traced once, by its explicit span")
	assert.Equal(t, "explicit", pl.Spans[0].Name, "spans as configured come first")
	assert.Empty(t, pl.Spans[0].Pattern)
	names := map[string]bool{}
	for i, s := range pl.Spans[1:] {
		assert.Equal(t, "ct_*", s.Pattern)
		assert.True(t, s.Function, s.Name)
		names[s.Name] = true
		if i > 0 {
			prev, cur := attachmentsOf(pl.Plan, pl.Spans[i].Entry), attachmentsOf(pl.Plan, s.Entry)
			assert.Less(t, prev[0].Address, cur[0].Address, "by address, as matched")
		}
	}
	assert.Len(t, names, 49)
	assert.False(t, names["ct_07"])
	assert.Contains(t, pl.Targets[0].Notes, `function pattern "ct_*": ct_07 left out: span "explicit" already traces it`)
	assert.Contains(t, pl.Targets[0].Notes, `function pattern "ct_0?": ct_00 left out: span "ct_00" already traces it`)
	for _, n := range pl.Targets[0].Notes {
		if strings.Contains(n, `attribute "nope"`) {
			assert.Contains(t, n, `no variable "nope" (in scope: depth): not found`)
		}
	}
	entry := pl.Sites[0]
	for _, s := range pl.Sites {
		if s.EntrySpan == 1 {
			entry = s
		}
	}
	require.Len(t, entry.Entry, 1, "a name the function lacks is left out of a pattern's span")
	assert.Equal(t, regs.RDI, entry.Entry[0].Register)

	// Bounded, with the count.
	limited := config.Span{Function: "ct_*", MaxFunctions: 49}
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{limited}}}, withDebug(b))
	require.ErrorContains(t, err, `function pattern "ct_*" matches 50 functions, more than max_functions (49): narrow the pattern (source_file: selects by source file) or raise max_functions`)
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Function: "*", SourceFile: "*/calltree.c", MaxFunctions: 10}}}}, withDebug(b))
	require.ErrorContains(t, err, `function pattern "*" in source_file "*/calltree.c" matches 50 functions, more than max_functions (10)`)
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Function: "zz_*"}}}}, withDebug(b))
	require.ErrorContains(t, err, `function pattern "zz_*" matches no function of the file`)

	// source_file selects through the DWARF, a name prefix names them.
	pl, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Name: "app.", Function: "*", SourceFile: "names.c"}}}}, withDebug(b))
	require.NoError(t, err)
	var got []string
	for _, s := range pl.Spans {
		got = append(got, s.Name)
	}
	assert.ElementsMatch(t, []string{"app.checksum", "app.note_thread", "app.sum10", "app.handle_request", "app.main"}, got, "static expect was inlined")

	// Without debuginfo a pattern matches the symbol table; source_file
	// needs the DWARF.
	pl, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Function: "ct_*"}}}}, noDebug)
	require.NoError(t, err)
	assert.Len(t, pl.Spans, 50)
	require.Len(t, pl.Targets[0].Notes, 1)
	assert.Contains(t, pl.Targets[0].Notes[0], `function pattern "ct_*": matched against the symbol table (reading debuginfo: `)
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Function: "ct_*", SourceFile: "calltree.c"}}}}, noDebug)
	require.ErrorContains(t, err, `function pattern "ct_*" in source_file "calltree.c": source_file: needs the file's debuginfo: reading debuginfo: `)
}

// $$params keeps what fits in a span end and notes the rest.
func TestParamsBeyondTheFetchLimit(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Function: "sum10", Attributes: map[string]string{"a": "$$params", "z": "$a9"},
	}}}}, withDebug(b))
	require.NoError(t, err)
	entry := pl.Sites[0].Entry
	var keys []string
	for _, f := range entry {
		keys = append(keys, f.Key)
	}
	assert.Equal(t, []string{"a.a0", "a.a1", "a.a2", "a.a3", "a.a4", "a.a5", "a.a6", "z"}, keys)
	assert.Equal(t, []int64{8}, fetchByKey(t, entry, "a.a6").Derefs, "a stack argument at the entry: 8(%rsp)")
	assert.Equal(t, regs.RSP, fetchByKey(t, entry, "a.a6").Register)
	assert.Equal(t, []int64{32}, fetchByKey(t, entry, "z").Derefs, "arg 9 at 32(%rsp)")
	assert.Contains(t, pl.Targets[0].Notes, `span "sum10": uprobe:sum10: attribute "a.a9" left out: more than 8 values at one span end`)
	assert.Contains(t, pl.Targets[0].Notes, `span "sum10": uprobe:sum10: attribute "a.a7" left out: more than 8 values at one span end`)
}

// Go: names through Go's DWARF at the entry (after the stack check) and at
// every RET; a binary without DWARF says so.
func TestNamesGo(t *testing.T) {
	bin := testutil.BuildGo(t, "names/goapp", false)
	pl, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{{
		Function:       "main.(*Server).Handle",
		Attributes:     map[string]string{"path": "$r.URL.Path", "tag": "$tag", "id": "$r->ID"},
		ExitAttributes: map[string]string{"ret": "$return"},
	}}}}, noDebug)
	require.NoError(t, err)
	assert.Equal(t, "embedded", pl.Files[0].DebugInfo)
	entry := pl.Sites[0].Entry
	assert.Equal(t, plan.Fetch{Key: "path", Text: "$r.URL.Path", Base: plan.BaseRegister, Register: regs.RBX, Derefs: []int64{16, 32}, LastIsAddress: true,
		Store: plan.StoreGoString, MaxLen: fetch.DefaultStringLen, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindGoString, MaxLen: fetch.DefaultStringLen}}},
		fetchByKey(t, entry, "path"))
	tag := fetchByKey(t, entry, "tag")
	assert.Equal(t, regs.RCX, tag.Register)
	assert.Equal(t, regs.RDI, tag.LenRegister)
	assert.Equal(t, plan.StoreGoString, tag.Store)
	require.Greater(t, len(pl.Sites), 1)
	for _, s := range pl.Sites[1:] {
		ret := fetchByKey(t, s.Exit, "ret")
		assert.Equal(t, regs.RAX, ret.Register, "the first result register at each RET")
		assert.Equal(t, fetch.Type{Kind: fetch.KindSigned, Size: 8}, ret.Value.Type)
	}

	stripped := testutil.BuildGo(t, "names/goapp", true)
	_, err = Resolve([]config.Target{{Path: stripped, Spans: []config.Span{{
		Function: "main.(*Server).Handle", Attributes: map[string]string{"tag": "$tag"},
	}}}}, noDebug)
	require.ErrorContains(t, err, "a Go binary linked with -ldflags=-w (or -s -w) carries no DWARF; build it without -w")
}

// C++ functions are selected and named by their demangled names; overloads
// keep their parameters apart.
func TestFunctionPatternsCPP(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		testutil.SkipOrFail(t, "g++ not found: run make deps")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	testutil.Run(t, dir, "g++", "-O1", "-g", "-o", bin, testutil.Testdata("debuginfo", "prog.cc"))
	pl, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{{
		Function: "srv::Server::handle*", Attributes: map[string]string{"this": "$this->port_"},
	}, {
		Name: "t.", Function: "srv::twice<*>",
	}}}}, noDebug)
	require.NoError(t, err)
	var names []string
	for _, s := range pl.Spans {
		names = append(names, s.Name)
		if strings.Contains(s.Name, "handle") {
			entry := pl.Sites[attachmentsOf(pl.Plan, s.Entry)[0].Cookie].Entry
			require.Len(t, entry, 1, s.Name)
			assert.Equal(t, []int64{0}, entry[0].Derefs, "$this->port_")
		}
	}
	assert.ElementsMatch(t, []string{
		"srv::Server::handle(srv::Request*)", "srv::Server::handle(int)", "t.srv::twice<long>", "t.srv::twice<int>",
	}, names)
	var refs []string
	for _, p := range pl.Probes {
		refs = append(refs, p.Ref)
	}
	// handle(Request*) calls printf in a C++ file: an exception may unwind
	// through it, so its returns are probed on its RET; the others call
	// nothing and keep their kernel return probes.
	assert.ElementsMatch(t, []string{
		"uprobe:_ZN3srv6Server6handleEPNS_7RequestE", "ret:_ZN3srv6Server6handleEPNS_7RequestE",
		"uprobe:_ZN3srv6Server6handleEi", "uretprobe:_ZN3srv6Server6handleEi",
		"uprobe:_ZN3srv5twiceIlEET_S1_", "uretprobe:_ZN3srv5twiceIlEET_S1_",
		"uprobe:_ZN3srv5twiceIiEET_S1_", "uretprobe:_ZN3srv5twiceIiEET_S1_",
	}, refs, "probes use the symbols")
}

// A pattern's function that calls itself closes at its RET instructions,
// as a function: span of it does (returns: auto).
func TestFunctionPatternRecursion(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Function: "recurs?"}}}}, noDebug)
	require.NoError(t, err)
	require.Len(t, pl.Spans, 1)
	assert.Equal(t, "recurse", pl.Spans[0].Name)
	assert.Equal(t, "ret:recurse", pl.Probes[pl.Spans[0].Exit].Ref)
	assert.True(t, pl.Spans[0].Function)
}

// $$params names its attributes KEY.NAME: they must not clash with other
// keys or with the attributes the receiver sets.
func TestParamsKeys(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	_, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Function: "handle_request", Attributes: map[string]string{"a": "$$params", "a.req": "$req->id"},
	}}}}, withDebug(b))
	require.ErrorContains(t, err, `attribute "a.req" is given twice (once by $$params)`)
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Function: "note_thread", Attributes: map[string]string{"thread": "$$params"},
	}}}}, withDebug(b))
	require.ErrorContains(t, err, `attribute "thread.id" (from $$params) is reserved: the receiver sets it on every span to the thread the span ended on; choose another key`)
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Function: "note_thread", Attributes: map[string]string{"args": "$$params"},
	}}}}, withDebug(b))
	require.NoError(t, err)
}

// Compressed debug sections are read: SHF_COMPRESSED with zlib or zstd, and
// the legacy .zdebug_* sections.
func TestNamesCompressedDebugFile(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	for _, how := range []string{"zlib", "zstd", "zlib-gnu"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			dst := filepath.Join(root, ".build-id", b.BuildID[:2], b.BuildID[2:]+".debug")
			require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			testutil.Run(t, root, "objcopy", "--compress-debug-sections="+how, b.DebugFile, dst)
			out, err := exec.Command("readelf", "-S", "-W", dst).Output()
			require.NoError(t, err)
			if how == "zlib-gnu" {
				require.Contains(t, string(out), ".zdebug_info")
			} else {
				require.Regexp(t, `\.debug_info .* C `, string(out), "SHF_COMPRESSED")
			}
			pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{namesSpan()}}}, Options{DebugDirs: []string{root}})
			require.NoError(t, err)
			assert.Equal(t, "build-id "+dst, pl.Files[0].DebugInfo)
			assert.Equal(t, []int64{16, 4}, fetchByKey(t, pl.Sites[0].Entry, "name").Derefs)
		})
	}
}

// The debug file that .gnu_debuglink names, next to the program.
func TestNamesFromDebuglink(t *testing.T) {
	b := testutil.BuildNames(t, "-O0")
	next := filepath.Join(filepath.Dir(b.Program), filepath.Base(b.DebugFile))
	data, err := os.ReadFile(b.DebugFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(next, data, 0o644))
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{namesSpan()}}}, noDebug)
	require.NoError(t, err)
	assert.Equal(t, "debuglink "+next, pl.Files[0].DebugInfo)

	// A debug file of another build is refused, not used.
	other := testutil.BuildNames(t, "-O2")
	data, err = os.ReadFile(other.DebugFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(next, data, 0o644))
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{namesSpan()}}}, noDebug)
	require.ErrorContains(t, err, "debuglink crc32 mismatch")
}

// A file stripped of its symbol table too (strip --strip-all, as Debian
// ships) has its functions in its separate debug file: function probes,
// patterns and names resolve through it, at the addresses the unstripped
// file gives.
func TestFunctionsFromTheDebugFile(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	want, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{namesSpan(), {Function: "ct_0*"}}}}, withDebug(b))
	require.NoError(t, err)
	testutil.Run(t, filepath.Dir(b.Program), "strip", "--strip-all", b.Program)
	f, err := elf.Open(b.Program)
	require.NoError(t, err)
	_, err = f.Symbols()
	require.ErrorIs(t, err, elf.ErrNoSymbols, "no .symtab left")
	require.NoError(t, f.Close())

	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Function: "ct_00"}}}}, noDebug)
	require.ErrorContains(t, err, "the file has no functions", "without its debug file")

	got, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{namesSpan(), {Function: "ct_0*"}}}}, withDebug(b))
	require.NoError(t, err)
	require.Len(t, got.Spans, len(want.Spans))
	for i := range want.Spans {
		assert.Equal(t, want.Spans[i].Name, got.Spans[i].Name)
		assert.Equal(t, attachmentsOf(want.Plan, want.Spans[i].Entry)[0].Address, attachmentsOf(got.Plan, got.Spans[i].Entry)[0].Address, want.Spans[i].Name)
	}
	assert.Equal(t, fetchByKey(t, want.Sites[0].Entry, "id"), fetchByKey(t, got.Sites[0].Entry, "id"))
}
