package target

import (
	"errors"
	"fmt"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// conditions compiles the filters and the histogram value of probe pd at
// the compiler's location into site: the conditions of the span pd opens
// (evaluated at entry), of the span it closes (at exit), or of its
// filtered counter; and the value its counter's histogram records.
func (c *compiler) conditions(pd *probeDef, site *Site, note func(string, ...any)) error {
	var errs []error
	add := func(conds []config.Condition, r role, atExit bool) {
		c.role = r
		for _, cond := range conds {
			f, err := c.one(cond.Expr, RoleFilter, note)
			if err == nil {
				err = checkCondition(cond, f)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("condition %q: %w", cond.Raw, err))
				continue
			}
			site.Filters = append(site.Filters, Filter{Value: f, Cond: cond, AtExit: atExit})
		}
	}
	// A counter reads its values where its probe fires: at a return
	// probe, that is the return.
	here := atEntry
	if pd.probe.Returns() {
		here = atExit
	}
	add(pd.counted, here, false)
	site.FilteredHits = pd.filtered
	if pd.entrySpan >= 0 {
		add(pd.entryFilter, atEntry, false)
	}
	if pd.exitSpan >= 0 {
		add(pd.exitFilter, atExit, true)
	}
	if len(site.Filters) > bpfobj.MaxFilters {
		errs = append(errs, errors.New(config.ConditionsAtOneLocation(len(site.Filters))))
	}
	if pd.hist != nil {
		c.role = here
		f, err := c.one(pd.hist.Expr, RoleHistogram, note)
		switch {
		case err != nil:
		case f.Store != StoreInt:
			err = fmt.Errorf("the value is %s, not an integer", f.Value.Type)
		case f.Value.Shift != 0:
			err = errors.New("a USDT argument in a high byte register cannot be aggregated")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("histogram %s: %w", pd.hist.Expr.Text, err))
		} else {
			site.ValueHist, site.HistValue = pd.histID, f
		}
	}
	return errors.Join(errs...)
}

// one compiles one expression of a condition or histogram: one value.
func (c *compiler) one(e fetch.Expr, r Role, note func(string, ...any)) (Fetch, error) {
	lenient := c.lenient
	c.lenient = false // a condition's value is never left out
	defer func() { c.lenient = lenient }()
	fs, err := c.all([]fetchSpec{{config.Attribute{Key: r.what(), Expr: e}, r}}, note)
	if err != nil {
		return Fetch{}, err
	}
	if len(fs) != 1 {
		return Fetch{}, fmt.Errorf("%q stands for %d values, not one", e.Text, len(fs))
	}
	return fs[0], nil
}

// what names a hidden role's value in messages.
func (r Role) what() string {
	switch r {
	case RoleFilter:
		return "filter"
	case RoleHistogram:
		return "histogram"
	}
	return "value"
}

// checkCondition checks a condition against the value its fetch gives in
// the traced file.
func checkCondition(cond config.Condition, f Fetch) error {
	switch f.Store {
	case StoreInt, StoreString, StoreGoString:
	default:
		return fmt.Errorf("the value is %s: a condition compares an integer or a string", f.Value.Type)
	}
	if f.Value.Shift != 0 {
		return errors.New("a USDT argument in a high byte register cannot be compared in the kernel")
	}
	return cond.CheckType(f.Value.Type)
}

// FilterSize returns the bytes of an integer condition's value that count:
// the value's type, or the USDT argument's own size when that is smaller.
func (f Filter) FilterSize() uint8 {
	size := f.Value.Value.Type.Size
	if f.Value.Value.FromArg && f.Value.Value.ArgSize != 0 && f.Value.Value.ArgSize < size {
		size = f.Value.Value.ArgSize
	}
	if size == 0 {
		size = 8
	}
	return size
}
