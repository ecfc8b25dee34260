package planner

import (
	"errors"
	"fmt"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// conditions compiles the filters and the histogram value of probe pd at
// the compiler's location into site: the conditions of the span pd opens
// (evaluated at entry), of the span it closes (at exit), or of its
// filtered counter; and the value its counter's histogram records.
func (c *compiler) conditions(pd *probeDef, site *plan.Site, note func(string, ...any)) error {
	var errs []error
	add := func(conds []config.Condition, r role, atExit bool) {
		c.role = r
		for _, cond := range conds {
			f, err := c.one(cond.Expr, plan.RoleFilter, note)
			if err == nil {
				err = checkCondition(cond, f)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("condition %q: %w", cond.Raw, err))
				continue
			}
			site.Filters = append(site.Filters, plan.Filter{Value: f, Cond: cond, AtExit: atExit})
		}
	}
	// A counter reads its values where its probe fires: at a return
	// probe, that is the return.
	here := atEntry
	if pd.probe.Returns() {
		here = atExit
	}
	pc := pd.conditions()
	add(pc.counted, here, false)
	site.FilteredHits = pc.filtered
	if pd.entrySpan >= 0 {
		add(pc.entryFilter, atEntry, false)
	}
	if pd.exitSpan >= 0 {
		add(pc.exitFilter, atExit, true)
	}
	if len(site.Filters) > bpfobj.MaxFilters {
		errs = append(errs, errors.New(config.ConditionsAtOneLocation(len(site.Filters))))
	}
	if pc.hist != nil {
		c.role = here
		f, err := c.one(pc.hist.Expr, plan.RoleHistogram, note)
		switch {
		case err != nil:
		case f.Store != plan.StoreInt:
			err = fmt.Errorf("the value is %s, not an integer", f.Value.Type)
		case f.Value.Shift != 0:
			err = errors.New("a USDT argument in a high byte register cannot be aggregated")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("histogram %s: %w", pc.hist.Expr.Text, err))
		} else {
			site.ValueHist, site.HistValue = pc.histID, &f
		}
	}
	return errors.Join(errs...)
}

// one compiles one expression of a condition or histogram: one value.
func (c *compiler) one(e fetch.Expr, r plan.Role, note func(string, ...any)) (plan.Fetch, error) {
	lenient := c.lenient
	c.lenient = false // a condition's value is never left out
	defer func() { c.lenient = lenient }()
	fs, err := c.all([]fetchSpec{{config.Attribute{Key: roleWhat(r), Expr: e}, r}}, note)
	if err != nil {
		return plan.Fetch{}, err
	}
	if len(fs) != 1 {
		return plan.Fetch{}, fmt.Errorf("%q stands for %d values, not one", e.Text, len(fs))
	}
	return fs[0], nil
}

// roleWhat names a hidden role's value in messages.
func roleWhat(r plan.Role) string {
	switch r {
	case plan.RoleFilter:
		return "filter"
	case plan.RoleHistogram:
		return "histogram"
	}
	return "value"
}

// checkCondition checks a condition against the value its fetch gives in
// the traced file.
func checkCondition(cond config.Condition, f plan.Fetch) error {
	switch f.Store {
	case plan.StoreInt, plan.StoreString, plan.StoreGoString:
	default:
		return fmt.Errorf("the value is %s: a condition compares an integer or a string", f.Value.Type)
	}
	if f.Value.Shift != 0 {
		return errors.New("a USDT argument in a high byte register cannot be compared in the kernel")
	}
	return cond.CheckType(f.Value.Type)
}
