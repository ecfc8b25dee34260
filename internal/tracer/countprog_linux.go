package tracer

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
)

// maxCountPrograms bounds the count-only probes that get a program of
// their own (countProgram): each is a few dozen instructions, verified in
// microseconds, and a page of kernel memory or so. Probes beyond it share
// count_hit, which reads the probe id from the attach cookie.
const maxCountPrograms = 64

// countProgram returns the count program of probe p: count_hit with the
// probe id in place of its bpf_get_attach_cookie call, so that a hit costs
// the traced thread what the benchmark's bare counter costs (the helper
// call is ~18 ns on machines whose returns are mitigated, a third of what
// the program itself costs). It returns nil, to use the shared count_hit,
// past maxCountPrograms, with Options.ProbeControl (whose overhead budget
// reads the shared program's run-time statistics), or when the program
// cannot be made. The caller holds t.mu.
func (t *Tracer) countProgram(p int) *ebpf.Program {
	if t.control {
		return nil
	}
	if prog, ok := t.countProgs[p]; ok {
		return prog
	}
	if len(t.countProgs) >= maxCountPrograms || t.countSpec == nil {
		return nil
	}
	prog, err := probeCountProgram(t.countSpec, t.probes, p)
	if err != nil {
		prog = nil // the shared program counts it as well
	}
	t.countProgs[p] = prog
	return prog
}

// probeCountProgram loads a copy of spec (count_hit or count_hit_multi,
// counting into probes) whose attach cookie is the constant probe.
func probeCountProgram(spec *ebpf.ProgramSpec, probes *ebpf.Map, probe int) (*ebpf.Program, error) {
	ps := spec.Copy()
	patched := 0
	for i, ins := range ps.Instructions {
		if ins.IsBuiltinCall() && asm.BuiltinFunc(ins.Constant) == asm.FnGetAttachCookie {
			ps.Instructions[i] = asm.Mov.Imm(asm.R0, int32(probe)).WithMetadata(ins.Metadata)
			patched++
		}
	}
	if patched != 1 {
		return nil, fmt.Errorf("%s reads the attach cookie %d times, not once", ps.Name, patched)
	}
	if err := ps.Instructions.AssociateMap(bpfobj.MapProbes, probes); err != nil {
		return nil, err
	}
	return ebpf.NewProgram(ps)
}
