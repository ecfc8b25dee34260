package receiver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// buildNamesTypeUnits is testutil.BuildNames at -O2 with the given DWARF
// version and -fdebug-types-section: gcc moves struct request, struct
// header and enum flags into type units (.debug_types at DWARF 4,
// DW_UT_type units of .debug_info at DWARF 5). The debuginfo is split
// into a build-id tree, as distributions ship it.
func buildNamesTypeUnits(t *testing.T, dwarfVersion string) testutil.NamesBuild {
	t.Helper()
	dir := t.TempDir()
	src := testutil.Testdata("names")
	b := testutil.NamesBuild{Program: filepath.Join(dir, "names"), DebugDir: filepath.Join(dir, "debug"), Source: filepath.Join(src, "names.c")}
	testutil.Gcc(t, dir, "-O2", dwarfVersion, "-fdebug-types-section", "-Wl,--build-id", "-o", b.Program,
		filepath.Join(src, "names.c"), filepath.Join(src, "calltree.c"))
	b.BuildID = testutil.BuildID(t, b.Program)
	b.DebugFile = filepath.Join(b.DebugDir, ".build-id", b.BuildID[:2], b.BuildID[2:]+".debug")
	require.NoError(t, os.MkdirAll(filepath.Dir(b.DebugFile), 0o755))
	testutil.Run(t, dir, "objcopy", "--only-keep-debug", b.Program, b.DebugFile)
	testutil.Run(t, dir, "strip", "--strip-debug", b.Program)
	testutil.Run(t, dir, "objcopy", "--add-gnu-debuglink="+b.DebugFile, b.Program)
	out, err := exec.Command("readelf", "--debug-dump=info", b.DebugFile).Output()
	require.NoError(t, err)
	units := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "Signature:") {
			units++
		}
	}
	require.GreaterOrEqual(t, units, 3, "struct request, struct header and enum flags in type units")
	return b
}

// C whose types live in type units (gcc -fdebug-types-section, DWARF 4
// and 5), its debuginfo split off into a build-id tree: every value read
// by name through them ($req->id, $req->path, $req->hdr->len,
// $req->hdr->name, the enum $flags by its enumerators' names, $$params at
// a line) is right on every call. Before, the paths through struct request
// were refused: types in type units were not read.
func TestNamesTypeUnits(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 30
	for _, version := range []string{"-gdwarf-4", "-gdwarf-5"} {
		t.Run(version, func(t *testing.T) {
			b := buildNamesTypeUnits(t, version)
			prog := testutil.StartProgram(t, b.Program, "ready")
			cfg := createDefaultConfig()
			cfg.Targets = namesTargets(b, t)
			cfg.DebugDirectories = []string{b.DebugDir}
			s := startReceiverConfig(t, cfg)
			require.Equal(t, "build-id "+b.DebugFile, s.rcv.plan.Files[0].DebugInfo)
			answer := prog.Ask(fmt.Sprintf("req %d", n), "req ")
			require.NotContains(t, answer, "MISMATCH")
			require.NoError(t, s.rcv.Shutdown(context.Background()))
			checkNames(t, allSpans(s.traces), n)
		})
	}
}
