/*
 * redzone keeps values in the x86-64 red zone (the 128 bytes below %rsp)
 * across USDT sites of the "nop; nop5" form, to check that no probe changes
 * what it computes: a uprobe on the 5-byte nop becomes, on kernels with the
 * optimized uprobe path (Linux 6.17, x86-64), a call whose return address
 * (and the trampoline's pushes) land below %rsp.
 *
 * Functions, written in assembly so that the compiler cannot move the value
 * elsewhere:
 *   leaf(x)  keeps x at -8(%rsp) across the site redzone:leaf and returns
 *            x + 1 read back from there (the nop5 is at leaf+0x6);
 *   slots(x) keeps x ^ i at -8*(i+1)(%rsp) for i = 0..15 across the site
 *            redzone:slots and returns the mask of the slots that changed;
 *   safe(x)  returns x + 1 from registers, with the site redzone:safe (the
 *            nop5 is at safe+0x5): nothing below %rsp is live there.
 *
 * Commands on stdin: "leaf N" calls leaf(i) for i < N and prints "leaf N
 * wrong=W"; "safe N" likewise; "slots" prints "slots MASK" (hex); "exit".
 */
#include <stdio.h>
#include <string.h>

long leaf(long x);
long slots(long x);
long safe(long x);

#define NOTE(provider, name, site)                                             \
	".pushsection .note.stapsdt,\"?\",\"note\"\n"                          \
	".balign 4\n"                                                          \
	".4byte 992f-991f, 994f-993f, 3\n"                                     \
	"991: .asciz \"stapsdt\"\n"                                            \
	"992: .balign 4\n"                                                     \
	"993: .8byte " site "\n"                                               \
	".8byte _.stapsdt.base\n"                                              \
	".8byte 0\n"                                                           \
	".asciz \"" provider "\"\n"                                            \
	".asciz \"" name "\"\n"                                                \
	".asciz \"\"\n"                                                        \
	"994: .balign 4\n"                                                     \
	".popsection\n"

__asm__(
	".ifndef _.stapsdt.base\n"
	".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"
	".weak _.stapsdt.base\n"
	".hidden _.stapsdt.base\n"
	"_.stapsdt.base: .space 1\n"
	".size _.stapsdt.base, 1\n"
	".popsection\n"
	".endif\n"

	".text\n"
	".globl leaf\n"
	".type leaf, @function\n"
	"leaf:\n"
	"	mov %rdi, -8(%rsp)\n"        /* 48 89 7c 24 f8: x below %rsp */
	".Lleaf_site: nop\n"
	"	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nopl 0x0(%rax,%rax,1) */
	"	mov -8(%rsp), %rax\n"
	"	add $1, %rax\n"
	"	ret\n"
	".size leaf, .-leaf\n"
	NOTE("redzone", "leaf", ".Lleaf_site")

	".globl slots\n"
	".type slots, @function\n"
	"slots:\n"
	"	xor %ecx, %ecx\n"
	"1:	mov %rdi, %rax\n"
	"	xor %rcx, %rax\n"
	"	mov %rcx, %rdx\n"
	"	neg %rdx\n"
	"	mov %rax, -8(%rsp,%rdx,8)\n"
	"	inc %rcx\n"
	"	cmp $16, %rcx\n"
	"	jne 1b\n"
	".Lslots_site: nop\n"
	"	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
	"	xor %eax, %eax\n"
	"	xor %ecx, %ecx\n"
	"2:	mov %rcx, %rdx\n"
	"	neg %rdx\n"
	"	mov -8(%rsp,%rdx,8), %rsi\n"
	"	xor %rdi, %rsi\n"
	"	cmp %rcx, %rsi\n"
	"	je 3f\n"
	"	bts %rcx, %rax\n"
	"3:	inc %rcx\n"
	"	cmp $16, %rcx\n"
	"	jne 2b\n"
	"	ret\n"
	".size slots, .-slots\n"
	NOTE("redzone", "slots", ".Lslots_site")

	".globl safe\n"
	".type safe, @function\n"
	"safe:\n"
	"	lea 1(%rdi), %rax\n"         /* 48 8d 47 01 */
	".Lsafe_site: nop\n"
	"	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
	"	ret\n"
	".size safe, .-safe\n"
	NOTE("redzone", "safe", ".Lsafe_site"));

int main(void)
{
	char line[64];
	long n;

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "leaf %ld", &n) == 1) {
			long wrong = 0;
			for (long i = 0; i < n; i++)
				wrong += leaf(i) != i + 1;
			printf("leaf %ld wrong=%ld\n", n, wrong);
		} else if (sscanf(line, "safe %ld", &n) == 1) {
			long wrong = 0;
			for (long i = 0; i < n; i++)
				wrong += safe(i) != i + 1;
			printf("safe %ld wrong=%ld\n", n, wrong);
		} else if (strncmp(line, "slots", 5) == 0) {
			long mask = 0;
			for (int i = 0; i < 3; i++) /* the first hit takes the int3 path */
				mask |= slots(0x5a5a5a5a5a5a5a5aL);
			printf("slots %#lx\n", mask);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
