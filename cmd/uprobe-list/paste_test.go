//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver"
)

// offer is one thing a listing offers to paste: an item under a target's
// spans: or counters: (its head: "- function: NAME", or "- name:",
// "entry:", "exit:" lines), or one row of a span item's attributes: or
// exit_attributes: with the head of its item. Lines keep the listing's
// text, comments and continuation lines included.
type offer struct {
	section string   // "spans" or "counters"
	indent  int      // the item's "-" column
	head    []string // the item's lines before its attribute blocks
	field   []string // a row's block header ("attributes:  # TYPE …"), or nil
	row     []string // the row's lines, or nil
	line    int      // the listing's line number of the row or item, 1-based
}

func (o offer) String() string {
	lines := append(append(append([]string{}, o.head...), o.field...), o.row...)
	return fmt.Sprintf("line %d:\n%s", o.line, strings.Join(lines, "\n"))
}

// headKey identifies the item an offer belongs to: its section and its
// head's YAML, without comments.
func (o offer) headKey() string {
	k := o.section
	for _, l := range o.head {
		k += "\n" + yamlContent(l)
	}
	return k
}

// rowKey is the attribute key of a row.
func (o offer) rowKey() string {
	if o.row == nil {
		return ""
	}
	k, _, _ := strings.Cut(strings.TrimSpace(o.row[0]), ":")
	return k
}

// indentOf is the number of leading blanks.
func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// yamlContent is the text of a line before its comment.
func yamlContent(s string) string {
	t := strings.TrimSpace(s)
	if i := strings.Index(t, "  # "); i >= 0 && !strings.HasPrefix(t, "#") {
		t = strings.TrimSpace(t[:i])
	}
	return t
}

// offers parses a listing into what it offers: the items of every
// "spans:" and "counters:" block, and every row of their attributes: and
// exit_attributes: blocks. A line whose YAML ends with "\" continues on
// the next line (a wrapped double-quoted value). Comments are not offers.
func offers(listing string) []offer {
	lines := strings.Split(listing, "\n")
	// take returns line i and its continuation lines, and the index after.
	take := func(i int) ([]string, int) {
		out := []string{lines[i]}
		for strings.HasSuffix(yamlContent(lines[i]), `\`) && i+1 < len(lines) {
			i++
			out = append(out, lines[i])
		}
		return out, i + 1
	}
	var out []offer
	for i := 0; i < len(lines); {
		c := yamlContent(lines[i])
		if c != "spans:" && c != "counters:" {
			i++
			continue
		}
		section, blockIndent := strings.TrimSuffix(c, ":"), indentOf(lines[i])
		i++
		var item *offer
		var field []string
		fieldIndent := -1
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" && indentOf(lines[i]) > blockIndent {
			l, ind, c := lines[i], indentOf(lines[i]), yamlContent(lines[i])
			switch {
			case strings.HasPrefix(c, "#"):
				i++
			case strings.HasPrefix(c, "- "):
				ls, next := take(i)
				item = &offer{section: section, indent: ind, head: ls, line: i + 1}
				out = append(out, *item)
				field, fieldIndent = nil, -1
				i = next
			case item != nil && ind == item.indent+2 && (c == "attributes:" || c == "exit_attributes:"):
				field, fieldIndent = []string{l}, ind
				i++
			case item != nil && fieldIndent >= 0 && ind == fieldIndent+2:
				ls, next := take(i)
				out = append(out, offer{section: section, indent: item.indent, head: item.head, field: field, row: ls, line: i + 1})
				i = next
			case item != nil && ind == item.indent+2 && fieldIndent < 0:
				ls, next := take(i)
				item.head = append(item.head, ls...)
				out[len(out)-1].head = item.head // no row of the item yet
				i = next
			default:
				panic(fmt.Sprintf("listing line %d is no part of a block: %q", i+1, l))
			}
		}
	}
	return out
}

// pasteConfig is a collector configuration holding offers: the items of
// each section, each with the rows given, re-indented as pasted.
func pasteConfig(path string, items map[string][]offer, order []string) string {
	var b strings.Builder
	b.WriteString("receivers:\n  uprobe:\n    targets:\n      - path: " + fmt.Sprintf("%q", path) + "\n")
	const itemIndent = 10
	shift := func(s string, by int) string {
		if by >= 0 {
			return strings.Repeat(" ", by) + s
		}
		return s[-by:]
	}
	for _, section := range []string{"spans", "counters"} {
		wrote := false
		for _, key := range order {
			os := items[key]
			if os[0].section != section {
				continue
			}
			if !wrote {
				b.WriteString("        " + section + ":\n")
				wrote = true
			}
			by := itemIndent - os[0].indent
			for _, l := range os[0].head {
				b.WriteString(shift(l, by) + "\n")
			}
			byField := map[string][]offer{}
			var fields []string
			for _, o := range os {
				if o.row == nil {
					continue
				}
				f := o.field[0]
				if _, ok := byField[f]; !ok {
					fields = append(fields, f)
				}
				byField[f] = append(byField[f], o)
			}
			for _, f := range fields {
				b.WriteString(shift(f, by) + "\n")
				for _, o := range byField[f] {
					for _, l := range o.row {
						b.WriteString(shift(l, by) + "\n")
					}
				}
			}
		}
	}
	return b.String()
}

// startOptions are the planner's options as the receiver's Start sets
// them on this machine, for a configuration's receiver.
func startOptions(cfg *receiver.Config) planner.Options {
	refused := ""
	if res := tracer.CheckUretprobeSeccomp(); res.Hazard {
		refused = "kernel return probes kill processes with seccomp filters here: " + res.Reason
	}
	return planner.Options{
		OptimizedUprobes: tracer.HaveOptimizedUprobes(), ARM64StepsNop: tracer.ARM64StepsNop(),
		KernelReturnsRefused: refused, Arch: tracer.Arch(), Locator: planner.HostLocator{},
		DebugDirs: cfg.DebugDirectories, MaxDebuginfoBytes: cfg.MaxDebuginfoBytes,
		MaxSitesPerProbe: cfg.MaxSitesPerProbe, MaxSitesPerFile: cfg.MaxSitesPerFile,
	}
}

// yamlProvider serves one configuration file to a confmap.Resolver.
type yamlProvider struct{ text string }

func (p yamlProvider) Retrieve(context.Context, string, confmap.WatcherFunc) (*confmap.Retrieved, error) {
	return confmap.NewRetrievedFromYAML([]byte(p.text))
}
func (yamlProvider) Scheme() string                 { return "paste" }
func (yamlProvider) Shutdown(context.Context) error { return nil }

// startAccepts loads a collector configuration as the collector does
// (resolved with its $$ escapes, the receiver's section unmarshalled over
// the factory's default configuration with unknown keys refused,
// validated) and resolves its targets as the receiver's Start does, on
// the files of this machine. It needs no kernel: nothing is attached.
func startAccepts(text string) error {
	res, err := confmap.NewResolver(confmap.ResolverSettings{
		URIs: []string{"paste:config"},
		ProviderFactories: []confmap.ProviderFactory{
			confmap.NewProviderFactory(func(confmap.ProviderSettings) confmap.Provider { return yamlProvider{text} }),
		},
	})
	if err != nil {
		return err
	}
	conf, err := res.Resolve(context.Background())
	if err != nil {
		return fmt.Errorf("resolving: %w", err)
	}
	sub, err := conf.Sub("receivers::uprobe")
	if err != nil {
		return err
	}
	cfg := receiver.NewFactory().CreateDefaultConfig().(*receiver.Config)
	if err := sub.Unmarshal(cfg); err != nil {
		return fmt.Errorf("unmarshalling: %w", err)
	}
	if err := confmap.Validate(cfg); err != nil {
		return fmt.Errorf("validating: %w", err)
	}
	pl, err := planner.Resolve(cfg.Targets, startOptions(cfg))
	if err != nil {
		return fmt.Errorf("resolving targets: %w", err)
	}
	if len(pl.Unplanned) > 0 {
		err = fmt.Errorf("left out: %v", pl.Unplanned[0].Err)
	}
	pl.Close()
	return err
}

// pasteResult counts what a paste test did.
type pasteResult struct {
	offers, configs, batches int
	refused                  []string
}

// pasteAll pastes every offer of listings of path into collector
// configurations and checks that Start would accept each: offers are
// batched into configurations (an item at most once per configuration, at
// most maxRows rows per block, no attribute key twice, $$params alone), a
// refused batch is split until the refused offers are found alone.
func pasteAll(t *testing.T, path string, all []offer) pasteResult {
	t.Helper()
	const maxItems, maxRows = 1000, 8
	var res pasteResult
	res.offers = len(all)
	// Group by item.
	byItem := map[string][]offer{}
	var order []string
	for _, o := range all {
		k := o.headKey()
		if _, ok := byItem[k]; !ok {
			order = append(order, k)
		}
		byItem[k] = append(byItem[k], o)
	}
	// Batches: each a set of items with some of their rows.
	type batch struct {
		items map[string][]offer
		order []string
	}
	var batches []*batch
	newBatch := func() *batch { b := &batch{items: map[string][]offer{}}; batches = append(batches, b); return b }
	for _, k := range order {
		os := byItem[k]
		// Split the item's offers into groups that fit one item.
		var groups [][]offer
		var cur []offer
		keys, rows := map[string]bool{}, map[string]int{}
		for _, o := range os {
			if o.row == nil {
				continue
			}
			f := o.field[0]
			params := strings.Contains(strings.Join(o.row, ""), "$$params")
			if params {
				groups = append(groups, []offer{o})
				continue
			}
			if keys[f+o.rowKey()] || rows[f] >= maxRows {
				groups = append(groups, cur)
				cur, keys, rows = nil, map[string]bool{}, map[string]int{}
			}
			cur = append(cur, o)
			keys[f+o.rowKey()] = true
			rows[f]++
		}
		if cur != nil || len(groups) == 0 {
			groups = append(groups, cur)
		}
		for _, g := range groups {
			item := append([]offer{{section: os[0].section, indent: os[0].indent, head: os[0].head, line: os[0].line}}, g...)
			// A group goes to the first batch with room that does not
			// hold its item yet: an item is in a batch at most once.
			var b *batch
			for _, cand := range batches {
				if _, ok := cand.items[k]; !ok && len(cand.order) < maxItems {
					b = cand
					break
				}
			}
			if b == nil {
				b = newBatch()
			}
			b.items[k] = item
			b.order = append(b.order, k)
		}
	}
	var try func(items map[string][]offer, order []string) bool
	try = func(items map[string][]offer, order []string) bool {
		res.configs++
		text := pasteConfig(path, items, order)
		err := startAccepts(text)
		if err == nil {
			return true
		}
		if testing.Verbose() {
			t.Logf("a batch of %d items refused, split: %.300v", len(order), err)
		}
		n := 0
		for _, k := range order {
			n += len(items[k])
		}
		if n <= 1 || (len(order) == 1 && len(items[order[0]]) <= 2) {
			res.refused = append(res.refused, fmt.Sprintf("%s\nrefused: %v\nconfiguration:\n%s", items[order[0]][len(items[order[0]])-1], err, text))
			return false
		}
		if len(order) > 1 {
			// Items of a batch may conflict (a probe closes one span:
			// the return of a function that a USDT span also ends at);
			// each must be accepted alone.
			h := len(order) / 2
			a := try(items, order[:h])
			return try(items, order[h:]) && a
		}
		// One item with several rows: each row alone. Rows that are
		// accepted alone must be accepted together, as the item's blocks
		// paste whole (at most maxRows per block).
		k := order[0]
		alone := true
		for _, o := range items[k][1:] {
			alone = try(map[string][]offer{k: {items[k][0], o}}, order) && alone
		}
		if alone {
			res.refused = append(res.refused, fmt.Sprintf("rows of one span item, each accepted, refused together: %v\nconfiguration:\n%s", err, text))
		}
		return false
	}
	for _, b := range batches {
		try(b.items, b.order)
	}
	res.batches = len(batches)
	sort.Strings(res.refused)
	return res
}

// TestOffersParse: the parser takes items, their head lines, rows with
// their block, wrapped values and comments as the listing writes them.
func TestOffersParse(t *testing.T) {
	listing := `file x
  spans:                 # ENTRY  RETURN
    - function: a        # +0x0   uretprobe
    # b                  # not probeable
    - function: "c\
        d"
                         # +0x0   RET
  spans:
    - function: f
      attributes:        # TYPE  READ AS
        x: $x            # int   s32 %rdi
        # $y: not readable here
        params: $$$$params  # every parameter
      exit_attributes:
        ret: $return
  counters:
    - usdt:p:n
  spans:
    - name: n
      entry: usdt:p:n
      exit: "uretprobe:g"
      attributes:
        arg0: arg0
`
	got := offers(listing)
	var texts []string
	for _, o := range got {
		texts = append(texts, fmt.Sprintf("%s %d %q %q %q", o.section, o.line, o.head, o.field, o.row))
	}
	require.Equal(t, []string{
		`spans 3 ["    - function: a        # +0x0   uretprobe"] [] []`,
		`spans 5 ["    - function: \"c\\" "        d\""] [] []`,
		`spans 9 ["    - function: f"] [] []`,
		`spans 11 ["    - function: f"] ["      attributes:        # TYPE  READ AS"] ["        x: $x            # int   s32 %rdi"]`,
		`spans 13 ["    - function: f"] ["      attributes:        # TYPE  READ AS"] ["        params: $$$$params  # every parameter"]`,
		`spans 15 ["    - function: f"] ["      exit_attributes:"] ["        ret: $return"]`,
		`counters 17 ["    - usdt:p:n"] [] []`,
		`spans 19 ["    - name: n" "      entry: usdt:p:n" "      exit: \"uretprobe:g\""] [] []`,
		`spans 23 ["    - name: n" "      entry: usdt:p:n" "      exit: \"uretprobe:g\""] ["      attributes:"] ["        arg0: arg0"]`,
	}, texts)
}

// libcPath is the C library the paste test lists with its debug symbols
// (libc6-dbg).
const libcPath = "/lib/x86_64-linux-gnu/libc.so.6"

// listing is one run of the browser that a paste test pastes.
type listing struct {
	args []string
	// want are lines the listing must hold (after trimming).
	want []string
}

// pasteListings runs listings of path at width 120, checks their widths
// and what they must hold, and pastes every offer they make.
func pasteListings(t *testing.T, path string, ls []listing) pasteResult {
	t.Helper()
	var all []offer
	seen := map[string]bool{}
	for _, l := range ls {
		args := append([]string{"-width", "120"}, l.args...)
		out, errOut, code := list(t, args...)
		require.Equal(t, 0, code, "uprobe-list %s: %s", strings.Join(args, " "), errOut)
		lines := strings.Split(out, "\n")
		for n, line := range lines {
			require.LessOrEqual(t, cols(line), 120, "uprobe-list %s: line %d is %d columns wide: %q", strings.Join(args, " "), n+1, cols(line), line)
		}
		trimmed := map[string]bool{}
		for _, line := range lines {
			trimmed[yamlContent(line)] = true
		}
		for _, w := range l.want {
			require.True(t, trimmed[w], "uprobe-list %s offers %q", strings.Join(args, " "), w)
		}
		for _, o := range offers(out) {
			if k := o.String()[strings.Index(o.String(), "\n"):]; !seen[k] {
				seen[k] = true
				all = append(all, o)
			}
		}
	}
	require.NotEmpty(t, all)
	res := pasteAll(t, path, all)
	for _, r := range res.refused {
		t.Errorf("offered but refused: %s", r)
	}
	t.Logf("%s: %d lines offered, pasted in %d collector configurations (%d batches): %d refused", path, res.offers, res.configs, res.batches, len(res.refused))
	return res
}

// Every line a listing of glibc offers, with libc6-dbg's symbols and
// DWARF, pastes into a configuration Start accepts: the whole-file
// listing (7,170 functions on Debian 12), functions in detail (a struct
// result in a register: div; fileops.c by source file, as Debian's
// relative compile units spell it and with "*/").
func TestPasteLibc(t *testing.T) {
	requireLibcDbg(t)
	pasteListings(t, libcPath, []listing{
		{args: []string{libcPath}},
		{args: []string{libcPath, "div"}, want: []string{"ret.quot: $return.quot", "# $return.rem: not readable here: byte 4 of a value held in a register: location too complex"}},
		{args: []string{"-source-file", "*/libio/fileops.c", libcPath}},
		{args: []string{"-source-file", "libio/fileops.c", libcPath, "_IO_new_file_*"}},
		{args: []string{libcPath, "malloc"}},
		{args: []string{libcPath, "qsort*"}},
	})
}

// requireLibcDbg skips (fails in CI) without glibc's debug symbols.
func requireLibcDbg(t *testing.T) {
	t.Helper()
	in, err := planner.Inspect(libcPath, planner.Options{DebugDirs: []string{"/usr/lib/debug"}})
	if err == nil {
		defer in.Close()
		if _, err = in.Debug(); err == nil {
			return
		}
	}
	testutil.SkipOrFail(t, "%s with its debug symbols (libc6-dbg): %v", libcPath, err)
}

// sourceLine returns the 1-based line of path that holds text.
func sourceLine(t *testing.T, path, text string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for n, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			return n + 1
		}
	}
	t.Fatalf("%s holds no %q", path, text)
	return 0
}

// Every line the demo's listings offer pastes into a configuration Start
// accepts: the program and its library whole, every function and every
// USDT probe in detail, a line.
func TestPasteDemo(t *testing.T) {
	demo := testutil.BuildDemo(t, "-O2")
	line := sourceLine(t, testutil.Testdata("demo", "demo.c"), "work(i, query);")
	for _, path := range []string{demo.Program, demo.Library} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ls := []listing{{args: []string{path}}, {args: []string{"-all", path, "*"}}}
			in, err := planner.Inspect(path, planner.Options{})
			require.NoError(t, err)
			for _, p := range in.USDT() {
				ls = append(ls, listing{args: []string{path, "usdt:" + p.String()}})
			}
			in.Close()
			if path == demo.Program {
				ls = append(ls, listing{args: []string{path, fmt.Sprintf("demo.c:%d", line)}, want: []string{"query: $query", "entry: line:demo.c:" + fmt.Sprint(line)}})
				ls[len(ls)-1].want = append(ls[len(ls)-1].want, "exit: uretprobe:run_query")
			}
			pasteListings(t, path, ls)
		})
	}
}

// Every line the listings of a Go HTTP server offer pastes into a
// configuration Start accepts: the whole file (net/http, crypto/tls and
// the generic instantiations of the standard library), its own functions
// in detail, a handler's *http.Request past its 32nd field, generic
// functions by their exact names, a struct result; stripped, its string
// result through retval:gostring.
func TestPasteGoServer(t *testing.T) {
	t.Run("debuginfo", func(t *testing.T) {
		bin := testutil.BuildGo(t, "httpserver", false)
		pasteListings(t, bin, []listing{
			{args: []string{bin}},
			{args: []string{"-all", bin, "main.*"}, want: []string{
				"r.Host: $r.Host", "r.RemoteAddr: $r.RemoteAddr", "ret.Quot: $return.Quot", "ret.Rem: $return.Rem", "ret: $return",
			}},
			{args: []string{bin, "main.Keys[go.shape.string,go.shape.[]string]"}, want: []string{"- function: main.Keys[go.shape.string,go.shape.[]string]"}},
			{args: []string{bin, "main.Sum[go.shape.int]"}, want: []string{"- function: main.Sum[go.shape.int]"}},
			{args: []string{bin, "net/http.serverHandler.ServeHTTP"}, want: []string{"req.Host: $req.Host", "req.RemoteAddr: $req.RemoteAddr"}},
			{args: []string{"-depth", "1", bin, "net/http.(*conn).serve"}},
			{args: []string{"-source-file", "net/url", bin, "*.(*URL).*"}},
		})
	})
	t.Run("stripped", func(t *testing.T) {
		bin := testutil.BuildGo(t, "httpserver", true)
		pasteListings(t, bin, []listing{
			{args: []string{bin}},
			{args: []string{"-all", bin, "main.*"}, want: []string{"ret.string: retval:gostring", "arg0.string: arg0:gostring", "arg0: arg0"}},
		})
	})
}
