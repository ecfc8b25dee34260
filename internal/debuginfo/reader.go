package debuginfo

import (
	"bytes"
	"debug/dwarf"
	"encoding/binary"
	"fmt"
)

// reader decodes the integers of DWARF and CFI from a byte slice. The first
// error sticks: later reads return zero, and err says where it happened.
type reader struct {
	b     []byte
	off   uint64
	order binary.ByteOrder
	err   error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s at offset %#x past the end (%d bytes): %w", what, r.off, len(r.b), ErrMalformed)
	}
}

func (r *reader) eof() bool { return r.err != nil || r.off >= uint64(len(r.b)) }

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) || r.off > uint64(len(r.b))-n {
		r.fail(fmt.Sprintf("%d bytes", n))
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) u8() uint8 {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16() uint16 {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return r.order.Uint16(b)
}

func (r *reader) u32() uint32 {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return r.order.Uint32(b)
}

func (r *reader) u64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return r.order.Uint64(b)
}

// cstring reads a NUL-terminated string, without the NUL.
func (r *reader) cstring() []byte {
	if r.err != nil {
		return nil
	}
	rest := r.b[min(r.off, uint64(len(r.b))):]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		r.fail("a NUL-terminated string")
		return nil
	}
	r.off += uint64(i) + 1
	return rest[:i]
}

// addr reads an address of size bytes (1, 2, 4 or 8).
func (r *reader) addr(size int) uint64 {
	switch size {
	case 1:
		return uint64(r.u8())
	case 2:
		return uint64(r.u16())
	case 4:
		return uint64(r.u32())
	case 8:
		return r.u64()
	}
	if r.err == nil {
		r.err = fmt.Errorf("address size %d: %w", size, ErrMalformed)
	}
	return 0
}

// offset reads a section offset: 8 bytes in 64-bit DWARF, else 4.
func (r *reader) offset(dwarf64 bool) uint64 {
	if dwarf64 {
		return r.u64()
	}
	return uint64(r.u32())
}

// uleb reads an unsigned LEB128; bits past 64 are an error.
func (r *reader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		} else if c&0x7f != 0 {
			r.err = fmt.Errorf("LEB128 at offset %#x overflows 64 bits: %w", r.off, ErrMalformed)
			return 0
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
		if shift > 70*7 {
			r.err = fmt.Errorf("LEB128 at offset %#x too long: %w", r.off, ErrMalformed)
			return 0
		}
	}
}

// sleb reads a signed LEB128.
func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	var c uint8
	for {
		c = r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			break
		}
		if shift > 70*7 {
			r.err = fmt.Errorf("LEB128 at offset %#x too long: %w", r.off, ErrMalformed)
			return 0
		}
	}
	if shift < 64 && c&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

// skipChildren moves r, which has just read e, past e's children, as
// dwarf.Reader.SkipChildren does but without recursion (which a DIE
// nested a few million deep turns into a fatal stack overflow): to its
// DW_AT_sibling when that lies ahead, else by walking the subtree with a
// depth count.
func skipChildren(r *dwarf.Reader, e *dwarf.Entry) error {
	if !e.Children {
		return nil
	}
	if sib, ok := e.Val(dwarf.AttrSibling).(dwarf.Offset); ok && sib > e.Offset {
		r.Seek(sib)
		return nil
	}
	for depth := 1; depth > 0; {
		kid, err := r.Next()
		if err != nil {
			return err
		}
		if kid == nil {
			return fmt.Errorf("children of DIE %#x: no terminator: %w", e.Offset, ErrMalformed)
		}
		switch {
		case kid.Tag == 0:
			depth--
		case kid.Children:
			if sib, ok := kid.Val(dwarf.AttrSibling).(dwarf.Offset); ok && sib > kid.Offset {
				r.Seek(sib)
			} else {
				depth++
			}
		}
	}
	return nil
}
