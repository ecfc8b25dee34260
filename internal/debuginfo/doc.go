// Package debuginfo turns names into fetches: it reads a traced file's
// DWARF and compiles paths such as $req->hdr->name, $r.URL.Path or
// $return, at a function's entry, at a return or at a source line, into
// the engine's terms (those of plan.Fetch: a base register or constant,
// a displacement, dereference offsets, a last read size, and how to store
// and show the value). It is pure Go: it opens files, and debuginfod when
// asked, but never touches the kernel.
//
// # Where debuginfo comes from
//
// Open tries, in order: the file itself (.debug_info, compressed or not);
// DIR/.build-id/xx/rest.debug under each Options.DebugDirs root (default
// /usr/lib/debug); the .gnu_debuglink file next to the file, in its .debug/
// directory and under each root (its CRC32 must match); and an
// Options.Debuginfod client (GET <url>/buildid/<hex>/debuginfo into a
// bounded on-disk cache; NewDebuginfodFromEnv reads DEBUGINFOD_URLS). A
// separate file must carry the traced file's GNU build id. Compressed
// sections are decompressed by debug/elf: SHF_COMPRESSED zlib and zstd (Go
// 1.21+ decompresses ELFCOMPRESS_ZSTD itself, so no zstd library is
// needed) and the legacy .zdebug_* zlib sections.
//
// # Hostile files
//
// Every file is read as a tenant could have written it. Each debug
// section is read once, after the declared sizes of all of them together
// were checked against one budget per file (Options.MaxBytes, default
// DefaultMaxBytes, 128 MiB), and never past what it declares; what is
// decoded (unit headers, abbreviations, functions, globals, line-table
// files, types) is charged to the same budget (ErrOverBudget). Types are
// read by a work list, not by debug/dwarf's recursive Type; chains of
// typedefs, qualifiers and arrays that cycle or exceed 64 are refused
// (ErrMalformed); DIEs are skipped without recursion. Type units (see
// below) are counted and charged, with their signatures, before any is
// decoded, and followed by the same work list: declarations by signature
// that cycle or exceed 8 in a row are refused, a signature no unit has is
// refused, and a .debug_types that cannot be read (malformed, over the
// budget) leaves out only the types that live there, refused with the
// reason when named. CheckELF checks a file's other compressed
// sections and symbol tables before anything reads them. .eh_frame always comes from the traced
// file (--only-keep-debug leaves it empty in the debug file). With no DWARF
// anywhere the error wraps ErrNoDebugInfo and lists every place looked in;
// a Go binary linked with -ldflags=-w is named as such.
//
// # Type units
//
// Types moved into type units by -fdebug-types-section (GCC for C and
// C++, clang for C++ only) are read: the units of .debug_types (DWARF 4)
// and the DW_UT_type units of .debug_info (DWARF 5), named by
// DW_FORM_ref_sig8 or by a declaration carrying DW_AT_signature (which
// stands for the type of that signature); paths through them compile as
// they do without type units. debug/dwarf reads the DIEs of .debug_info
// only (its own reading of .debug_types recurses through signatures
// without bound), so the header of each .debug_types unit, a compile
// unit's header followed by the signature and the type offset, is read
// and those two fields zeroed (null entries), and the section is read as
// a .debug_info of its own, offsets unchanged. A reference from a
// .debug_types unit must stay inside it. Of units sharing a signature
// the first is used.
//
// Split DWARF (-gsplit-dwarf: skeleton units whose DIEs are in .dwo files
// or a .dwp package, and their DW_UT_split_type units) is not read: a
// function or line looked up in such a file is refused saying so.
//
// # Functions
//
// File.Functions lists every DW_TAG_subprogram with code, with its name,
// linkage name, demangled names (Itanium C++ and Rust, by
// github.com/ianlancetaylor/demangle), compile unit path, declaration file
// and line, entry address and ranges. Selectors (ParseSelector) match a Glob
// against every name of a function (so "srv::Server::handle",
// "srv::Server::handle(int)", the mangled name and C's plain name all work)
// and optionally "source_file:GLOB" against its unit or declaration path.
// In a Glob "*" matches any run of characters, separators included, and a
// "*" right after "(" is literal, so "main.(*Server).*" selects Go methods
// as written; see Glob.
//
// # Locations
//
// A Scope (File.Scope) holds the variables visible at one pc for one kind
// of probe (SiteEntry, SiteReturn, SiteLine): the function's parameters,
// locals of the lexical blocks and inlined calls that hold the pc, results
// at a return, and globals. Each variable's location at that pc comes from
// its DWARF expression or location list (DWARF 4 .debug_loc and DWARF 5
// .debug_loclists, every DW_LLE_* kind, GCC's view pairs, DW_FORM_loclistx
// with DW_AT_loclists_base, .debug_addr indexes). Supported operations:
//
//   - DW_OP_regN, DW_OP_regx: the value is in a register.
//   - DW_OP_bregN, DW_OP_bregx, DW_OP_fbreg (with DW_AT_frame_base, itself
//     an expression or location list), DW_OP_call_frame_cfa: memory at a
//     register plus an offset. The CFA comes from a small CFI interpreter
//     over .eh_frame and .debug_frame (def_cfa, def_cfa_sf,
//     def_cfa_register, def_cfa_offset(_sf), advance_loc*, set_loc,
//     remember/restore_state; register rules are parsed and ignored); at a
//     function's first instruction without CFI it is sp+8 on x86-64, sp on
//     arm64.
//   - DW_OP_addr, DW_OP_addrx: globals and statics. A link-time address is
//     used as is in a non-PIE executable (ET_EXEC), made rip-relative at a
//     known pc on x86-64 in a PIE or shared library (the engine reads the
//     probed instruction's runtime address in rip), and refused after a
//     return (a uretprobe's rip is in the caller) or on arm64.
//   - constants and DW_OP_lit/const*, DW_OP_plus_uconst, DW_OP_plus and
//     DW_OP_minus with a constant, DW_OP_deref (8 bytes), dup, drop, over,
//     pick, swap, rot, nop; DW_OP_stack_value of such a value (a register
//     plus a constant, a constant, a chain of reads), DW_OP_implicit_value
//     up to 8 bytes, DW_AT_const_value.
//   - DW_OP_entry_value(DW_OP_regN): the register itself, only at the
//     function's entry; elsewhere ErrOptimizedOut.
//   - DW_OP_piece and whole-byte DW_OP_bit_piece: a value in pieces (Go
//     strings, slices and interfaces in registers, C structs by value). A
//     path selects the piece holding a field.
//
// Anything else (arithmetic on registers, shifts, DW_OP_convert and typed
// stack ops, TLS, branches) fails with ErrTooComplex naming the operation;
// empty expressions, uncovered pcs, DW_OP_implicit_pointer and entry values
// away from the entry fail with ErrOptimizedOut.
//
// At SiteEntry a location given by one expression for the whole function
// that lies below the stack pointer or relative to the frame pointer is a
// stack slot the prologue has not written yet (GCC and clang at -O0): such
// parameters get the place the SysV x86-64 calling convention passes them
// in instead (integer-class eightbytes in rdi, rsi, rdx, rcx, r8, r9;
// memory-class and overflow arguments at rsp+8 onwards; the hidden struct
// return pointer takes rdi), and SSE-class ones are refused. At SiteReturn
// slots below the stack pointer are refused (the frame is popped).
//
// Results: a C function's return value at SiteReturn (a uretprobe, pc 0)
// is rax, or rax and rdx for a two-eightbyte integer struct, or memory at
// rax for a struct returned through the hidden pointer; SSE returns are
// refused (arm64: x0 for integers and pointers). A Go function's results
// are read at its RET instructions (SiteReturn with that pc) from the
// registers Go's ABIInternal assigns them (amd64: rax, rbx, rcx, rdi, rsi,
// r8..r11; arm64: x0..x15; floats count against their own registers),
// computed from the result types, since Go's DWARF describes results only as
// stack slots (-N -l, below the stack pointer at the RET) or not at all.
// Results the ABI puts on the stack are refused. $return is the first
// result; named results by name; unnamed later ones by Go's DWARF names
// $~r1, $~r2, ….
//
// # Paths
//
// ParsePath parses $name, then any of ->field, .field (either follows a
// pointer when the value is one) and [N] (arrays, pointers, Go slices);
// $return; and $$params (every parameter of the innermost function at the
// pc, CompileParams). Scope.Compile gives an Access with the type's default
// kind; Scope.CompileAs stores it as a requested fetch.Type:
//
//   - integers, bool and enums by size and sign (enums with their
//     value-to-name table, Access.Enum, and FormatEnum for flags);
//   - pointers as x64; char * as a string at the pointer; char[N] as
//     string[N] at the array; unsigned char[N] (and Go [N]byte) as bytes[N];
//   - Go string as gostring (a pointer and length in two registers, or the
//     16-byte header in memory); []byte as gostring of its bytes; other
//     slices as their length; interfaces as their type word (0 is nil);
//   - structs, unions, other arrays, floats and void are refused with
//     ErrNotFetchable, naming the fields or suggesting [N] or bytes[N].
//
// Errors name the function, the site, the path walked so far, the variable,
// and, for unknown names, what is in scope.
//
// # Lines
//
// File.Lines finds where FILE:LINE starts (FILE is a path suffix of the line
// table's file names): the lowest is_stmt address of the line in each
// block (lexical block, inlined call or function) holding one, as gdb
// places breakpoints; one site per inlined or duplicated copy. A line
// without code is an error naming the nearest lines with code.
//
// # Machines
//
// DWARF register numbers map to package regs per ELF machine (Arch):
// x86-64 0..16 are rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8..r15, rip;
// arm64 0..30 are x0..x30 and 31 sp. Locations, CFI, types and Go results
// work on both; the SysV entry fallback and C struct returns are x86-64
// only.
//
// The package does not apply relocations, so relocatable objects (ET_REL)
// are not supported; nested functions are not listed; a File and its Scopes
// must not be used concurrently.
package debuginfo
