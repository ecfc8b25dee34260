package debuginfo

import (
	"debug/dwarf"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// maxTypeHops bounds chains of typedefs and qualifiers.
const maxTypeHops = maxTypeChain + 1

// resolve strips typedefs and const/volatile/restrict qualifiers.
func resolve(t dwarf.Type) dwarf.Type {
	for i := 0; i < maxTypeHops && t != nil; i++ {
		switch x := t.(type) {
		case *dwarf.TypedefType:
			t = x.Type
		case *dwarf.QualType:
			t = x.Type
		default:
			return t
		}
	}
	return t
}

// maxTypeNameDepth bounds the pointers, qualifiers and arrays typeName
// spells out before it stops with "…" (a pointer to itself has no end).
const maxTypeNameDepth = 16

// typeName names a type for messages, C style for C and C++ ("struct
// header *", "char[16]") and by its own DWARF name for Go ("*main.URL").
// It never calls the String method of a type that holds others, which
// recurses without bound on a cyclic type.
func typeName(t dwarf.Type) string { return typeNameDepth(t, 0) }

func typeNameDepth(t dwarf.Type, depth int) string {
	if depth > maxTypeNameDepth {
		return "…"
	}
	if t == nil {
		return "void"
	}
	switch x := t.(type) {
	case *dwarf.StructType:
		n := x.StructName
		switch {
		case n == "":
			return x.Kind + " <anonymous>"
		case strings.Contains(n, ".") || n == "string" || strings.HasPrefix(n, "[]") || strings.HasPrefix(n, "map["):
			return n // Go names its types with their package
		}
		return x.Kind + " " + n
	case *dwarf.EnumType:
		if x.EnumName == "" {
			return "enum <anonymous>"
		}
		return "enum " + x.EnumName
	}
	if n := t.Common().Name; n != "" {
		return n
	}
	switch x := t.(type) {
	case *dwarf.PtrType:
		if x.Type == nil {
			return "void *"
		}
		inner := typeNameDepth(x.Type, depth+1)
		if strings.HasSuffix(inner, "*") {
			return inner + "*"
		}
		return inner + " *"
	case *dwarf.QualType:
		return x.Qual + " " + typeNameDepth(x.Type, depth+1)
	case *dwarf.ArrayType:
		if x.Count < 0 {
			return typeNameDepth(x.Type, depth+1) + "[]"
		}
		return typeNameDepth(x.Type, depth+1) + "[" + strconv.FormatInt(x.Count, 10) + "]"
	case *dwarf.FuncType:
		return "function"
	case *dwarf.TypedefType, *dwarf.StructType, *dwarf.EnumType:
		return "<unnamed>"
	}
	return t.String() // base, void, unspecified and unsupported types: no recursion
}

// typeSize returns a type's size in bytes, or -1 when unknown.
func typeSize(t dwarf.Type) int64 {
	t = resolve(t)
	if t == nil {
		return -1
	}
	if s := t.Size(); s >= 0 {
		return s
	}
	return -1
}

// isCharType reports whether t is a C character type, signed or not.
func isCharType(t dwarf.Type) bool {
	switch x := resolve(t).(type) {
	case *dwarf.CharType, *dwarf.UcharType:
		return true
	case *dwarf.IntType:
		return x.ByteSize == 1 && strings.Contains(x.Name, "char")
	case *dwarf.UintType:
		return x.ByteSize == 1 && strings.Contains(x.Name, "char")
	}
	return false
}

// isUnsignedChar reports whether t is unsigned char or uint8_t-like.
func isUnsignedChar(t dwarf.Type) bool {
	switch x := resolve(t).(type) {
	case *dwarf.UcharType:
		return true
	case *dwarf.UintType:
		return x.ByteSize == 1
	}
	return false
}

// goString, goSlice and goInterface recognize Go's runtime types by the
// names Go's DWARF gives them.
func goString(t dwarf.Type) bool {
	s, ok := resolve(t).(*dwarf.StructType)
	return ok && s.StructName == "string" && len(s.Field) == 2
}

func goSlice(t dwarf.Type) (elem dwarf.Type, ok bool) {
	s, isStruct := resolve(t).(*dwarf.StructType)
	if !isStruct || !strings.HasPrefix(s.StructName, "[]") || len(s.Field) != 3 || s.Field[0].Name != "array" {
		return nil, false
	}
	p, isPtr := resolve(s.Field[0].Type).(*dwarf.PtrType)
	if !isPtr {
		return nil, false
	}
	return p.Type, true
}

func goInterface(t dwarf.Type) bool {
	s, ok := resolve(t).(*dwarf.StructType)
	return ok && (s.StructName == "runtime.iface" || s.StructName == "runtime.eface")
}

// fieldNames lists a struct's field names for messages.
func fieldNames(s *dwarf.StructType) string {
	var names []string
	for _, f := range s.Field {
		if f.Name != "" {
			names = append(names, f.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// findField returns the field of s named name, looking into anonymous
// members (C11 anonymous structs and unions), with its offset from the
// start of s. Go's embedded fields are named by their type and found by
// that name.
func findField(s *dwarf.StructType, name string, depth int) (*dwarf.StructField, int64, bool) {
	for _, f := range s.Field {
		if f.Name == name {
			return f, f.ByteOffset, true
		}
	}
	if depth > 8 {
		return nil, 0, false
	}
	for _, f := range s.Field {
		if f.Name != "" {
			continue
		}
		if inner, ok := resolve(f.Type).(*dwarf.StructType); ok {
			if g, off, ok := findField(inner, name, depth+1); ok {
				return g, f.ByteOffset + off, true
			}
		}
	}
	return nil, 0, false
}

// enumerators returns an enum's values sorted by value.
func enumerators(e *dwarf.EnumType) []fetch.Enumerator {
	out := make([]fetch.Enumerator, 0, len(e.Val))
	for _, v := range e.Val {
		out = append(out, fetch.Enumerator{Name: v.Name, Value: v.Val})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// enumSigned reports whether an enum's values are read as signed: when
// one of its enumerators is negative.
func enumSigned(e *dwarf.EnumType) bool {
	for _, v := range e.Val {
		if v.Val < 0 {
			return true
		}
	}
	return false
}

// describeType names a type and, for messages, what it holds.
func describeType(t dwarf.Type) string {
	r := resolve(t)
	if s, ok := r.(*dwarf.StructType); ok && !goString(r) {
		return fmt.Sprintf("%s (fields: %s)", typeName(t), fieldNames(s))
	}
	return typeName(t)
}
