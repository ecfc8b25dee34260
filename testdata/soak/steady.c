/*
 * steady is the soak's high-rate C target: step() fires two USDT probes,
 * steady:start and steady:done, each with one argument, in the newer
 * "nop; nop5" form (Debian 12's <sys/sdt.h> still emits a 1-byte nop), so
 * that a kernel with the optimized uprobe path (Linux 6.17, x86-64) turns
 * each probe into a call after its first hit: the cheapest span a C program
 * can have, and a production form (newer systemtap headers emit it).
 *
 * work() is a plain function that starts with push %rbp (which the kernel
 * emulates), for a function span: entry uprobe and kernel return probe.
 *
 * Commands on stdin:
 *   pace RATE SECS  calls step() RATE times a second for SECS seconds, in
 *                   batches every millisecond with sleeps between them (the
 *                   thread uses only the CPU its calls take); prints
 *                   "paced CALLS NS" (NS: time taken)
 *   work RATE SECS  the same with work()
 *   exit
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

/* USDT5 is a USDT probe on "nop; nop5" with one 8-byte argument in a
 * register. */
#define USDT5(name, arg)                                                        \
	__asm__ __volatile__("990: nop\n"                                       \
			     ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"             \
			     ".pushsection .note.stapsdt,\"?\",\"note\"\n"      \
			     ".balign 4\n"                                      \
			     ".4byte 992f-991f, 994f-993f, 3\n"                 \
			     "991: .asciz \"stapsdt\"\n"                        \
			     "992: .balign 4\n"                                 \
			     "993: .8byte 990b\n"                               \
			     ".8byte _.stapsdt.base\n"                          \
			     ".8byte 0\n"                                       \
			     ".asciz \"steady\"\n"                              \
			     ".asciz \"" name "\"\n"                            \
			     ".asciz \"8@%0\"\n"                                \
			     "994: .balign 4\n"                                 \
			     ".popsection\n"                                    \
			     ".ifndef _.stapsdt.base\n"                         \
			     ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n" \
			     ".weak _.stapsdt.base\n"                           \
			     ".hidden _.stapsdt.base\n"                         \
			     "_.stapsdt.base: .space 1\n"                       \
			     ".size _.stapsdt.base, 1\n"                        \
			     ".popsection\n"                                    \
			     ".endif\n" ::"r"((long)(arg))                      \
			     : "memory")

volatile long sink;

__attribute__((noinline)) long step(long i)
{
	USDT5("start", i);
	long r = i * 3 + 1;
	USDT5("done", r);
	return r;
}

/* work is written in assembly so that it starts with push %rbp whatever
 * the compiler's defaults (CET would start it with endbr64). */
long work(long a);
__asm__(".text\n"
	".globl work\n.type work, @function\n"
	"work:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tlea 1(%rdi), %rax\n\tpop %rbp\n\tret\n"
	".size work, .-work\n");

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pace(long (*fn)(long), long rate, double secs)
{
	long long start = now_ns(), end = start + (long long)(secs * 1e9);
	long calls = 0;
	for (long long tick = start;; tick += 1000000) {
		if (tick >= end)
			break;
		/* the calls due by the end of this millisecond */
		long due = (long)((double)(tick + 1000000 - start) * rate / 1e9);
		while (calls < due)
			sink = fn(calls++);
		struct timespec until = {.tv_sec = (tick + 1000000) / 1000000000LL, .tv_nsec = (tick + 1000000) % 1000000000LL};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL);
	}
	printf("paced %ld %lld\n", calls, now_ns() - start);
	fflush(stdout);
}

int main(void)
{
	char line[64];
	long rate;
	double secs;

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "pace %ld %lf", &rate, &secs) == 2)
			pace(step, rate, secs);
		else if (sscanf(line, "work %ld %lf", &rate, &secs) == 2)
			pace(work, rate, secs);
		else if (strncmp(line, "exit", 4) == 0)
			break;
	}
	return 0;
}
