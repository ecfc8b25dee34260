package tracer

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

func TestRegistersOnly(t *testing.T) {
	reg := func(r regs.Register) plan.Fetch {
		return plan.Fetch{Base: plan.BaseRegister, Register: r, Store: plan.StoreInt, ReadSize: 8}
	}
	di, si := reg(regs.RDI), reg(regs.RSI)
	deref := reg(regs.RDI)
	deref.Derefs = []int64{8}
	indexed := reg(regs.RDI)
	indexed.Scale, indexed.Index = 8, regs.RSI
	str := reg(regs.RDI)
	str.Store = plan.StoreString
	constant := plan.Fetch{Base: plan.BaseConstant, Disp: 42, Store: plan.StoreInt}
	for _, tc := range []struct {
		name    string
		fetches []plan.Fetch
		want    bool
	}{
		{"none", nil, false},
		{"one argument", []plan.Fetch{di}, true},
		{"four registers", []plan.Fetch{di, si, di, si}, true},
		{"five registers", []plan.Fetch{di, si, di, si, di}, false},
		{"a dereference", []plan.Fetch{di, deref}, false},
		{"an index", []plan.Fetch{indexed}, false},
		{"a string", []plan.Fetch{str}, false},
		{"a constant", []plan.Fetch{constant}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, registersOnly(tc.fetches))
		})
	}
}
