// Package usdt reads the USDT probes (statically defined tracepoints, the
// SystemTap "sdt" format that DTrace-style probes in C programs compile to)
// of an ELF file, in pure Go.
//
// # Probe sites
//
// A program marks a probe with a macro from <sys/sdt.h>, such as
// DTRACE_PROBE2(provider, name, a, b). The macro costs almost nothing: it
// makes the compiler place a nop instruction (a 1-byte nop with Debian's
// header; newer headers emit a nop followed by a 5-byte nop) at that point of
// the code, the probe site, and emit an ELF note that describes the site. A
// tracer attaches a uprobe to the site, and the kernel runs the tracer's
// program every time the nop executes. The macro also tells the compiler to
// keep the probe's arguments somewhere it can name (a register, a stack
// slot, a constant) and records those names in the note.
//
// # Notes
//
// Every site has one note in the non-allocated section .note.stapsdt, with
// owner "stapsdt" and type 3. After the usual note header (namesz, descsz,
// type; the owner name padded to 4 bytes) the descriptor holds three
// address-sized words, whose size and byte order are those of the ELF file:
// the virtual address of the site, the link-time virtual address of the
// .stapsdt.base section, and the virtual address of the probe's semaphore
// (0 when it has none). Three NUL-terminated strings follow: the provider,
// the probe name and the argument specs.
//
// # The .stapsdt.base adjustment
//
// The note holds addresses as the linker wrote them. If a tool such as
// prelink later moves the file to another base, it updates the .stapsdt.base
// section's address but not the note, because .note.stapsdt is not
// allocated. So when the file has a .stapsdt.base section, the site's
// virtual address and a non-zero semaphore virtual address are adjusted by
// (the section's address - the note's base word). In a file that was never
// moved the adjustment is 0.
//
// # Virtual addresses and file offsets
//
// The addresses in a note are virtual addresses: where the bytes live once
// the file is mapped (for a PIE executable or a shared library, relative to
// the load bias chosen at run time). The kernel attaches uprobes to an inode
// and a file offset instead, so that one attachment covers every process
// that maps the file, wherever it maps it. A virtual address is converted to
// a file offset through the PT_LOAD program header segment that contains it:
// file offset = virtual address - p_vaddr + p_offset (see internal/elfaddr).
// For a non-PIE executable linked at 0x400000 the two differ by about that
// base; for a PIE executable or a shared library the code often has a file
// offset equal to its virtual address, while the data segment does not.
//
// # Semaphores
//
// A probe may have a semaphore: a 16-bit counter in a writable data section
// (.probes) that the program tests before it computes costly arguments, so
// that the probe is free when nobody traces it ("is-enabled" probes). The
// tracer must make the counter non-zero while it is attached. Kernels 4.20
// and later do this themselves: a uprobe created with a reference-counter
// file offset (UprobeOptions.RefCtrOffset in cilium/ebpf, the semaphore's
// file offset computed like a site's) increments the counter in every
// process mapping the file, including processes started later, and
// decrements it on detach.
//
// # Several sites per probe
//
// One provider:name probe may have several sites: the macro written twice,
// or once in an inlined function or a macro expanded in several places. Each
// site has its own note with its own argument specs, because the compiler
// allocates registers differently at each place. A tracer attaches to every
// site of a probe. [Probes] groups the notes by provider and name.
//
// # Argument specs
//
// The argument specs are separated by spaces, one per argument, in the form
// [-]SIZE[f]@OPERAND: a minus sign marks a signed value, SIZE is the width in
// bytes (1, 2, 4 or 8), an "f" marks a floating-point value, and OPERAND is
// an operand in the assembler's syntax, for x86-64 the AT&T syntax:
//
//	8@%rax                 a register (or part of one: %eax, %ax, %al, %ah, %r8d, …)
//	-4@-140(%rbp)          memory at DISP(BASE)
//	1@-96(%rbp,%rax,8)     memory at DISP(BASE,INDEX,SCALE)
//	-4@counter+8(%rip)     memory at a symbol's virtual address plus a displacement
//	-4@$5                  a constant
//
// On arm64 OPERAND is in the GNU assembler's arm64 syntax, and a memory
// operand holds a space, so specs are separated by spaces outside brackets:
//
//	-4@x0                  a register (x0…x30, sp, or w0…w30 for the low 4 bytes)
//	-8@[sp, 16]            memory at [BASE, DISP]
//	8@[x2]                 memory at [BASE]
//	1@[x4, x3]             memory at [BASE, INDEX]
//	-8@[x7, #:lo12:counter] memory at BASE + the low 12 bits of counter's address
//	-4@5                   a constant
//
// Both gcc and clang write these through <sys/sdt.h>, whose default operand
// constraint "nor" allows only a register, an offsettable memory operand or
// a constant; clang tends to put every argument in memory addressed by a
// register ("-4@[x8]"). Floating-point values appear as "8f@x2" or
// "8f@[x1, 32]": the constraint keeps them out of the vector registers.
//
// [ParseArgs] parses x86-64 specs; [ParseArgsFor] parses the specs of
// either architecture, chosen by the file's e_machine (never the host's);
// the argument specs of other architectures are kept as text only.
package usdt
