package planner

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/hostile"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// listLocator finds the same files for every target, opened anew at each
// call (Resolve takes the Candidates).
type listLocator []string

func (l listLocator) Locate(config.Target) ([]Candidate, error) {
	var out []Candidate
	for _, p := range l {
		c, err := OpenPath(p)
		if err != nil {
			return nil, err
		}
		c.SeenAs = "/app"
		out = append(out, c)
	}
	return out, nil
}

// A target with several files (the host's, containers') keeps the ones it
// can plan; each other one is left out with its reason (a type of itself,
// a bomb, a parser's panic): on main one bad file failed Start for all.
// With no file it can plan, a target that is not optional still fails,
// with every reason; an optional one waits.
func TestBadFileHurtsOnlyItself(t *testing.T) {
	prog := hostile.Program(t)
	long := func(u *hostile.Unit) uint32 { return u.Base("long", 8) }
	bomb, err := hostile.Compressed(".debug_str", nil, 1<<30)
	require.NoError(t, err)
	good := hostile.WithType(t, prog, long)
	selfTypedef := hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Typedef("t", u.Next()) })
	bombed := hostile.WithType(t, prog, long, bomb)
	panics := hostile.WithType(t, prog, long)
	beforePlanning = func(path string) {
		if path == panics {
			panic("a parser's bug")
		}
	}
	t.Cleanup(func() { beforePlanning = func(string) {} })
	tg := config.Target{Path: "/app", Spans: []config.Span{{Name: "work", Function: "work", Attributes: map[string]string{"x": "$x"}}}}

	for _, order := range [][]string{{selfTypedef, good, bombed, panics}, {good, selfTypedef, bombed, panics}} {
		cands := listLocator(order)
		pl, err := Resolve([]config.Target{tg}, Options{Locator: cands, DebugDirs: []string{}})
		require.NoError(t, err)
		t.Cleanup(func() { pl.Close() })
		require.Len(t, pl.Files, 1)
		assert.Equal(t, good, pl.Files[0].Path)
		assert.Len(t, pl.Sites, 2, "entry and exit of work")
		reasons := map[string]error{}
		for _, u := range pl.Unplanned {
			reasons[u.Candidate.Path] = u.Err
		}
		require.Len(t, reasons, 3)
		assert.ErrorIs(t, reasons[selfTypedef], debuginfo.ErrMalformed)
		assert.ErrorIs(t, reasons[bombed], debuginfo.ErrOverBudget)
		assert.ErrorIs(t, reasons[panics], ErrPanic)
		assert.Contains(t, reasons[panics].Error(), "a parser's bug")
	}

	bad := listLocator{selfTypedef, bombed}
	_, err = Resolve([]config.Target{tg}, Options{Locator: bad, DebugDirs: []string{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a typedef refers back to itself")
	assert.Contains(t, err.Error(), "over the 134217728-byte budget")

	tg.Optional = true
	pl, err := Resolve([]config.Target{tg}, Options{Locator: bad, DebugDirs: []string{}})
	require.NoError(t, err)
	t.Cleanup(func() { pl.Close() })
	assert.Empty(t, pl.Files)
	assert.Len(t, pl.Unplanned, 2)
}

// The sites of a probe in a file, and the locations of a file, are
// bounded (max_sites_per_probe, max_sites_per_file, named in the error);
// copies of one note are one site.
func TestSiteCaps(t *testing.T) {
	prog := hostile.Program(t)
	apart := hostile.WithNotesApart(t, prog, 11, 0) // 11 copies: one site
	pl, err := Resolve([]config.Target{{Path: apart, Counters: config.CountersOf("usdt:hostile:tick")}}, Options{MaxSitesPerProbe: 1})
	require.NoError(t, err)
	assert.Len(t, pl.Attachments, 1)

	// 11 distinct sites: the nop of tick and the 10 bytes after it are
	// not all nops, so they are refused as sites; the count comes first.
	apart = hostile.WithNotesApart(t, prog, 11, 1)
	_, err = Resolve([]config.Target{{Path: apart, Counters: config.CountersOf("usdt:hostile:tick")}}, Options{MaxSitesPerProbe: 10})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrTooManySites)
	assert.Contains(t, err.Error(), "usdt:hostile:tick: 11 sites in this file, over max_sites_per_probe (10)")

	_, err = Resolve([]config.Target{{Path: apart, Counters: config.CountersOf("usdt:hostile:tick")}}, Options{MaxSitesPerFile: 10})
	require.Error(t, err)
	assert.ErrorIs(t, err, usdt.ErrTooManySites)
	assert.Contains(t, err.Error(), "more than 10 distinct USDT sites in the file (max_sites_per_file)")

	_, err = Resolve([]config.Target{{Path: prog, Counters: config.CountersOf("usdt:hostile:tick", "uprobe:work")}}, Options{MaxSitesPerFile: 1})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrTooManySites), "%v", err)
	assert.Contains(t, err.Error(), "2 probe locations, over max_sites_per_file (1)")
}
