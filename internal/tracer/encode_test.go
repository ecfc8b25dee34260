package tracer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

func TestRegistersOnly(t *testing.T) {
	reg := func(r regs.Register) plan.Fetch {
		return plan.Fetch{Base: plan.BaseRegister, Register: r, Store: plan.StoreInt, ReadSize: 8}
	}
	di, si := reg(regs.RDI), reg(regs.RSI)
	deref := reg(regs.RDI)
	deref.Derefs = []int64{8}
	indexed := reg(regs.RDI)
	indexed.Scale, indexed.Index = 8, regs.RSI
	str := reg(regs.RDI)
	str.Store = plan.StoreString
	constant := plan.Fetch{Base: plan.BaseConstant, Disp: 42, Store: plan.StoreInt}
	for _, tc := range []struct {
		name    string
		fetches []plan.Fetch
		want    bool
	}{
		{"none", nil, false},
		{"one argument", []plan.Fetch{di}, true},
		{"four registers", []plan.Fetch{di, si, di, si}, true},
		{"five registers", []plan.Fetch{di, si, di, si, di}, false},
		{"a dereference", []plan.Fetch{di, deref}, false},
		{"an index", []plan.Fetch{indexed}, false},
		{"a string", []plan.Fetch{str}, false},
		{"a constant", []plan.Fetch{constant}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, registersOnly(tc.fetches))
		})
	}
}

// sessionPlan is a plan of one file with a function span f (entry site 0
// at offset 0x100, return site 1) whose entry has a condition, and a span
// g without one (sites 2 and 3 at 0x200).
func sessionPlan() *plan.Plan {
	pl := &plan.Plan{
		Targets: []plan.PlannedTarget{{}},
		Probes: []plan.Probe{
			{Ref: "uprobe:f", Kind: config.KindUprobe}, {Ref: "uretprobe:f", Kind: config.KindUretprobe},
			{Ref: "uprobe:g", Kind: config.KindUprobe}, {Ref: "uretprobe:g", Kind: config.KindUretprobe},
		},
		Spans: []plan.SpanDef{{Name: "f", Entry: 0, Exit: 1, Function: true, SampleRatio: 1}, {Name: "g", Entry: 2, Exit: 3, Function: true, SampleRatio: 1}},
		Sites: []plan.Site{
			{Probe: 0, EntrySpan: 0, ExitSpan: -1, Filters: []plan.Filter{{}}},
			{Probe: 1, EntrySpan: -1, ExitSpan: 0},
			{Probe: 2, EntrySpan: 1, ExitSpan: -1},
			{Probe: 3, EntrySpan: -1, ExitSpan: 1},
		},
		Attachments: []plan.Attachment{
			{FileOffset: 0x100, Program: plan.ProgramSite, Cookie: 0, Probe: 0},
			{FileOffset: 0x100, Program: plan.ProgramSite, Cookie: 1, Probe: 1, Return: true},
			{FileOffset: 0x200, Program: plan.ProgramSite, Cookie: 2, Probe: 2},
			{FileOffset: 0x200, Program: plan.ProgramSite, Cookie: 3, Probe: 3, Return: true},
		},
	}
	pl.Files = []plan.File{{Sites: plan.Range{End: 4}, Attachments: plan.Range{End: 4}}}
	return pl
}

// Only the entry of a function span that may reject a call at entry,
// whose return does nothing but close it, attaches as a session uprobe.
func TestSessionPairs(t *testing.T) {
	pl := sessionPlan()
	assert.Equal(t, map[int]int{0: 1}, sessionPairs(pl, 0, true), "f's entry has a condition; g's has none")

	pl = sessionPlan()
	pl.Sites[1].ValueHist = 1 // its return also feeds a counter's histogram: it must see every call
	assert.Empty(t, sessionPairs(pl, 0, true))

	pl = sessionPlan()
	pl.Sites[0].Filters[0].AtExit = true // a condition at exit rejects nothing at entry
	assert.Empty(t, sessionPairs(pl, 0, true))

	pl = sessionPlan()
	pl.Targets[0].Chosen = true // a target that chooses its processes rejects the others' calls at entry
	assert.Equal(t, map[int]int{0: 1, 2: 3}, sessionPairs(pl, 0, true))

	pl = sessionPlan()
	pl.Spans[1].SampleRatio = 0.01 // head sampling may leave g's calls out at entry
	assert.Equal(t, map[int]int{0: 1, 2: 3}, sessionPairs(pl, 0, true))
	assert.Equal(t, map[int]int{0: 1}, sessionPairs(pl, 0, false), "without span records, nothing is sampled")

	pl = sessionPlan()
	pl.Files[0].Go = true // Go returns are RET sites
	assert.Empty(t, sessionPairs(pl, 0, true))

	pl = sessionPlan()
	pl.Attachments[1].FileOffset = 0x104 // not where the entry is
	assert.Empty(t, sessionPairs(pl, 0, true))
}

// plainSite picks the sites of plain spans, and the engine's plain_site
// (plainSpec, its Go twin) says the same of their encoded specs: a site the
// tracer attaches to the plain span program is never one that program
// refuses (it counts them in plain_refused and runs nothing).
func TestPlainSite(t *testing.T) {
	if bpfobj.Arch() != regs.ArchAMD64 {
		t.Skip("the table's registers are x86-64's")
	}
	reg := func(r regs.Register) plan.Fetch {
		return plan.Fetch{Base: plan.BaseRegister, Register: r, Store: plan.StoreInt, ReadSize: 8}
	}
	str := reg(regs.RDI)
	str.Store, str.MaxLen = plan.StoreString, 32
	base := func() *plan.Plan {
		pl := &plan.Plan{
			Targets: []plan.PlannedTarget{{}},
			Probes: []plan.Probe{
				{Ref: "uprobe:f", Kind: config.KindUprobe}, {Ref: "uretprobe:f", Kind: config.KindUretprobe},
			},
			Spans: []plan.SpanDef{{Name: "f", Entry: 0, Exit: 1, Function: true, SampleRatio: 1}},
			Sites: []plan.Site{
				{Probe: 0, EntrySpan: 0, ExitSpan: -1, Entry: []plan.Fetch{reg(regs.RDI)}},
				{Probe: 1, EntrySpan: -1, ExitSpan: 0, Exit: []plan.Fetch{reg(regs.RAX)}},
			},
		}
		pl.Files = []plan.File{{Arch: bpfobj.Arch(), Sites: plan.Range{End: 2}}}
		return pl
	}
	for _, tc := range []struct {
		name  string
		edit  func(pl *plan.Plan)
		entry bool // site 0 is plain
		exit  bool // site 1 is plain
	}{
		{"registers at both ends", func(*plan.Plan) {}, true, true},
		{"no attributes", func(pl *plan.Plan) { pl.Sites[0].Entry, pl.Sites[1].Exit = nil, nil }, true, true},
		{"a string attribute at entry", func(pl *plan.Plan) { pl.Sites[0].Entry = []plan.Fetch{str} }, false, true},
		{"five registers at exit", func(pl *plan.Plan) {
			r := reg(regs.RAX)
			pl.Sites[1].Exit = []plan.Fetch{r, r, r, r, r}
		}, true, false},
		{"a condition at entry", func(pl *plan.Plan) {
			pl.Sites[0].Filters = []plan.Filter{{Value: reg(regs.RDI), Cond: config.Condition{Raw: "arg0 < 10", Op: "<", Int: 10}}}
		}, false, true},
		{"a filtered counter", func(pl *plan.Plan) { pl.Sites[1].FilteredHits = true }, true, false},
		{"hits per process", func(pl *plan.Plan) { pl.Sites[0].PerProcess = true }, false, true},
		{"a value histogram", func(pl *plan.Plan) {
			v := reg(regs.RAX)
			pl.Sites[1].ValueHist, pl.Sites[1].HistValue = 1, &v
		}, true, false},
		{"a site that closes one span and opens the next", func(pl *plan.Plan) { pl.Sites[1].EntrySpan = 0 }, true, false},
		{"Go code", func(pl *plan.Plan) { pl.Files[0].Go = true }, false, false},
		{"a target that chooses its processes", func(pl *plan.Plan) { pl.Targets[0].Chosen = true }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := base()
			tc.edit(pl)
			for i, want := range []bool{tc.entry, tc.exit} {
				assert.Equal(t, want, plainSite(pl.Sites[i], pl), "site %d", i)
				enc, err := encodeSite(pl.Sites[i], pl)
				require.NoError(t, err)
				assert.Equal(t, want, plainSpec(enc), "site %d encoded", i)
			}
		})
	}
}

// The entry of a function span on a leaf function carries SiteLeaf and
// its bytes; another function's entry, and the site that closes the span,
// do not.
func TestEncodeLeaf(t *testing.T) {
	pl := sessionPlan()
	pl.Files[0].Arch = bpfobj.Arch()
	pl.Sites[0].LeafBytes = 12
	pl.Sites[0].Filters = nil
	for i, want := range []uint32{12, 0, 0, 0} {
		enc, err := encodeSite(pl.Sites[i], pl)
		require.NoError(t, err)
		assert.Equal(t, want, enc.LeafBytes, "site %d", i)
		assert.Equal(t, want != 0, enc.Flags&bpfobj.SiteLeaf != 0, "site %d", i)
	}
	pl.Spans[0].Function = false // a USDT pair's entry is no function's
	enc, err := encodeSite(pl.Sites[0], pl)
	require.NoError(t, err)
	assert.Zero(t, enc.Flags&bpfobj.SiteLeaf)
	assert.Zero(t, enc.LeafBytes)
}
