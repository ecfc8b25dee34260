/*
 * refuse is the C program of the receiver's tests of refused probe sites.
 * bump() holds instructions no uprobe may go on: on arm64 an exclusive
 * load/store loop (ldaxr/stlxr, which the kernel refuses to probe, and
 * between them an add that a uprobe would make loop forever), on x86-64 a
 * lock-prefixed instruction (refused). The tests check that such sites are
 * refused before anything is attached, and that the program's code stays
 * as the file has it.
 *
 *   refuse        prints "ready PID", then reads commands on stdin:
 *                   addr     prints "addr ADDR": bump's run-time address
 *                   bump N   N calls of bump(); prints "bumped TOTAL"
 *                   exit
 */
#include <stdio.h>
#include <unistd.h>

static long counter;

__attribute__((noinline)) long bump(long *p)
{
#if defined(__aarch64__)
	long old, next;
	int failed;

	__asm__ __volatile__("1:	ldaxr	%0, [%3]\n"
			     "	add	%1, %0, #1\n"
			     "	stlxr	%w2, %1, [%3]\n"
			     "	cbnz	%w2, 1b\n"
			     : "=&r"(old), "=&r"(next), "=&r"(failed)
			     : "r"(p)
			     : "memory");
	return old + 1;
#else
	long one = 1;

	__asm__ __volatile__("lock xaddq %0, %1" : "+r"(one), "+m"(*p) : : "memory");
	return one + 1;
#endif
}

int main(void)
{
	char line[64];
	long n, total = 0;

	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (line[0] == 'a') {
			printf("addr %p\n", (void *)bump);
			fflush(stdout);
		} else if (sscanf(line, "bump %ld", &n) == 1) {
			for (long i = 0; i < n; i++)
				total = bump(&counter);
			printf("bumped %ld\n", total);
			fflush(stdout);
		} else if (line[0] == 'e') {
			break;
		}
	}
	return 0;
}
