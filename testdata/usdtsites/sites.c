/*
 * sites.c holds USDT sites placed, instruction by instruction, where a
 * careless tracer puts its breakpoint on the wrong instruction. Each site's
 * note is written by hand (the layout <sys/sdt.h> emits) so that the bytes
 * after the site's nop are exactly the ones a test needs:
 *
 *   sites:branch    a 1-byte nop at the end of an "if" body, followed at the
 *                   join by an 11-byte movq $imm32, g(%rip): fires for one
 *                   call in four.
 *   sites:vex       a 1-byte nop followed by vmovdqu %ymm0, 0x100(%rdi): the
 *                   store must happen on every call.
 *   sites:lock      a 1-byte nop followed by lock incq locked(%rip).
 *   sites:rip       the "nop; nop5" form, with a %rip-relative argument
 *                   (-8@rip_value(%rip)); sites:rip_done closes the span.
 *
 * Built with -DCORRUPT, two more probes have notes that do not match the
 * code: sites:inside points into the middle of a movabs whose immediate is
 * made of 0x90 bytes, sites:notnop at an instruction that is not a nop.
 *
 * Commands on stdin, each answered by one line:
 *   branch N   calls branch(i) for i in 0..N-1     "branch N g=0x..."
 *   vex N      N stores through vex(), each checked "vex N bad=K"
 *   lock N     N locked increments                  "lock N locked=M"
 *   rip N      N calls of rip()                     "rip N"
 *   corrupt N  N calls of corrupt() (with -DCORRUPT) "corrupt N rax=0x..."
 *   exit
 */
#include <stdio.h>
#include <string.h>

/* NOTE emits the stapsdt note of the site at label. */
#define NOTE(label, name, args)                                  \
	".pushsection .note.stapsdt,\"?\",\"note\"\n"            \
	".balign 4\n"                                            \
	".4byte 992f-991f, 994f-993f, 3\n"                       \
	"991: .asciz \"stapsdt\"\n"                              \
	"992: .balign 4\n"                                       \
	"993: .8byte " label "\n"                                \
	".8byte _.stapsdt.base\n"                                \
	".8byte 0\n"                                             \
	".asciz \"sites\"\n"                                     \
	".asciz \"" name "\"\n"                                  \
	".asciz \"" args "\"\n"                                  \
	"994: .balign 4\n"                                       \
	".popsection\n"                                          \
	".ifndef _.stapsdt.base\n"                               \
	".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n" \
	".weak _.stapsdt.base\n"                                 \
	".hidden _.stapsdt.base\n"                               \
	"_.stapsdt.base: .space 1\n"                             \
	".size _.stapsdt.base, 1\n"                              \
	".popsection\n"                                          \
	".endif\n"

long g;
long locked;
long rip_value = 0x1122334455667788;
unsigned char pattern[32] __attribute__((aligned(32)));
unsigned char buf[0x200] __attribute__((aligned(32)));

__attribute__((noinline)) void branch(long i)
{
	__asm__ __volatile__(
		"testq $3, %0\n\t"
		"jne 1f\n\t"
		".globl branch_site\n"
		"branch_site: nop\n\t"
		NOTE("branch_site", "branch", "")
		"1: movq $0x12345678, g(%%rip)\n\t"
		:: "r"(i) : "memory", "cc");
}

__attribute__((noinline)) void vex(unsigned char *p)
{
	__asm__ __volatile__(
		"vmovdqu pattern(%%rip), %%ymm0\n\t"
		".globl vex_site\n"
		"vex_site: nop\n\t"
		NOTE("vex_site", "vex", "")
		"vmovdqu %%ymm0, 0x100(%%rdi)\n\t"
		"vzeroupper\n\t"
		:: "D"(p) : "memory", "xmm0");
}

__attribute__((noinline)) void lock(void)
{
	__asm__ __volatile__(
		".globl lock_site\n"
		"lock_site: nop\n\t"
		NOTE("lock_site", "lock", "")
		"lock incq locked(%%rip)\n\t"
		::: "memory");
}

__attribute__((noinline)) void rip(void)
{
	__asm__ __volatile__(
		".globl rip_site\n"
		"rip_site: nop\n\t"
		".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n\t"
		NOTE("rip_site", "rip", "-8@rip_value(%%rip)")
		".globl rip_done_site\n"
		"rip_done_site: nop\n\t"
		NOTE("rip_done_site", "rip_done", "")
		::: "memory");
}

#ifdef CORRUPT
__attribute__((noinline)) long corrupt(void)
{
	long rax;

	__asm__ __volatile__(
		".globl inside_site\n"
		"inside_site: movabs $0x9090909090909090, %0\n\t"
		NOTE("inside_site+2", "inside", "")
		".globl notnop_site\n"
		"notnop_site: addq $1, %0\n\t"
		NOTE("notnop_site", "notnop", "")
		: "=a"(rax) :: "memory");
	return rax;
}
#endif

int main(void)
{
	char line[64];
	int n;

	memset(pattern, 0xa5, sizeof(pattern));
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "branch %d", &n) == 1) {
			for (long i = 0; i < n; i++)
				branch(i);
			printf("branch %d g=%#lx\n", n, g);
		} else if (sscanf(line, "vex %d", &n) == 1) {
			int bad = 0;
			for (int i = 0; i < n; i++) {
				memset(buf, 0, sizeof(buf));
				vex(buf);
				bad += memcmp(buf + 0x100, pattern, sizeof(pattern)) != 0;
			}
			printf("vex %d bad=%d\n", n, bad);
		} else if (sscanf(line, "lock %d", &n) == 1) {
			locked = 0;
			for (int i = 0; i < n; i++)
				lock();
			printf("lock %d locked=%ld\n", n, locked);
		} else if (sscanf(line, "rip %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				rip();
			printf("rip %d\n", n);
#ifdef CORRUPT
		} else if (sscanf(line, "corrupt %d", &n) == 1) {
			long rax = 0;
			for (int i = 0; i < n; i++)
				rax = corrupt();
			printf("corrupt %d rax=%#lx\n", n, rax);
#endif
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
