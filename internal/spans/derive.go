package spans

import (
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// derive adds to a span what its definition derives from its record: the
// error status of an error exit (exitProbe is the probe that closed it),
// constant attributes, first words, and truncations.
func derive(sp ptrace.Span, attrs pcommon.Map, def *plan.SpanDef, exitProbe int, probes []plan.Probe) {
	if slices.Contains(def.ErrorExits, exitProbe) {
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage("closed at its error exit " + probes[exitProbe].Ref)
	}
	for _, c := range def.Constants {
		attrs.PutStr(c.Key, c.Value)
	}
	for _, d := range def.Truncates {
		n, ok := attrs.Get(d.From)
		if !ok || n.Type() != pcommon.ValueTypeInt {
			continue
		}
		v, ok := attrs.Get(d.Key)
		if !ok {
			continue
		}
		keep := max(n.Int(), 0)
		switch v.Type() {
		case pcommon.ValueTypeStr:
			if s := v.Str(); int64(len(s)) > keep {
				v.SetStr(strings.ToValidUTF8(s[:keep], ""))
			}
		case pcommon.ValueTypeBytes:
			if b := v.Bytes(); int64(b.Len()) > keep {
				cut := slices.Clone(b.AsRaw()[:keep])
				b.FromRaw(cut)
			}
		}
	}
	for _, d := range def.FirstWords {
		v, ok := attrs.Get(d.From)
		if !ok || v.Type() != pcommon.ValueTypeStr {
			continue
		}
		if w := config.FirstWord(v.Str()); w != "" {
			attrs.PutStr(d.Key, w)
		}
	}
}
