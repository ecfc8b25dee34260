package threadctx

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/ctxfixture"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// where asks the fixture for its main thread's thread pointer and the
// address of its otel_thread_ctx_v1.
func where(t *testing.T, p *testutil.Program) (tp, addr uint64) {
	t.Helper()
	f := strings.Fields(p.Ask("where", "where "))
	require.Len(t, f, 3)
	tp, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
	require.NoError(t, err)
	addr, err = strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
	require.NoError(t, err)
	return tp, addr
}

// variableAt finds the variable of a thread with thread pointer tp as the
// engine does (bpf/engine.bpf.c: thread_ctx_read and thread_ctx_dtv).
func variableAt(t *testing.T, mem Memory, a Access, tp uint64) uint64 {
	t.Helper()
	if a.Mode == ModeStatic {
		return tp + uint64(a.Offset)
	}
	dtvAt := tp
	if runtime.GOARCH == "amd64" {
		dtvAt += 8
	}
	w, err := readWords(mem, dtvAt, 1)
	require.NoError(t, err)
	n, err := readWords(mem, w[0]-16, 1)
	require.NoError(t, err)
	require.LessOrEqual(t, a.ModuleID, n[0], "the module's entry is in the thread's DTV")
	block, err := readWords(mem, w[0]+16*a.ModuleID, 1)
	require.NoError(t, err)
	require.NotContains(t, []uint64{0, ^uint64(0)}, block[0], "the thread has a block for the module")
	return block[0] + uint64(a.Offset)
}

// Every variant of the fixture: Find names the mode the SDK's build gives
// and an access that leads to the very address of the thread's variable.
func TestFindInEveryVariant(t *testing.T) {
	testutil.RequireRoot(t)
	want := map[string]struct {
		mode Mode
		how  string
	}{
		"exe":         {ModeStatic, "static TLS of the executable"},
		"gnu2":        {ModeStatic, "TLSDESC"},
		"gnu":         {ModeDTV, "general dynamic"},
		"ie":          {ModeStatic, "initial-exec"},
		"dlopen-gnu2": {ModeStatic, "TLSDESC"},
		"dlopen-gnu":  {ModeDTV, "general dynamic"},
	}
	for _, v := range ctxfixture.Variants {
		t.Run(v.Name, func(t *testing.T) {
			p := testutil.StartProgram(t, testutil.BuildThreadCtx(t, v.Name), "ready")
			var f Finder
			if v.DLOpen {
				res, err := f.Find(p.PID, false)
				require.NoError(t, err)
				assert.False(t, res.Found, "nothing defines the variable before dlopen")
				p.Ask("open", "opened")
			}
			tp, addr := where(t, p)
			res, err := f.Find(p.PID, false)
			require.NoError(t, err)
			require.True(t, res.Found)
			a := res.Access
			assert.Equal(t, want[v.Name].mode, a.Mode, a.How)
			assert.Contains(t, a.How, want[v.Name].how)
			if v.Model == "" {
				assert.Equal(t, "exe", map[bool]string{true: "exe"}[strings.HasSuffix(a.Module, ctxfixture.App)])
			} else {
				assert.True(t, strings.HasSuffix(a.Module, ctxfixture.Lib), a.Module)
			}
			mem := procfs.ProcessMemory{PID: p.PID}
			assert.Equal(t, fmt.Sprintf("%#x", addr), fmt.Sprintf("%#x", variableAt(t, mem, a, tp)))
		})
	}
}

// A process without the SDK has no variable; its process context, when it
// publishes one, still reads.
func TestFindProcessContext(t *testing.T) {
	testutil.RequireRoot(t)
	p := testutil.StartProgram(t, testutil.BuildThreadCtx(t, "dlopen-gnu2"), "ready")
	var f Finder
	res, err := f.Find(p.PID, true)
	require.NoError(t, err)
	assert.False(t, res.Found)
	assert.Nil(t, res.Context, "no process context yet")
	assert.Positive(t, res.Files)
	p.Ask("open", "opened")
	p.Ask("attrs 1 5", "attrs 1")
	res, err = f.Find(p.PID, true)
	require.NoError(t, err)
	assert.True(t, res.Found)
	require.NotNil(t, res.Context)
	assert.Equal(t, "tlsdesc_v1_dev", res.Context.SchemaVersion)
	assert.Equal(t, []string{"http.request.method", "http.route"}, res.Context.Keys)
	assert.NotZero(t, res.Context.PublishedNs)
}

// fakeMemory is a process's memory as a map of words.
type fakeMemory map[uint64][]byte

func (m fakeMemory) ReadAt(p []byte, addr uint64) error {
	for base, b := range m {
		if addr >= base && addr-base <= uint64(len(b)) && uint64(len(p)) <= uint64(len(b))-(addr-base) {
			copy(p, b[addr-base:])
			return nil
		}
	}
	return fmt.Errorf("nothing mapped at %#x", addr)
}

func words(ws ...uint64) []byte {
	b := make([]byte, 8*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}

func neg(v int64) uint64 { return uint64(v) }
