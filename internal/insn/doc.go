// Package insn decodes and classifies x86-64 and arm64 machine code so that
// the receiver places uprobes only where they are safe and, among safe
// places, where they are cheap.
//
// # Why
//
// A uprobe is an int3 byte that the kernel writes over the first byte of an
// instruction. Written anywhere else, in the middle of an instruction, it
// changes what the instruction means and corrupts the traced program. The
// only way to know where instructions start is to decode the enclosing
// function from its first byte, which is what [Decode] does; [Boundary] then
// refuses any offset that is not the start of a decoded instruction.
//
// Where the probe sits also decides what it costs. When the probe fires, the
// kernel either emulates the probed instruction itself (about 0.5 µs per hit
// for push, nops, jmp, call and jcc) or copies it to a scratch page and
// single-steps it there (about 11 µs per hit for everything else, including
// endbr64, mov, sub, cmp and ret). A 5-byte nop can even be rewritten into a
// call to a trampoline (about 0.4 µs). [Classify] predicts which of these the
// kernel does; [CheapEntry] and [GoEntry] use it to pick entry probe
// locations, and [Returns] finds the RET instructions that Go return probes
// must use because kernel uretprobes crash Go programs.
//
// # Decoding
//
// Decoding uses golang.org/x/arch/x86/x86asm, the decoder behind the Go
// toolchain's own disassembler, in 64-bit mode. Decode patches the gaps of
// x86asm v0.32.0 that showed up when comparing it with objdump on about
// 540,000 functions (python3.11, postgres, the 80 largest libraries in
// /usr/lib/x86_64-linux-gnu, the Go toolchain):
//
//   - the hint-NOP opcode space 0f 18–0f 1f, which holds endbr64 and endbr32
//     (the first instruction of every function built with
//     -fcf-protection), rdssp and the MPX instructions: x86asm does not know
//     0f 19–0f 1e and returns a lone prefix for endbr64;
//   - other 0f-map instructions it does not know (rdpkru, rdpid, adcx, adox,
//     serialize and other forms of groups 7, 9 and 15, VIA PadLock);
//   - 3-byte-VEX instructions of the 0f 38 and 0f 3a maps it does not know
//     (mulx, AMD FMA4) and AMD XOP instructions;
//   - prefixes it rejects although they do not change the length (addr32 or
//     a segment override before a VEX instruction, which OpenSSL uses as
//     padding);
//   - vzeroupper and vzeroall, whose length x86asm gets wrong (it reads a
//     ModRM byte they do not have and so swallows the next instruction,
//     often the RET after them).
//
// For these, the length is computed from the encoding, asking x86asm only
// how long the ModRM/SIB/displacement part is. Remaining gaps are rare
// enough to be errors: the survey above hit one (a function of
// libcrypto that embeds a text string), and objdump agreed on every
// instruction boundary of every function Decode accepted, apart from the
// x87 case below.
//
// # Limits
//
// Decode is a linear sweep, like objdump: it assumes that the function's
// bytes are instructions one after the other. gcc, clang and the Go compiler
// put jump tables and constants in read-only data sections, not between
// instructions, so this holds for compiled code; hand-written assembly may
// embed data, and x87 code shows one harmless difference (objdump prints
// fwait and the following fnstcw as one "fstcw", while they are two
// instructions). To catch a sweep that has lost step, Decode checks that every
// direct jump or call into the function lands on an instruction boundary and
// fails otherwise; the one exception is a jump over the lock prefix of an
// atomic instruction, a glibc idiom, whose target is not made a boundary.
// gcc moves the unlikely parts of a function into a separate function
// (name.cold), so a C function's code, and its RETs, may lie in two places. Bytes that cannot be decoded end the sweep with an error
// naming their offset, except when they follow an unconditional jump, a
// return or a trap and look like padding (int3, nop or zero fill cut short),
// which is how compilers pad functions to their alignment.
//
// Classify mirrors the behaviour of Linux 6.18 on x86-64, measured with
// uprobes on each kind of instruction: which instructions it emulates
// (push %reg, the canonical nops of up to 8 bytes, jmp/call/jcc rel8/rel32),
// which 5-byte nops it optimizes, which instructions it refuses
// (segment-override and lock prefixes, int3, in/out, hlt, 66-prefixed
// branches and the VEX/EVEX instructions whose opcode byte the kernel looks up
// in its one-byte opcode table, such as vmovdqu and vpxor), and which it
// mishandles (VEX/EVEX instructions whose opcode byte is that of a jcc, jmp,
// call or nop are "emulated" as that branch, so the instruction is skipped;
// xchg %r8,%rax is skipped as a nop). Newer kernels emulate more kinds of
// instruction; Classify then errs on the slow side. An optimized 5-byte nop
// must also not straddle a page boundary, which depends on the address and
// not only on the bytes.
//
// # The red zone
//
// The x86-64 ABI lets a function keep data in the 128 bytes below %rsp (the
// red zone) as long as it calls nothing; signal handlers skip them. The
// optimized uprobe path of Linux 6.17 and later does not: after the first
// hit it rewrites a uprobe's 5-byte nop into a call to a trampoline, and the
// call and the trampoline's pushes write the 32 bytes below %rsp (measured:
// a leaf function keeping a value at -8(%rsp) across such a site returned
// the wrong value on 99,999 of 100,000 calls). [RedZone] proves, from a
// function's code, where nothing below %rsp is live, and the receiver puts
// a probe on a 5-byte nop only there: at a function's entry, where the
// caller's call left nothing below the return address; on the endbr64 and
// nops that start a function; and anywhere in a function that never
// addresses memory below its stack pointer. It tracks %rsp and the
// registers derived from it from the entry, and counts as a use whatever it
// cannot follow (an index register on the frame, %rsp moved by an unknown
// amount, an instruction it does not know, a jump to code it cannot see):
// about 3% of the functions of Debian's libc and bash, 6% of postgres's
// (built with frame pointers, whose leaf functions do use the red zone).
//
// The other kernel paths that write to a traced program: the int3 path
// (emulated or single-stepped instructions) writes only what the probed
// instruction writes. A kernel return probe replaces the return address on
// the stack with its trampoline's at entry; on x86-64 from Linux 6.11 the
// trampoline then pushes %rax, %rcx and %r11 below the caller's %rsp and
// makes the uretprobe system call, which restores them. Writing there is
// safe: at a call site everything below the caller's %rsp belongs to the
// callee, which may overwrite it. The replaced return address is not: any
// code that reads it sees the trampoline. Go's runtime moves and scans
// stacks (so Go return probes go on RET instructions, see [Returns]), and
// an unwinder cannot step through the trampoline: a C++ exception (or a
// forced unwind, or a Rust panic) that propagates through a function with a
// kernel return probe ends in std::terminate (measured: a program catching
// an exception thrown through a uretprobe'd function aborts). An exception
// only comes out of code a function runs while its frame is live, so
// [FirstCall] finds whether a function calls other code or hands its frame
// over (a tail call): the receiver probes the returns of such functions of
// files that unwind exceptions on their RET instructions, which changes no
// stack. [Transfers] says where each such instruction goes (a function, a
// PLT or GOT slot, a jump table, an unknown pointer), from which the
// receiver follows a C file's call graph to the callbacks an exception
// could come from. The BPF engine only reads the traced program's memory and
// registers (bpf_probe_read_user); it writes neither.
//
// # arm64
//
// [DecodeARM64] and [ClassifyARM64] do the same for arm64 code (the
// architecture comes from the traced file's e_machine; [DecodeFor] and
// [ClassifyFor] choose by it). Every arm64 instruction is 4 bytes, so the
// boundaries are the multiples of 4 and the sweep cannot lose step;
// golang.org/x/arch/arm64/arm64asm only names the instructions, and words it
// does not know are still instructions. The kernel plants a BRK instead of
// int3 and decides by the instruction's bits (arch/arm64/kernel/probes/
// decode-insn.c): it simulates branches, adr/adrp and (since Linux 6.13)
// nop, which [ClassifyARM64] calls Emulated; steps most other instructions
// out of line (SingleStepped); and refuses exclusive loads and stores,
// literal loads, exception-generating instructions, msr, mrs of DAIF, the
// PAC authentication hints and other hints, and the authenticating branches
// (Unsupported, error EINVAL). The SIMD&FP literal load slips through its
// literal check and is stepped at the wrong address (Unsafe). No arm64
// instruction is optimizable. [CheapEntry] is always the first instruction
// of a C function on arm64, and [GoEntry] recognizes Go's arm64 stack check
// (ldr x16, [x28, #16]; cmp; b.ls to morestack).
package insn
