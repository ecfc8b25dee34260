package tracer

import (
	"encoding/binary"
	"fmt"
)

// The uretprobe canary is a tiny static x86-64 program, built here in
// memory, that installs a seccomp filter answering EPERM to the uretprobe
// (335) and uprobe (336) system calls, checks that the filter is in force,
// calls one function and exits 0 when it returned 42. With a kernel return
// probe on that function, a kernel from Linux 6.11 without the "seccomp:
// passthrough uretprobe systemcall without filtering" fix (6.12.14, 6.13.3,
// 6.14) lets the filter deny the trampoline's system call, and the
// trampoline then returns to the function's return value: the canary dies
// of SIGSEGV. Containers run under such filters (a runtime's default
// profile denies the system calls it does not know), so on those kernels
// a return probe kills their processes.
//
// The code, at file offset canaryCode (virtual address canaryBase +
// canaryCode), as GNU as assembles it:
var canaryText = []byte{
	0xb8, 0x9d, 0x00, 0x00, 0x00, // 00 mov $157,%eax          prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	0xbf, 0x26, 0x00, 0x00, 0x00, // 05 mov $38,%edi
	0xbe, 0x01, 0x00, 0x00, 0x00, // 0a mov $1,%esi
	0x31, 0xd2, //                   0f xor %edx,%edx
	0x45, 0x31, 0xd2, //             11 xor %r10d,%r10d
	0x45, 0x31, 0xc0, //             14 xor %r8d,%r8d
	0x0f, 0x05, //                   17 syscall
	0x48, 0x85, 0xc0, //             19 test %rax,%rax
	0x75, 0x4d, //                   1c jne 6b                  exit 2: no filter
	0x48, 0x8d, 0x05, 0x73, 0x00, 0x00, 0x00, // 1e lea filter(%rip),%rax
	0x50,       //                   25 push %rax               struct sock_fprog {6, filter} on the stack
	0x6a, 0x06, //                   26 push $6
	0xb8, 0x3d, 0x01, 0x00, 0x00, // 28 mov $317,%eax          seccomp(SECCOMP_SET_MODE_FILTER, 0, %rsp)
	0xbf, 0x01, 0x00, 0x00, 0x00, // 2d mov $1,%edi
	0x31, 0xf6, //                   32 xor %esi,%esi
	0x48, 0x89, 0xe2, //             34 mov %rsp,%rdx
	0x0f, 0x05, //                   37 syscall
	0x48, 0x85, 0xc0, //             39 test %rax,%rax
	0x75, 0x2d, //                   3c jne 6b                  exit 2: no filter
	0xb8, 0x6e, 0x00, 0x00, 0x00, // 3e mov $110,%eax          getppid(): the filter answers EPERM
	0x0f, 0x05, //                   43 syscall
	0x48, 0x83, 0xf8, 0xff, //       45 cmp $-1,%rax
	0x75, 0x2c, //                   49 jne 77                  exit 3: the filter does not filter
	0xe8, 0x40, 0x00, 0x00, 0x00, // 4b call probed
	0x48, 0x83, 0xf8, 0x2a, //       50 cmp $42,%rax
	0x75, 0x09, //                   54 jne 5f                  exit 1: a wrong return value
	0xb8, 0xe7, 0x00, 0x00, 0x00, // 56 mov $231,%eax          exit_group(0)
	0x31, 0xff, //                   5b xor %edi,%edi
	0x0f, 0x05, //                   5d syscall
	0xb8, 0xe7, 0x00, 0x00, 0x00, // 5f mov $231,%eax          exit_group(1)
	0xbf, 0x01, 0x00, 0x00, 0x00, // 64 mov $1,%edi
	0x0f, 0x05, //                   69 syscall
	0xb8, 0xe7, 0x00, 0x00, 0x00, // 6b mov $231,%eax          exit_group(2)
	0xbf, 0x02, 0x00, 0x00, 0x00, // 70 mov $2,%edi
	0x0f, 0x05, //                   75 syscall
	0xb8, 0xe7, 0x00, 0x00, 0x00, // 77 mov $231,%eax          exit_group(3)
	0xbf, 0x03, 0x00, 0x00, 0x00, // 7c mov $3,%edi
	0x0f, 0x05, //                   81 syscall
	0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, // 83 padding
	0x66, 0x90, //                   8e padding
	0x55,                         // 90 probed: push %rbp  (the kernel emulates it)
	0x5d,                         // 91 pop %rbp
	0xb8, 0x2a, 0x00, 0x00, 0x00, // 92 mov $42,%eax
	0xc3, // 97 ret
	// 98 filter: struct sock_filter[6]
	0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ld [0]: the system call number
	0x15, 0x00, 0x03, 0x00, 0x4f, 0x01, 0x00, 0x00, // jeq #335 (uretprobe), deny
	0x15, 0x00, 0x02, 0x00, 0x50, 0x01, 0x00, 0x00, // jeq #336 (uprobe), deny
	0x15, 0x00, 0x01, 0x00, 0x6e, 0x00, 0x00, 0x00, // jeq #110 (getppid), deny
	0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x7f, // ret SECCOMP_RET_ALLOW
	0x06, 0x00, 0x00, 0x00, 0x01, 0x00, 0x05, 0x00, // deny: ret SECCOMP_RET_ERRNO | EPERM
}

// The canary's layout: one PT_LOAD segment of the whole file, read and
// execute, at canaryBase.
const (
	canaryBase   = 0x400000
	canaryCode   = 0x80 // file offset of canaryText, after the ELF and program headers
	canaryProbed = 0x90 // offset of the probed function in canaryText
)

// Exit codes of the canary other than 0 (the probed function returned 42
// and the filter was in force).
const (
	canaryWrongValue = 1
	canaryNoFilter   = 2
	canaryUnfiltered = 3
)

// canaryELF returns the canary as an ELF executable and the file offset of
// the function a return probe goes on.
func canaryELF() (image []byte, probedOffset uint64) {
	image = make([]byte, canaryCode+len(canaryText))
	le := binary.LittleEndian
	// ELF header (Elf64_Ehdr).
	copy(image, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little-endian */, 1 /* version */})
	le.PutUint16(image[16:], 2)                     // e_type: ET_EXEC
	le.PutUint16(image[18:], 62)                    // e_machine: EM_X86_64
	le.PutUint32(image[20:], 1)                     // e_version
	le.PutUint64(image[24:], canaryBase+canaryCode) // e_entry
	le.PutUint64(image[32:], 64)                    // e_phoff
	le.PutUint16(image[52:], 64)                    // e_ehsize
	le.PutUint16(image[54:], 56)                    // e_phentsize
	le.PutUint16(image[56:], 1)                     // e_phnum
	// Program header (Elf64_Phdr): PT_LOAD, R+X, the whole file.
	ph := image[64:]
	le.PutUint32(ph[0:], 1)                   // p_type: PT_LOAD
	le.PutUint32(ph[4:], 5)                   // p_flags: PF_R | PF_X
	le.PutUint64(ph[8:], 0)                   // p_offset
	le.PutUint64(ph[16:], canaryBase)         // p_vaddr
	le.PutUint64(ph[24:], canaryBase)         // p_paddr
	le.PutUint64(ph[32:], uint64(len(image))) // p_filesz
	le.PutUint64(ph[40:], uint64(len(image))) // p_memsz
	le.PutUint64(ph[48:], 0x1000)             // p_align
	copy(image[canaryCode:], canaryText)
	return image, canaryCode + canaryProbed
}

// UretprobeSeccomp is what the receiver found out at Start about kernel
// return probes in processes whose seccomp filter denies the uretprobe
// system call (x86-64, Linux 6.11 and later).
type UretprobeSeccomp struct {
	// Hazard says such a process dies when a kernel return probe fires in
	// it.
	Hazard bool
	// Measured says a canary process found it out; otherwise it was
	// decided from the kernel's symbols or release.
	Measured bool
	// Reason says how, in one phrase, e.g. "a canary process whose
	// seccomp filter denies the uretprobe system call died of SIGSEGV at
	// its probed function's return".
	Reason string
}

// canaryVerdict interprets a canary run: how it ended (exit code, or the
// signal that killed it) and how often the return probe fired. ok is false
// when the run proves nothing (the canary could not set its filter, or the
// probe never fired although the canary returned).
func canaryVerdict(exitCode int, signal string, hits uint64) (v UretprobeSeccomp, ok bool) {
	const who = "a canary process whose seccomp filter denies the uretprobe system call"
	switch {
	case signal != "":
		return UretprobeSeccomp{Hazard: true, Measured: true,
			Reason: fmt.Sprintf("%s died of %s at its probed function's return", who, signal)}, true
	case exitCode == canaryWrongValue:
		return UretprobeSeccomp{Hazard: true, Measured: true,
			Reason: who + " got a wrong return value from its probed function"}, true
	case exitCode == 0 && hits >= 1:
		return UretprobeSeccomp{Measured: true,
			Reason: fmt.Sprintf("%s ran on right under a return probe that fired %d time(s)", who, hits)}, true
	}
	// The probe did not fire, or the canary could not set or check its
	// filter (canaryNoFilter, canaryUnfiltered): nothing learned.
	return UretprobeSeccomp{}, false
}

// uretprobeSeccompByRelease decides from the kernel's release, when no
// canary could run: the uretprobe system call came with Linux 6.11, the
// seccomp passthrough with 6.14 and the stable releases 6.12.14 and 6.13.3.
// Distribution kernels that backported it are taken for unfixed: the
// canary is what tells them apart.
func uretprobeSeccompByRelease(release string) UretprobeSeccomp {
	var major, minor, patch int
	n, _ := fmt.Sscanf(release, "%d.%d.%d", &major, &minor, &patch)
	if n < 2 {
		return UretprobeSeccomp{Hazard: true, Reason: fmt.Sprintf("the kernel's release %q could not be read, and it has the uretprobe system call", release)}
	}
	fixedIn := map[int]int{12: 14, 13: 3} // 6.minor: first fixed patch release
	hazard := false
	switch {
	case major != 6, minor < 11, minor >= 14:
		// Before 6.11 there is no uretprobe system call; later, it passes.
	case minor == 11:
		hazard = true
	default:
		hazard = patch < fixedIn[minor]
	}
	if !hazard {
		return UretprobeSeccomp{Reason: fmt.Sprintf("Linux %s has the seccomp passthrough of the uretprobe system call (6.12.14, 6.13.3, 6.14 and later)", release)}
	}
	return UretprobeSeccomp{Hazard: true, Reason: fmt.Sprintf("Linux %s has the uretprobe system call (6.11) but not, by its release, its seccomp passthrough (6.12.14, 6.13.3, 6.14)", release)}
}
