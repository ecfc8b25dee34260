package bpfobj

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// engines are the architectures the engine is built for, with the name of
// the enum of their struct pt_regs slots in bpf/abi.h and its prefix.
var engines = []struct {
	arch   regs.Arch
	enum   string
	prefix string
}{
	{regs.ArchAMD64, "reg_slot_x86", "REG_X86_"},
	{regs.ArchARM64, "reg_slot_arm64", "REG_ARM64_"},
}

func specFor(t *testing.T, a regs.Arch) *ebpf.CollectionSpec {
	t.Helper()
	spec, err := SpecFor(a)
	require.NoError(t, err)
	return spec
}

// TestLayout checks every generated ABI type against the BTF of each
// embedded object: same size and, field by field, same offsets. A stale
// bpf2go output, a hand edit, or an ABI type that differs between the
// architectures fails here.
func TestLayout(t *testing.T) {
	for _, e := range engines {
		spec := specFor(t, e.arch)
		for name, goType := range map[string]any{
			"span_record":      SpanRecord{},
			"site":             Site{},
			"fetch_op":         FetchOp{},
			"probe_stats":      ProbeStats{},
			"span_stats":       SpanStats{},
			"process_record":   ProcessRecord{},
			"proc_entry":       ProcEntry{},
			"pending_key":      PendingKey{},
			"filter":           Filter{},
			"value_hist":       ValueHist{},
			"proc_hits_key":    ProcHitsKey{},
			"thread_ctx_proc":  ThreadCtxProc{},
			"thread_context":   ThreadContext{},
			"thread_ctx_stats": ThreadCtxStats{},
		} {
			t.Run(e.arch.String()+"/"+name, func(t *testing.T) {
				var st *btf.Struct
				require.NoError(t, spec.Types.TypeByName(name, &st))
				gt := reflect.TypeOf(goType)
				require.Equal(t, uintptr(st.Size), gt.Size(), "size of %s", name)
				var goFields []reflect.StructField
				for i := 0; i < gt.NumField(); i++ {
					if f := gt.Field(i); f.Name != "_" {
						goFields = append(goFields, f)
					}
				}
				require.Len(t, goFields, len(st.Members), "fields of %s", name)
				for i, m := range st.Members {
					require.Equal(t, uintptr(m.Offset.Bytes()), goFields[i].Offset, "offset of %s.%s", name, m.Name)
					size, err := btf.Sizeof(m.Type)
					require.NoError(t, err)
					require.Equal(t, uintptr(size), goFields[i].Type.Size(), "size of %s.%s", name, m.Name)
				}
			})
		}
	}
}

// enumValues returns the values of an enum of a spec's BTF by name.
func enumValues(t *testing.T, spec *ebpf.CollectionSpec, name string) map[string]uint64 {
	t.Helper()
	var en *btf.Enum
	require.NoError(t, spec.Types.TypeByName(name, &en), "enum %s", name)
	out := map[string]uint64{}
	for _, v := range en.Values {
		out[v.Name] = v.Value
	}
	return out
}

// TestEnginesAgree checks that the objects of both architectures have the
// same programs, maps, variables and ABI enums, so that the Go constants
// generated from one hold for the other.
func TestEnginesAgree(t *testing.T) {
	x86, arm64 := specFor(t, regs.ArchAMD64), specFor(t, regs.ArchARM64)
	keys := func(m any) []string {
		var out []string
		for _, k := range reflect.ValueOf(m).MapKeys() {
			out = append(out, k.String())
		}
		sort.Strings(out)
		return out
	}
	assert.Equal(t, keys(x86.Programs), keys(arm64.Programs))
	assert.Equal(t, keys(x86.Maps), keys(arm64.Maps))
	assert.Equal(t, keys(x86.Variables), keys(arm64.Variables))
	for _, name := range []string{ProgramCountHit, ProgramSiteHit, ProgramCountHitMulti, ProgramSiteHitMulti, ProgramOnExec, ProgramOnExit, ProgramOnFork} {
		assert.Contains(t, arm64.Programs, name)
	}
	for _, name := range []string{"abi_limit", "fetch_base", "fetch_kind", "site_flag", "record_flag", "record_kind",
		"process_event", "pending_kind", "proc_mask_bit", "reg_slot_x86", "reg_slot_arm64"} {
		assert.Equal(t, enumValues(t, x86, name), enumValues(t, arm64, name), "enum %s", name)
	}
	for name, spec := range map[string]*ebpf.CollectionSpec{"amd64": x86, "arm64": arm64} {
		for _, p := range spec.Programs {
			assert.NotEmpty(t, p.Instructions, "%s: program %s", name, p.Name)
		}
	}
}

// TestRegisterSlots checks internal/regs' pt_regs slots (Arch.Slot, which
// the tracer writes into fetch ops) against the enum of each architecture
// in bpf/abi.h, name by name: every register of the architecture has the
// enum's slot, and the slot counts agree.
func TestRegisterSlots(t *testing.T) {
	for _, e := range engines {
		t.Run(e.arch.String(), func(t *testing.T) {
			values := enumValues(t, specFor(t, e.arch), e.enum)
			require.Equal(t, uint64(e.arch.SlotCount()), values[e.prefix+"SLOT_COUNT"], "slot count")
			covered := map[regs.Register]bool{}
			for name, v := range values {
				short := strings.ToLower(strings.TrimPrefix(name, e.prefix))
				r, ok := e.arch.ParseWhole(short)
				if !ok {
					// orig_ax, cs, flags, ss: kernel-only slots without a register
					continue
				}
				slot, ok := e.arch.Slot(r)
				require.True(t, ok, "%s has a slot", r)
				assert.Equal(t, v, uint64(slot), "%s: regs says slot %d, abi.h %d", name, slot, v)
				covered[r] = true
			}
			for _, r := range e.arch.Registers() {
				assert.True(t, covered[r], "register %s has a slot in enum %s", r, e.enum)
			}
		})
	}
}

// TestSpecForUnknownArch refuses an architecture without an engine.
func TestSpecForUnknownArch(t *testing.T) {
	_, err := SpecFor(regs.ArchUnknown)
	require.ErrorContains(t, err, "no BPF engine for architecture")
	assert.NotEqual(t, regs.ArchUnknown, Arch(), "the tests run on an architecture with an engine")
}

// TestLimitsFitTheRecord checks relations between the limits the engine's
// bounds rely on.
func TestLimitsFitTheRecord(t *testing.T) {
	require.Equal(t, 0, DataCap&(DataCap-1), "DataCap is a power of two (the engine masks with it)")
	require.Equal(t, 0, MaxDepth&(MaxDepth-1), "MaxDepth is a power of two")
	require.LessOrEqual(t, MaxFetches, 8, "failed-fetch masks are 8 bits wide")
	require.Zero(t, reflect.TypeOf(SpanRecord{}).Size()%8, "records keep their values 8-aligned")
}
