package planner

import (
	"debug/elf"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// The entry site of a function span on a leaf function (lu: no call, no
// jump out of it) says how many bytes of the function follow it
// (plan.Site.LeafBytes), from the symbol table; a function that calls
// another (after), a USDT probe's site and a return's site say 0. Leaves
// are found in x86-64 code only.
func TestLeafBytes(t *testing.T) {
	bin := testutil.BuildC(t, "exactness", "-pthread")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	syms, err := f.Symbols()
	require.NoError(t, f.Close())
	require.NoError(t, err)
	symbol := map[string]elf.Symbol{}
	for _, s := range syms {
		symbol[s.Name] = s
	}

	targets := []config.Target{{Path: bin, Spans: []config.Span{
		{Name: "lu", Function: "lu"},
		{Name: "after", Function: "after"},
		{Name: "inner", Entry: "usdt:exactness:lu__start", Exit: "usdt:exactness:lu__done"},
	}}}
	require.NoError(t, config.Validate(targets))
	res, err := Resolve(targets)
	require.NoError(t, err)
	defer res.Close()
	pl := res.Plan

	spans := map[string]int{}
	for i, s := range pl.Spans {
		spans[s.Name] = i
	}
	address := map[uint64]uint64{} // site id: the address of its attachment
	for _, a := range pl.Attachments {
		address[a.Cookie] = a.Address
	}
	entries := 0
	for i, s := range pl.Sites {
		a := struct{ Address uint64 }{address[uint64(i)]}
		switch {
		case s.EntrySpan == spans["lu"]:
			entries++
			want := uint32(0)
			if runtime.GOARCH == "amd64" {
				lu := symbol["lu"]
				require.GreaterOrEqual(t, a.Address, lu.Value)
				want = uint32(lu.Value + lu.Size - a.Address)
			}
			assert.Equal(t, want, s.LeafBytes, "lu's entry, at %#x", a.Address)
		case s.EntrySpan >= 0:
			entries++
			assert.Zero(t, s.LeafBytes, "%s's entry", pl.Spans[s.EntrySpan].Name)
		default:
			assert.Zero(t, s.LeafBytes, "a site that only closes a span")
		}
	}
	assert.Equal(t, 3, entries)
}
