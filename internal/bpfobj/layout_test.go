package bpfobj

import (
	"reflect"
	"testing"

	"github.com/cilium/ebpf/btf"
	"github.com/stretchr/testify/require"
)

// TestLayout checks every generated ABI type against the BTF of the embedded
// object: same size and, field by field, same offsets. A stale bpf2go output
// or a hand edit fails here.
func TestLayout(t *testing.T) {
	spec, err := Spec()
	require.NoError(t, err)
	for name, goType := range map[string]any{
		"span_record":    SpanRecord{},
		"site":           Site{},
		"fetch_op":       FetchOp{},
		"probe_stats":    ProbeStats{},
		"span_stats":     SpanStats{},
		"filter":         Filter{},
		"value_hist":     ValueHist{},
		"process_record": ProcessRecord{},
		"proc_entry":     ProcEntry{},
		"pending_key":    PendingKey{},
	} {
		t.Run(name, func(t *testing.T) {
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

// TestLimitsFitTheRecord checks relations between the limits the engine's
// bounds rely on.
func TestLimitsFitTheRecord(t *testing.T) {
	require.Equal(t, 0, DataCap&(DataCap-1), "DataCap is a power of two (the engine masks with it)")
	require.Equal(t, 0, MaxDepth&(MaxDepth-1), "MaxDepth is a power of two")
	require.LessOrEqual(t, MaxFetches, 8, "failed-fetch masks are 8 bits wide")
	require.Zero(t, reflect.TypeOf(SpanRecord{}).Size()%8, "records keep their values 8-aligned")
}
