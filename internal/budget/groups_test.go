package budget

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

func pl(refs []string, spans [][2]int, attachments []plan.Attachment) *plan.Plan {
	p := &plan.Plan{Attachments: attachments}
	for _, r := range refs {
		p.Probes = append(p.Probes, plan.Probe{Ref: r})
	}
	for _, s := range spans {
		p.Spans = append(p.Spans, plan.SpanDef{Entry: s[0], Exit: s[1]})
	}
	return p
}

func TestGroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		refs  []string
		spans [][2]int
		want  []Group
	}{
		{"counters alone", []string{"a", "b"}, nil,
			[]Group{{Probes: []int{0}, Name: "a"}, {Probes: []int{1}, Name: "b"}}},
		{"a span's exit before its entry in the plan", []string{"exit", "entry", "c"}, [][2]int{{1, 0}},
			[]Group{{Probes: []int{1, 0}, Name: "entry, exit"}, {Probes: []int{2}, Name: "c"}}},
		{"a chain: b closes one span and opens another", []string{"a", "b", "c"}, [][2]int{{0, 1}, {1, 2}},
			[]Group{{Probes: []int{0, 1, 2}, Name: "a, b, c"}}},
		{"two spans share an exit", []string{"x", "a", "b"}, [][2]int{{1, 0}, {2, 0}},
			[]Group{{Probes: []int{1, 2, 0}, Name: "a, b, x"}}},
		{"two groups", []string{"a1", "a2", "b1", "b2"}, [][2]int{{0, 1}, {3, 2}},
			[]Group{{Probes: []int{0, 1}, Name: "a1, a2"}, {Probes: []int{3, 2}, Name: "b2, b1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Groups(pl(tc.refs, tc.spans, nil)))
		})
	}
}

func TestProbeCosts(t *testing.T) {
	costs := Costs{
		HitNs:     [3]float64{1400, 5500, 20000},
		ReturnNs:  1500,
		ProgramNs: map[plan.Program]float64{plan.ProgramCount: 10, plan.ProgramSite: 300},
	}
	at := func(probe int, off uint64, class insn.SiteClass, ret bool, prog plan.Program) plan.Attachment {
		return plan.Attachment{Probe: probe, FileOffset: off, Class: class, Return: ret, Program: prog}
	}
	for _, tc := range []struct {
		name        string
		refs        []string
		spans       [][2]int
		attachments []plan.Attachment
		want        []float64
	}{
		{"a counter on each class",
			[]string{"opt", "emu", "ss"}, nil,
			[]plan.Attachment{
				at(0, 0x10, insn.Optimizable, false, plan.ProgramCount),
				at(1, 0x20, insn.Emulated, false, plan.ProgramCount),
				at(2, 0x30, insn.SingleStepped, false, plan.ProgramCount),
			},
			[]float64{1410, 5510, 20010}},
		{"function span: the uretprobe shares the entry's trap",
			[]string{"uprobe:f", "uretprobe:f"}, [][2]int{{0, 1}},
			[]plan.Attachment{
				at(0, 0x10, insn.Emulated, false, plan.ProgramSite),
				at(1, 0x10, insn.Emulated, true, plan.ProgramSite),
			},
			[]float64{5800, 1800}},
		{"a uretprobe alone pays the entry trap too",
			[]string{"uretprobe:f"}, nil,
			[]plan.Attachment{at(0, 0x10, insn.Emulated, true, plan.ProgramCount)},
			[]float64{7010}},
		{"an entry of another group does not share its trap",
			[]string{"uprobe:f", "uretprobe:f"}, nil,
			[]plan.Attachment{
				at(0, 0x10, insn.Emulated, false, plan.ProgramCount),
				at(1, 0x10, insn.Emulated, true, plan.ProgramCount),
			},
			[]float64{5510, 7010}},
		{"several locations: the costliest",
			[]string{"usdt:p:n"}, nil,
			[]plan.Attachment{
				at(0, 0x10, insn.Optimizable, false, plan.ProgramCount),
				at(0, 0x20, insn.SingleStepped, false, plan.ProgramCount),
			},
			[]float64{20010}},
		{"a probe without locations costs nothing",
			[]string{"uprobe:gone"}, nil, nil,
			[]float64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pl(tc.refs, tc.spans, tc.attachments)
			assert.Equal(t, tc.want, ProbeCosts(p, Groups(p), costs))
		})
	}
}
