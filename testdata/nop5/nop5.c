/*
 * nop5 has one USDT probe, nop5:hit, in the newer "nop; nop5" form that
 * newer <sys/sdt.h> headers emit (Debian 12's still emits a 1-byte nop): a
 * kernel with the optimized uprobe path (Linux 6.17, x86-64) rewrites a
 * uprobe on the 5-byte nop into a call after its first hit.
 *
 * Commands on stdin: "hit N" fires the probe N times and prints "hit N";
 * "site" prints "site 0xADDR" (the probe site's address, which is its run-time
 * address: build with -no-pie); "exit".
 */
#include <stdio.h>
#include <string.h>

extern char nop5_site[];

__attribute__((noinline)) void hit(void)
{
	__asm__ __volatile__(
		".globl nop5_site\n"
		"nop5_site: nop\n"
		".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nopl 0x0(%%rax,%%rax,1) */
		".pushsection .note.stapsdt,\"?\",\"note\"\n"
		".balign 4\n"
		".4byte 992f-991f, 994f-993f, 3\n"
		"991: .asciz \"stapsdt\"\n"
		"992: .balign 4\n"
		"993: .8byte nop5_site\n"
		".8byte _.stapsdt.base\n"
		".8byte 0\n"
		".asciz \"nop5\"\n"
		".asciz \"hit\"\n"
		".asciz \"\"\n"
		"994: .balign 4\n"
		".popsection\n"
		".ifndef _.stapsdt.base\n"
		".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"
		".weak _.stapsdt.base\n"
		".hidden _.stapsdt.base\n"
		"_.stapsdt.base: .space 1\n"
		".size _.stapsdt.base, 1\n"
		".popsection\n"
		".endif\n" ::: "memory");
}

int main(void)
{
	char line[64];
	int n;

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "hit %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				hit();
			printf("hit %d\n", n);
		} else if (strncmp(line, "site", 4) == 0) {
			printf("site %p\n", (void *)nop5_site);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
