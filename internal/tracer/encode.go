package tracer

import (
	"fmt"
	"math"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// encodeSite converts a planned site into the engine's spec. Registers
// become the pt_regs slots of the site's file's architecture, which must be
// the engine's (bpfobj.Arch).
func encodeSite(s plan.Site, pl *plan.Plan) (bpfobj.Site, error) {
	spans := pl.Spans
	var out bpfobj.Site
	arch := pl.Files[s.File].Arch
	if arch != bpfobj.Arch() {
		return out, fmt.Errorf("%s is an %s file; this collector runs on %s and attaches uprobes only to %s files", pl.Files[s.File].Path, arch, bpfobj.Arch(), bpfobj.Arch())
	}
	out.ProbeId = uint32(s.Probe)
	if len(s.Entry) > bpfobj.MaxFetches || len(s.Exit) > bpfobj.MaxFetches {
		return out, fmt.Errorf("more than %d fetches at one end", bpfobj.MaxFetches)
	}
	if s.EntrySpan >= 0 {
		out.Flags |= bpfobj.SiteEntry
		out.EntrySpan = uint32(s.EntrySpan)
		out.SampleThreshold = sampleThreshold(spans[s.EntrySpan].SampleRatio)
		if spans[s.EntrySpan].Carrier != plan.CarrierNone {
			out.Flags |= bpfobj.SiteCarrier
		}
		if spans[s.EntrySpan].Function {
			out.Flags |= bpfobj.SiteFunction
			if s.LeafBytes > 0 {
				out.Flags |= bpfobj.SiteLeaf
				out.LeafBytes = s.LeafBytes
			}
		}
		if pl.Probes[spans[s.EntrySpan].Exit].Kind == config.KindUretprobe && !pl.Files[s.File].Go {
			out.Flags |= bpfobj.SiteKernelReturn
		}
		// Go code has no thread context: goroutines move between threads.
		if t := pl.Targets[spans[s.EntrySpan].Target]; t.ThreadContext && !pl.Files[s.File].Go {
			out.Flags |= bpfobj.SiteThreadContext
			if t.ThreadAttributes {
				out.Flags |= bpfobj.SiteThreadAttrs
			}
		}
	}
	if s.ExitSpan >= 0 {
		out.Flags |= bpfobj.SiteExit
		out.ExitSpan = uint32(s.ExitSpan)
		out.MinDurationNs = spans[s.ExitSpan].MinDurationNs
	}
	if f := pl.Files[s.File]; f.Go {
		out.Flags |= bpfobj.SiteGo
		out.GoidOffset = f.GoIDOffset
	}
	if t := pl.Targets[pl.Probes[s.Probe].Target]; t.Chosen {
		out.Flags |= bpfobj.SiteChosen
		out.TargetBit = t.ChosenBit
	}
	out.EntryFetchCount = uint8(len(s.Entry))
	out.ExitFetchCount = uint8(len(s.Exit))
	for i, f := range s.Entry {
		op, err := encodeFetch(f, arch)
		if err != nil {
			return out, fmt.Errorf("attribute %q: %w", f.Key, err)
		}
		out.Entry[i] = op
	}
	for i, f := range s.Exit {
		op, err := encodeFetch(f, arch)
		if err != nil {
			return out, fmt.Errorf("attribute %q: %w", f.Key, err)
		}
		out.Exit[i] = op
	}
	if registersOnly(s.Entry) {
		out.Flags |= bpfobj.SiteEntryRegs
	}
	if registersOnly(s.Exit) {
		out.Flags |= bpfobj.SiteExitRegs
	}
	if len(s.Filters) > bpfobj.MaxFilters {
		return out, fmt.Errorf("%d conditions, at most %d", len(s.Filters), bpfobj.MaxFilters)
	}
	out.FilterCount = uint8(len(s.Filters))
	for i, f := range s.Filters {
		ef, err := encodeFilter(f, arch)
		if err != nil {
			return out, fmt.Errorf("condition %s: %w", f.Cond, err)
		}
		out.Filters[i] = ef
	}
	if s.FilteredHits {
		out.Flags |= bpfobj.SiteFilteredHits
	}
	if s.PerProcess {
		out.Flags |= bpfobj.SiteProcHits
	}
	if s.ValueHist > 0 {
		if s.HistValue == nil {
			return out, fmt.Errorf("histogram %d: no value", s.ValueHist)
		}
		if s.ValueHist > math.MaxUint16 {
			return out, fmt.Errorf("histogram %d: at most %d histograms", s.ValueHist, math.MaxUint16)
		}
		op, err := encodeFetch(*s.HistValue, arch)
		if err != nil {
			return out, fmt.Errorf("histogram: %w", err)
		}
		out.ValueHist, out.HistValue = uint16(s.ValueHist), op
		out.HistSize = s.HistValue.Value.Type.Size
		if s.HistValue.Value.FromArg && s.HistValue.Value.ArgSize != 0 && s.HistValue.Value.ArgSize < out.HistSize {
			out.HistSize = s.HistValue.Value.ArgSize
		}
		if out.HistSize == 0 {
			out.HistSize = 8
		}
		out.HistSigned = boolByte(s.HistValue.Value.Type.Kind == fetch.KindSigned)
	}
	return out, nil
}

// plainSite says whether site s of pl is a plain span's, which the
// engine's plain span program (bpfobj.ProgramSiteHitPlainMulti) runs: it
// only opens a span or only closes one, in code that is not Go, with no
// condition, no process choice, no per-process hits and no value
// histogram, and that end's attributes are registers' integers
// (registersOnly) or none. plainSpec says the same of its encoded spec, as
// the engine's plain_site does; an entry attached as a session uprobe is
// not plain either (the tracer leaves those out).
func plainSite(s plan.Site, pl *plan.Plan) bool {
	if s.FilteredHits || s.PerProcess || len(s.Filters) > 0 || s.ValueHist != 0 || pl.Files[s.File].Go ||
		pl.Targets[pl.Probes[s.Probe].Target].Chosen {
		return false
	}
	switch {
	case s.EntrySpan >= 0 && s.ExitSpan < 0:
		return len(s.Entry) == 0 || registersOnly(s.Entry)
	case s.ExitSpan >= 0 && s.EntrySpan < 0:
		return len(s.Exit) == 0 || registersOnly(s.Exit)
	}
	return false
}

// plainSpec says whether an encoded site is a plain span's: the engine's
// plain_site, which site_hit_plain_multi checks at every hit.
func plainSpec(s bpfobj.Site) bool {
	excluded := bpfobj.SiteGo | bpfobj.SiteChosen | bpfobj.SiteFilteredHits | bpfobj.SiteProcHits | bpfobj.SiteSession
	if s.Flags&excluded != 0 || s.FilterCount != 0 || s.ValueHist != 0 {
		return false
	}
	switch s.Flags & (bpfobj.SiteEntry | bpfobj.SiteExit) {
	case bpfobj.SiteEntry:
		return s.EntryFetchCount == 0 || s.Flags&bpfobj.SiteEntryRegs != 0
	case bpfobj.SiteExit:
		return s.ExitFetchCount == 0 || s.Flags&bpfobj.SiteExitRegs != 0
	}
	return false
}

// registersOnly says whether fetches are at most bpfobj.MaxRegFetches
// registers' integers (an argument, a return value, a register plus a
// constant), which the engine reads inline (bpfobj.SiteEntryRegs,
// SiteExitRegs) instead of calling its fetch function for each.
func registersOnly(fetches []plan.Fetch) bool {
	if len(fetches) == 0 || len(fetches) > bpfobj.MaxRegFetches {
		return false
	}
	for _, f := range fetches {
		if f.Base != plan.BaseRegister || f.Scale != 0 || len(f.Derefs) != 0 || f.Store != plan.StoreInt {
			return false
		}
	}
	return true
}

// encodeFilter converts a compiled condition into the engine's filter.
func encodeFilter(f plan.Filter, arch regs.Arch) (bpfobj.Filter, error) {
	var out bpfobj.Filter
	op, err := encodeFetch(f.Value, arch)
	if err != nil {
		return out, err
	}
	out.Value = op
	out.AtExit = boolByte(f.AtExit)
	c := f.Cond
	if c.IsText {
		if len(c.Text) > bpfobj.FilterTextMax {
			return out, fmt.Errorf("the string is %d bytes, at most %d", len(c.Text), bpfobj.FilterTextMax)
		}
		out.Op = map[string]uint8{config.OpEQ: bpfobj.FilterEQ, config.OpNE: bpfobj.FilterNE, config.OpPrefix: bpfobj.FilterPrefix}[c.Op]
		out.Len = uint16(len(c.Text))
		for i := 0; i < len(c.Text); i++ {
			out.Text[i] = int8(c.Text[i])
		}
	} else {
		signed := f.Value.Value.Type.Kind == fetch.KindSigned
		out.Op = map[string][2]uint8{
			config.OpEQ: {bpfobj.FilterEQ, bpfobj.FilterEQ}, config.OpNE: {bpfobj.FilterNE, bpfobj.FilterNE},
			config.OpLT: {bpfobj.FilterLTU, bpfobj.FilterLT}, config.OpLE: {bpfobj.FilterLEU, bpfobj.FilterLE},
			config.OpGT: {bpfobj.FilterGTU, bpfobj.FilterGT}, config.OpGE: {bpfobj.FilterGEU, bpfobj.FilterGE},
		}[c.Op][boolByte(signed)]
		out.Constant = c.Int
		out.Size = f.FilterSize()
	}
	if out.Op == 0 {
		return out, fmt.Errorf("operator %q", c.Op)
	}
	return out, nil
}

// encodeFetch converts a compiled fetch into the engine's op, with the
// registers as pt_regs slots of architecture arch.
func encodeFetch(f plan.Fetch, arch regs.Arch) (bpfobj.FetchOp, error) {
	var op bpfobj.FetchOp
	op.Disp = f.Disp
	switch f.Base {
	case plan.BaseRegister:
		slot, ok := arch.Slot(f.Register)
		if !ok {
			return op, fmt.Errorf("register %v has no %s pt_regs slot", f.Register, arch)
		}
		op.Base, op.BaseReg = bpfobj.FetchBaseRegister, uint8(slot)
	case plan.BaseConstant:
		op.Base = bpfobj.FetchBaseConstant
	default:
		return op, fmt.Errorf("unknown fetch base %d", f.Base)
	}
	if f.Scale != 0 {
		slot, ok := arch.Slot(f.Index)
		if !ok {
			return op, fmt.Errorf("index register %v has no %s pt_regs slot", f.Index, arch)
		}
		op.IndexReg, op.Scale = uint8(slot), f.Scale
	}
	if len(f.Derefs) > bpfobj.MaxDerefs {
		return op, fmt.Errorf("%d dereferences, at most %d", len(f.Derefs), bpfobj.MaxDerefs)
	}
	op.DerefCount = uint8(len(f.Derefs))
	if f.LastIsAddress {
		op.LastIsAddress = 1
	}
	copy(op.DerefOffsets[:], f.Derefs)
	op.Kind = f.Store.FetchKind()
	switch f.Store {
	case plan.StoreInt:
		op.ReadSize = f.ReadSize
		if op.ReadSize == 0 {
			op.ReadSize = 8
		}
	case plan.StoreString, plan.StoreBytes:
	case plan.StoreGoString:
		if len(f.Derefs) == 0 {
			slot, ok := arch.Slot(f.LenRegister)
			if !ok {
				return op, fmt.Errorf("length register %v has no %s pt_regs slot", f.LenRegister, arch)
			}
			op.LenReg = uint8(slot)
		}
	default:
		return op, fmt.Errorf("unknown store kind %d", f.Store)
	}
	if int(f.MaxLen) > bpfobj.StringMax {
		return op, fmt.Errorf("capture of %d bytes exceeds %d", f.MaxLen, bpfobj.StringMax)
	}
	op.MaxLen = f.MaxLen
	return op, nil
}

// sampleThreshold converts a ratio into the engine's threshold: a trace is
// recorded when a random u32 is below it, so 1<<32 records every one.
func sampleThreshold(ratio float64) uint64 {
	switch {
	case ratio >= 1:
		return 1 << 32
	case ratio <= 0:
		return 0
	}
	return uint64(math.Round(ratio * (1 << 32)))
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
