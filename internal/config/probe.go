package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ProbeKind is the kind of a probe reference.
type ProbeKind uint8

// The probe kinds a reference can name.
const (
	// KindUSDT is a USDT probe: usdt:PROVIDER:NAME.
	KindUSDT ProbeKind = iota + 1
	// KindUprobe is a uprobe at a function or inside one: uprobe:SYMBOL,
	// uprobe:SYMBOL+0xOFF, or uprobe:0xADDR (a virtual address inside a function).
	KindUprobe
	// KindUretprobe is a return probe of a function: uretprobe:SYMBOL, the
	// kernel's return probe (at most 64 nested returns per thread; in Go
	// binaries, whose stacks move, it is placed like KindRet).
	KindUretprobe
	// KindRet is every RET instruction of a function: ret:SYMBOL. No depth
	// limit, but the kernel single-steps each RET (about 11 µs per hit).
	KindRet
	// KindLine is where a source line's code starts: line:FILE:LINE, found
	// through the file's debuginfo (FILE is a path suffix of the line
	// table's file names); one location per copy of the line's code.
	KindLine
)

// String returns the reference prefix of the kind, e.g. "usdt".
func (k ProbeKind) String() string {
	switch k {
	case KindUSDT:
		return "usdt"
	case KindUprobe:
		return "uprobe"
	case KindUretprobe:
		return "uretprobe"
	case KindRet:
		return "ret"
	case KindLine:
		return "line"
	}
	return "unknown"
}

// ProbeRef is a parsed probe reference.
type ProbeRef struct {
	Kind     ProbeKind
	Provider string // KindUSDT
	Name     string // KindUSDT
	Symbol   string // KindUprobe, KindUretprobe, KindRet
	Offset   uint64 // KindUprobe: bytes from the start of Symbol
	// Address is the virtual address of uprobe:0xADDR (Symbol is then empty).
	Address uint64
	// File and Line are the source line of KindLine.
	File string
	Line int
}

// MaxLine is the largest line number a line: reference may name.
const MaxLine = 1<<31 - 1

// String returns the canonical reference: "usdt:p:n", "uprobe:f", "uprobe:f+0x10", "uretprobe:f", "ret:f",
// "line:f.c:12".
// Two references that name the same probe have the same canonical form.
func (p ProbeRef) String() string {
	switch p.Kind {
	case KindUSDT:
		return "usdt:" + p.Provider + ":" + p.Name
	case KindUprobe:
		if p.Symbol == "" {
			return fmt.Sprintf("uprobe:%#x", p.Address)
		}
		if p.Offset != 0 {
			return fmt.Sprintf("uprobe:%s+%#x", p.Symbol, p.Offset)
		}
		return "uprobe:" + p.Symbol
	case KindUretprobe:
		return "uretprobe:" + p.Symbol
	case KindRet:
		return "ret:" + p.Symbol
	case KindLine:
		return "line:" + p.File + ":" + strconv.Itoa(p.Line)
	}
	return ""
}

// Returns says whether the probe fires where a function returns.
func (p ProbeRef) Returns() bool { return p.Kind == KindUretprobe || p.Kind == KindRet }

// ParseProbe parses a probe reference as written in the configuration.
// A reference, as written and in its canonical form (which may write an
// offset longer, in hex), is at most MaxProbeRefBytes: it becomes the
// probe.name attribute.
func ParseProbe(ref string) (ProbeRef, error) {
	if len(ref) > MaxProbeRefBytes {
		return ProbeRef{}, fmt.Errorf("probe reference is %d bytes, at most %d", len(ref), MaxProbeRefBytes)
	}
	p, err := parseProbe(ref)
	if n := len(p.String()); err == nil && n > MaxProbeRefBytes {
		return ProbeRef{}, fmt.Errorf("probe reference is %d bytes with its offset in hex, at most %d", n, MaxProbeRefBytes)
	}
	return p, err
}

func parseProbe(ref string) (ProbeRef, error) {
	kind, rest, ok := strings.Cut(ref, ":")
	if !ok {
		return ProbeRef{}, fmt.Errorf("probe %s: want usdt:PROVIDER:NAME, uprobe:SYMBOL[+OFFSET], uretprobe:SYMBOL, ret:SYMBOL or line:FILE:LINE", quoteShort(ref))
	}
	switch kind {
	case "usdt":
		provider, name, ok := strings.Cut(rest, ":")
		if !ok || provider == "" || name == "" || strings.Contains(name, ":") {
			return ProbeRef{}, fmt.Errorf("probe %s: want usdt:PROVIDER:NAME", quoteShort(ref))
		}
		if err := checkName(provider); err != nil {
			return ProbeRef{}, fmt.Errorf("probe %s: provider: %w", quoteShort(ref), err)
		}
		if err := checkName(name); err != nil {
			return ProbeRef{}, fmt.Errorf("probe %s: name: %w", quoteShort(ref), err)
		}
		return ProbeRef{Kind: KindUSDT, Provider: provider, Name: name}, nil
	case "uprobe":
		if a, ok := strings.CutPrefix(rest, "0x"); ok {
			if strings.Contains(a, "+") {
				return ProbeRef{}, fmt.Errorf("probe %s: an address takes no offset: write the instruction's own address", quoteShort(ref))
			}
			v, err := strconv.ParseUint(a, 16, 64)
			if err != nil {
				return ProbeRef{}, fmt.Errorf("probe %s: address %s is not a hex number (want e.g. uprobe:0x401a2c)", quoteShort(ref), quoteShort(rest))
			}
			if v == 0 {
				return ProbeRef{}, fmt.Errorf("probe %s: address 0 is no instruction: give the virtual address of an instruction inside a function (e.g. uprobe:0x401a2c)", quoteShort(ref))
			}
			return ProbeRef{Kind: KindUprobe, Address: v}, nil
		}
		sym, off, hasOff := strings.Cut(rest, "+")
		if err := checkSymbol(sym); err != nil {
			return ProbeRef{}, fmt.Errorf("probe %s: %w", quoteShort(ref), err)
		}
		p := ProbeRef{Kind: KindUprobe, Symbol: sym}
		if hasOff {
			v, err := parseOffset(off)
			if err != nil {
				return ProbeRef{}, fmt.Errorf("probe %s: offset %s is not a number (want e.g. +0x10 or +16)", quoteShort(ref), quoteShort(off))
			}
			p.Offset = v
		}
		return p, nil
	case "uretprobe", "ret":
		if strings.Contains(rest, "+") {
			return ProbeRef{}, fmt.Errorf("probe %s: a return probe takes no offset", quoteShort(ref))
		}
		if err := checkSymbol(rest); err != nil {
			return ProbeRef{}, fmt.Errorf("probe %s: %w", quoteShort(ref), err)
		}
		if kind == "ret" {
			return ProbeRef{Kind: KindRet, Symbol: rest}, nil
		}
		return ProbeRef{Kind: KindUretprobe, Symbol: rest}, nil
	case "line":
		return parseLine(ref, rest)
	}
	return ProbeRef{}, fmt.Errorf("probe %s: unknown probe kind %s (want usdt, uprobe, uretprobe, ret or line)", quoteShort(ref), quoteShort(kind))
}

// parseLine parses the FILE:LINE of a line: reference: the last colon
// separates them, so FILE may hold colons; LINE is a decimal number from 1
// to MaxLine without leading zeros.
func parseLine(ref, rest string) (ProbeRef, error) {
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return ProbeRef{}, fmt.Errorf("probe %s: want line:FILE:LINE (e.g. line:server.c:120)", quoteShort(ref))
	}
	file, num := rest[:i], rest[i+1:]
	if file == "" {
		return ProbeRef{}, fmt.Errorf("probe %s: empty file name (want line:FILE:LINE)", quoteShort(ref))
	}
	if err := checkName(file); err != nil {
		return ProbeRef{}, fmt.Errorf("probe %s: file: %w", quoteShort(ref), err)
	}
	bad := num == "" || num[0] == '0' || len(num) > 10
	for i := 0; i < len(num) && !bad; i++ {
		bad = num[i] < '0' || num[i] > '9'
	}
	n := 0
	if !bad {
		v, err := strconv.ParseUint(num, 10, 64)
		bad = err != nil || v > MaxLine
		n = int(v)
	}
	if bad {
		return ProbeRef{}, fmt.Errorf("probe %s: line %s is not a line number (want 1 to %d, decimal)", quoteShort(ref), quoteShort(num), MaxLine)
	}
	return ProbeRef{Kind: KindLine, File: file, Line: n}, nil
}

// parseOffset reads a decimal number without leading zeros, or a 0x hex
// number: no octal, binary or digit separators, which would silently change
// the meaning of "+010".
func parseOffset(s string) (uint64, error) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && !strings.ContainsAny(s[2:], "_+-") {
		h := s[2:]
		return strconv.ParseUint(h, 16, 64)
	}
	if s == "" || (len(s) > 1 && s[0] == '0') || strings.ContainsAny(s, "_+-") {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(s, 10, 64)
}

func checkName(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError {
			return fmt.Errorf("%s contains a space or control character", quoteShort(s))
		}
	}
	return nil
}

func checkSymbol(s string) error {
	if s == "" {
		return errors.New("empty symbol")
	}
	return checkName(s)
}
