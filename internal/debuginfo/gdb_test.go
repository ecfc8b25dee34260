package debuginfo

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// gdbExpr writes what the engine computes for a as gdb expressions: the
// value v, and for a Go string its pointer and length.
func gdbExpr(a Access) (value, ptr, length string) {
	v := "0"
	if a.Register != regs.None {
		v = "(unsigned long)$" + a.Register.String()
	}
	v = fmt.Sprintf("(%s + %d)", v, a.Disp)
	for i, d := range a.Derefs {
		last := i == len(a.Derefs)-1
		addr := fmt.Sprintf("(%s + %d)", v, d)
		switch {
		case last && a.LastIsAddress:
			v = addr
		case last && a.Type.IsInteger():
			v = fmt.Sprintf("(unsigned long)*(%s *)%s", map[uint8]string{1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long"}[a.ReadSize], addr)
		default:
			v = fmt.Sprintf("*(unsigned long *)%s", addr)
		}
	}
	if a.Type.Kind == fetch.KindGoString {
		if len(a.Derefs) == 0 {
			return "", v, "(long)$" + a.LenRegister.String()
		}
		return "", "*(unsigned long *)" + v, fmt.Sprintf("*(long *)(%s + 8)", v)
	}
	return v, "", ""
}

// gdbPrintf formats a's value the way the receiver would show it, as
// value i of group g.
func gdbPrintf(g, i int, a Access) string {
	v, ptr, length := gdbExpr(a)
	switch a.Type.Kind {
	case fetch.KindString:
		return fmt.Sprintf(`printf "V%d.%d=%%s\n", (char *)%s`, g, i, v)
	case fetch.KindGoString:
		// Go strings have no NUL: print exactly length bytes.
		return fmt.Sprintf(`eval "printf \"V%d.%d=%%%%.%%lds\\n\", (char *)(%s)", (long)(%s)`, g, i, ptr, length)
	case fetch.KindSigned:
		c := map[uint8]string{1: "signed char", 2: "short", 4: "int", 8: "long"}[a.Type.Size]
		return fmt.Sprintf(`printf "V%d.%d=%%ld\n", (long)(%s)%s`, g, i, c, v)
	default:
		c := map[uint8]string{1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long"}[a.Type.Size]
		return fmt.Sprintf(`printf "V%d.%d=%%lu\n", (unsigned long)(%s)%s`, g, i, c, v)
	}
}

// gdbGroup is a set of probe addresses (link-time) that share accesses:
// the first of them to be hit answers.
type gdbGroup struct {
	pcs  []uint64
	accs []Access
}

// gdbRun runs bin under gdb once with a breakpoint on every pc of every
// group; the first hit of a group prints its accesses, computed as the
// engine computes them, and disables the group. It returns the values
// by group, and fails the test when a group was never hit.
func gdbRun(t *testing.T, f *File, bin string, args []string, groups []gdbGroup) [][]string {
	t.Helper()
	requireTool(t, "gdb")
	script := []string{"set pagination off", "set confirm off", "set width 0", "set language c",
		"handle SIGURG nostop noprint pass", "starti"}
	bias := "0"
	if f.Type == elf.ET_DYN {
		mainFn, err := f.Function("main")
		require.NoError(t, err)
		script = append(script, fmt.Sprintf("set $bias = (unsigned long)&main - %#x", mainFn.Entry))
		bias = "$bias"
	}
	bp := 0
	for g, grp := range groups {
		first := bp + 1
		for range grp.pcs {
			bp++
		}
		ids := make([]string, 0, len(grp.pcs))
		for i := first; i <= bp; i++ {
			ids = append(ids, strconv.Itoa(i))
		}
		for i, pc := range grp.pcs {
			script = append(script, fmt.Sprintf("break *(%s + %#x)", bias, pc))
			script = append(script, fmt.Sprintf("commands %d", first+i), "silent", fmt.Sprintf(`printf "G%d\n"`, g))
			for j, a := range grp.accs {
				script = append(script, gdbPrintf(g, j, a))
			}
			script = append(script, "disable "+strings.Join(ids, " "), "continue", "end")
		}
	}
	script = append(script, "continue")
	// gdb reads the commands of "commands" from its script, not from -ex:
	// write them to a file.
	file := t.TempDir() + "/script.gdb"
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(script, "\n")+"\n"), 0o644))
	cmd := exec.Command("gdb", append([]string{"-nx", "-batch", "-x", file, "--args", bin}, args...)...)
	// gdb's exit status is not checked: with Go's threads exiting at the
	// end it may report "Couldn't get registers" after every group was
	// hit. The groups' markers below are what counts.
	out, _ := cmd.CombinedOutput()
	vals := make([][]string, len(groups))
	hit := make([]bool, len(groups))
	for g := range groups {
		vals[g] = make([]string, len(groups[g].accs))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if n, err := strconv.Atoi(strings.TrimPrefix(line, "G")); strings.HasPrefix(line, "G") && err == nil && n < len(groups) {
			hit[n] = true
			continue
		}
		if !strings.HasPrefix(line, "V") {
			continue
		}
		k, v, ok := strings.Cut(line[1:], "=")
		gs, is, ok2 := strings.Cut(k, ".")
		g, err1 := strconv.Atoi(gs)
		i, err2 := strconv.Atoi(is)
		if ok && ok2 && err1 == nil && err2 == nil && g < len(vals) && i < len(vals[g]) {
			vals[g][i] = v
		}
	}
	for g := range groups {
		require.True(t, hit[g], "gdb never stopped at %x:\n%s", groups[g].pcs, out)
	}
	return vals
}

// runtimeCase is one probe site and the values its paths must read when
// the fixture runs with the argument "/x".
type runtimeCase struct {
	function string
	site     Site
	marker   string // for SiteLine: the LINE: marker
	want     map[string]string
	// optional lists paths that may fail to compile in optimized builds
	// (the value is optimized out there); when they compile, their value
	// must still be right.
	optional []string
}

var cRuntime = []runtimeCase{
	{function: "handle_request", site: SiteEntry, want: map[string]string{
		"$req->id": "6", "$req->path": "/x", "$req->hdr->name": "hdr", "$req->hdr->len": "2",
		"$req.hdr.len": "2", "$fl": "3", "$count": "2", "$req->port": "8080", "$req->prio": "-3",
		"$req->inline_hdr.name": "inl", "$req->inline_hdr.len": "5", "$req->codes[2]": "30",
		"$global_name": "fixture", "$global_counter": "0",
	}},
	{function: "handle_request", site: SiteReturn, want: map[string]string{"$return": "6"}},
	{function: "compute", site: SiteEntry, want: map[string]string{"$a": "2", "$b": "6"}},
	{function: "compute", site: SiteReturn, want: map[string]string{"$return": "5"}},
	{function: "sum_text", site: SiteEntry, want: map[string]string{"$text": "/x", "$text[1]": "120"}},
	{function: "sum_text", site: SiteLine, marker: "total", want: map[string]string{"$total": "0", "$c": "47", "$p": "/x", "$text": "/x"},
		optional: []string{"$c", "$text", "$total"}},
	{function: "by_value", site: SiteEntry, want: map[string]string{"$p.x": "2", "$p.y": "3", "$tag": "t", "$tag[0]": "116"}},
	{function: "many_args", site: SiteEntry, want: map[string]string{"$a": "2", "$f": "6", "$g": "7", "$h": "8"}},
	{function: "use_flags", site: SiteEntry, want: map[string]string{"$fl": "4"}},
	// Two inlined copies at -O2: twice(x) and twice(x + 1); GCC's line
	// table starts the first copy's line before the inlined call's range,
	// where v is not in scope (gdb agrees).
	{function: "call_twice", site: SiteLine, marker: "twice", want: map[string]string{"$v": "2|3", "$x": "2"}, optional: []string{"$v", "$x"}},
}

// tuRuntime are the values of typeunits.c, run with "/x", whose types
// live in type units in the -types builds.
var tuRuntime = []runtimeCase{
	{function: "handle", site: SiteEntry, want: map[string]string{
		"$req->id": "6", "$req->path": "/index", "$req->hdr->len": "7", "$req->hdr->name": "hdr", "$req->port": "8080",
		"$req->color": "4", "$req->inline_hdr.len": "5", "$req->inline_hdr.name": "inl", "$req->codes[3]": "40",
		"$req->hdrs[1].len": "11", "$req->hdrs[1].name": "second", "$req->pos.y": "-2", "$req->num.l": "1234",
		"$req->next->id": "99", "$req->next->port": "4242", "$req->grid[1][2]": "12", "$other->hdr->name": "hdr",
		"$other->color": "4", "$c": "2", "$pt.x": "1", "$pt.y": "2", "$n": "0",
		"$global_req.id": "6", "$global_req.hdrs[1].name": "second", "$global_req.next->port": "4242",
	}, optional: []string{"$pt.x"}}, // unused: clang -O2 drops it
	{function: "handle", site: SiteReturn, want: map[string]string{"$return": "1375"}},
	{function: "pick", site: SiteEntry, want: map[string]string{"$which": "0", "$req->inline_hdr.len": "5"}},
	{function: "pick", site: SiteReturn, want: map[string]string{"$return->len": "5", "$return->name": "inl"}},
}

var goRuntime = []runtimeCase{
	{function: "main.(*Server).Handle", site: SiteEntry, want: map[string]string{
		"$r.URL.Path": "/x", "$r.URL.Host": "h", "$r.Method": "GET", "$r.ID": "7", "$r.Flags": "5",
		"$s.Name": "srv", "$s.Handled": "0", "$tag": "t1", "$r.Body": "body", "$main.globalCount": "0",
	}},
	{function: "main.(*Server).Handle", site: SiteReturn, want: map[string]string{"$return": "202", "$status": "202", "$err": "0"}},
	{function: "main.Sum", site: SiteEntry, want: map[string]string{"$a": "1", "$b": "2", "$c": "3", "$name": "GET"}},
	{function: "main.Sum", site: SiteReturn, want: map[string]string{"$return": "9", "$~r1": "GET!"}},
	{function: "main.Sum", site: SiteLine, marker: "total", want: map[string]string{"$total": "6", "$name": "GET", "$a": "1"},
		optional: []string{"$name", "$a"}},
	{function: "main.Lookup", site: SiteEntry, want: map[string]string{"$keys": "2", "$i": "0", "$keys[1]": "/x"}},
}

// TestRuntimeAgainstGDB is the end-to-end check of compiled paths: it
// stops each fixture under gdb where a probe would fire, computes each
// Access the way the engine does (registers, displacement, dereferences,
// last-is-address, read size) with gdb expressions, and compares the value
// with what the program holds there.
func TestRuntimeAgainstGDB(t *testing.T) {
	if testing.Short() {
		testutil.SkipOrFail(t, "-short: runs every fixture under gdb")
	}
	type build struct {
		name  string
		cases []runtimeCase
		src   string
	}
	builds := []build{
		{"c-O0", cRuntime, "prog.c"}, {"c-O2", cRuntime, "prog.c"},
		{"c-O0-dwarf4", cRuntime, "prog.c"}, {"c-O2-dwarf4", cRuntime, "prog.c"},
		{"c-O2-nopie", cRuntime, "prog.c"}, {"c-O0-nopie", cRuntime, "prog.c"},
		{"clang-O0", cRuntime, "prog.c"}, {"clang-O2", cRuntime, "prog.c"},
		{"go-opt", goRuntime, "goprog/main.go"}, {"go-noopt", goRuntime, "goprog/main.go"},
		{"tu-gcc-O2-dwarf4", tuRuntime, "typeunits.c"}, {"tu-gcc-O2-dwarf4-types", tuRuntime, "typeunits.c"},
		{"tu-gcc-O0-dwarf5-types", tuRuntime, "typeunits.c"}, {"tu-g++-O2-dwarf5-types", tuRuntime, "typeunits.c"},
		{"tu-clang++-O2-dwarf4-types", tuRuntime, "typeunits.c"},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			bin := fixture(t, b.name)
			f := open(t, bin)
			type check struct {
				c     runtimeCase
				group int
			}
			var groups []gdbGroup
			var checks []check
			for _, c := range b.cases {
				fn, err := f.Function(c.function)
				require.NoError(t, err)
				var scopes []*Scope
				switch c.site {
				case SiteEntry:
					s, err := f.Scope(fn, 0, SiteEntry)
					require.NoError(t, err)
					scopes = append(scopes, s)
				case SiteReturn:
					for _, pc := range findRets(t, f, fn) {
						s, err := f.Scope(fn, pc, SiteReturn)
						require.NoError(t, err)
						scopes = append(scopes, s)
					}
				case SiteLine:
					sites, err := f.Lines(b.src, markerLine(t, b.src, c.marker))
					require.NoError(t, err)
					for _, site := range sites {
						s, err := f.Scope(site.Function, site.Address, SiteLine)
						require.NoError(t, err)
						scopes = append(scopes, s)
					}
				}
				require.NotEmpty(t, scopes, c.function)
				var paths []string
				for p := range c.want {
					paths = append(paths, p)
				}
				sort.Strings(paths)
				byPC := map[uint64][]Access{}
				for _, s := range scopes {
					for _, p := range paths {
						pp, err := fetch.ParsePath(p)
						require.NoError(t, err)
						a, err := s.Compile(pp)
						if err != nil {
							if !contains(c.optional, p) {
								t.Errorf("%s %s at %#x: %v", c.function, p, s.PC, err)
							}
							continue
						}
						byPC[s.PC] = append(byPC[s.PC], a)
					}
				}
				if c.site == SiteReturn {
					// Every RET gives the same registers; whichever runs
					// answers.
					first := byPC[scopes[0].PC]
					var pcs []uint64
					for _, s := range scopes {
						require.Equal(t, fmt.Sprint(first), fmt.Sprint(byPC[s.PC]), "returns at %#x and %#x", scopes[0].PC, s.PC)
						pcs = append(pcs, s.PC)
					}
					checks = append(checks, check{c, len(groups)})
					groups = append(groups, gdbGroup{pcs: pcs, accs: first})
					continue
				}
				for _, s := range scopes {
					if len(byPC[s.PC]) > 0 {
						checks = append(checks, check{c, len(groups)})
						groups = append(groups, gdbGroup{pcs: []uint64{s.PC}, accs: byPC[s.PC]})
					}
				}
			}
			vals := gdbRun(t, f, bin, []string{"/x"}, groups)
			checked := 0
			for _, ch := range checks {
				g := groups[ch.group]
				for i, a := range g.accs {
					assert.Contains(t, strings.Split(ch.c.want[a.Path], "|"), vals[ch.group][i], "%s %s: %s = %s at %#x", ch.c.function, ch.c.site, a.Path, a, g.pcs)
					checked++
				}
			}
			assert.Greater(t, checked, 20)
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
