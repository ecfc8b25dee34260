package planner

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/testconfig"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// demoTargets is the configuration of receiver/e2e_test.go.
var demoTargets = testconfig.DemoTargets

// symbol is a symbol of an ELF file, with the file offset of its first byte
// computed through its section (not through the program headers, as the
// resolver does).
type symbol struct {
	elf.Symbol
	FileOffset uint64
}

// lookup finds a defined symbol by name in the symbol table of path.
func lookup(t *testing.T, path, name string) symbol {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name != name || s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		require.True(t, s.Value >= sec.Addr && s.Value < sec.Addr+sec.Size, "%s is inside %s", name, sec.Name)
		return symbol{Symbol: s, FileOffset: s.Value - sec.Addr + sec.Offset}
	}
	t.Fatalf("no symbol %q in %s", name, path)
	return symbol{}
}

// notes returns the USDT probes of path by "provider:name".
func notes(t *testing.T, path string) map[string]usdt.Probe {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	probes, err := usdt.Probes(f)
	require.NoError(t, err)
	out := map[string]usdt.Probe{}
	for _, p := range probes {
		out[p.String()] = p
	}
	return out
}

// probeIDs maps probe references to their ids in the plan.
func probeIDs(plan *plan.Plan) map[string]int {
	m := map[string]int{}
	for i, p := range plan.Probes {
		m[p.Ref] = i
	}
	return m
}

// attachmentsOf returns the attachments of probe id, in plan order.
func attachmentsOf(pl *plan.Plan, id int) []plan.Attachment {
	var out []plan.Attachment
	for _, a := range pl.Attachments {
		if a.Probe == id {
			out = append(out, a)
		}
	}
	return out
}

// fetchByKey returns the fetch of key among fs.
func fetchByKey(t *testing.T, fs []plan.Fetch, key string) plan.Fetch {
	t.Helper()
	for _, f := range fs {
		if f.Key == key {
			return f
		}
	}
	t.Fatalf("no fetch %q among %d", key, len(fs))
	return plan.Fetch{}
}

// idOf returns the identity of the file at path, as the resolver records it.
func idOf(t *testing.T, path string) procfs.FileVersion {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	id, err := procfs.VersionOf(f)
	require.NoError(t, err)
	return id
}
