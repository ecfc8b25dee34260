package tracer

import (
	"errors"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
)

// privateStackMin is BPF_PRIV_STACK_MIN_SIZE: on kernels with BPF private
// stacks (Linux 6.13, x86-64 JIT), a kprobe-type program (uprobe programs
// are) or tracing program gets a per-CPU private stack for each of its
// functions whose stack depth, rounded up to 16 bytes by the JIT, is at
// least this. A uprobe program runs preemptibly (migrate_disable only):
// two threads preempting each other on one CPU would share that stack.
const privateStackMin = 64

var stackDepthRE = regexp.MustCompile(`(?m)^stack depth ([0-9+]+)$`)

// stackDepths loads every program of the engine with the verifier's
// statistics and returns the stack depth of each function of each program,
// as "program/function".
func stackDepths(t *testing.T) map[string]int {
	t.Helper()
	spec, err := bpfobj.Spec()
	require.NoError(t, err)
	if !HaveUprobeSession() {
		delete(spec.Programs, bpfobj.ProgramSiteHitSession) // its kfunc is not there (Linux 6.12)
	}
	if !HaveUprobeMulti() {
		// It reads its run context through bpf_rdonly_cast (Linux 6.2);
		// the loader loads it only with uprobe_multi links (Linux 6.6).
		delete(spec.Programs, bpfobj.ProgramSiteHitMulti)
		delete(spec.Programs, bpfobj.ProgramSiteHitPlainMulti) // the same
	}
	// Every path on: the verifier leaves out the code that a loader
	// constant turns off, and with it that code's stack.
	require.NoError(t, errors.Join(spec.Variables[bpfobj.VarSelectorBits].Set(uint64(1)),
		spec.Variables[bpfobj.VarSendExecs].Set(uint8(1)),
		spec.Variables[bpfobj.VarProcessFacts].Set(uint8(1)),
		spec.Variables[bpfobj.VarCgroup1Subsys].Set(uint32(0))))
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		t.Fatalf("the verifier refused the engine: %-40v", ve) // the end of its log says why
	}
	require.NoError(t, err)
	defer coll.Close()
	out := map[string]int{}
	for name, prog := range coll.Programs {
		m := stackDepthRE.FindStringSubmatch(prog.VerifierLog)
		require.NotNil(t, m, "%s: no stack depth in the verifier's log:\n%s", name, prog.VerifierLog)
		depths := strings.Split(m[1], "+")
		info, err := prog.Info()
		require.NoError(t, err)
		funcs, err := info.FuncInfos()
		require.NoError(t, err)
		sort.Slice(funcs, func(i, j int) bool { return funcs[i].Offset < funcs[j].Offset })
		require.Len(t, funcs, len(depths), "%s: one depth per function", name)
		for i, d := range depths {
			n, err := strconv.Atoi(d)
			require.NoError(t, err)
			out[name+"/"+funcs[i].Func.Name] = n
		}
	}
	return out
}

// No function of the engine gets a BPF private stack: each one's stack
// depth, rounded up to 16 bytes as the JIT does, stays below 64 bytes, so
// that preempted uprobe programs on one CPU never share a stack.
func TestEngineStackDepth(t *testing.T) {
	testutil.RequireRoot(t)
	depths := stackDepths(t)
	require.NotEmpty(t, depths)
	names := make([]string, 0, len(depths))
	for n := range depths {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := depths[n]
		t.Logf("%-40s %3d bytes", n, d)
		assert.Less(t, (d+15)&^15, privateStackMin, "%s: %d bytes of stack (rounded up to 16) would get a private stack", n, d)
	}
}
