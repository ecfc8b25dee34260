/*
 * demo is the program the receiver's tests and `make run` trace. It has USDT
 * probes guarded by semaphores (one with two call sites), nested and recursive
 * functions, and calls into a shared library (libdemo.so).
 *
 *   demo            reads commands on stdin: "go N" runs N iterations and
 *                   prints "done N"; "deep N" calls recurse(N) and prints
 *                   "deep N"; "sem" prints the semaphores; "exit" exits.
 *   demo --loop MS  runs one iteration every MS milliseconds, forever.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demolib.h"

unsigned short demo_query__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short demo_query__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short demo_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));

#define DEMO_QUERY_START_ENABLED() __builtin_expect(demo_query__start_semaphore, 0)
#define DEMO_QUERY_DONE_ENABLED() __builtin_expect(demo_query__done_semaphore, 0)
#define DEMO_TICK_ENABLED() __builtin_expect(demo_tick_semaphore, 0)

/* checksum keeps the compiler from folding the calls away. */
volatile long checksum;
/* iterations is read by query__done straight from memory (a %rip-relative
 * argument once optimized). */
long iterations;

__attribute__((noinline)) long work(long n, const char *label)
{
	checksum += n + (long)strlen(label);
	return n * 2;
}

__attribute__((noinline)) long recurse(int depth)
{
	long r;

	if (depth <= 0) {
		checksum++;
		return 0;
	}
	/* The volatile access after the call keeps gcc from turning the
	 * recursion into a loop. */
	r = recurse(depth - 1);
	checksum += r;
	return r + 1;
}

__attribute__((noinline)) void inner(int i)
{
	checksum += i;
}

__attribute__((noinline)) void outer(int i)
{
	inner(i);
	inner(i + 1);
}

/* tick has two call sites with different argument specs. */
static __attribute__((noinline)) void tick(int i, long scaled)
{
	if (DEMO_TICK_ENABLED())
		DTRACE_PROBE2(demo, tick, i, scaled);
	if (DEMO_TICK_ENABLED())
		DTRACE_PROBE2(demo, tick, scaled + 1, i);
}

static __attribute__((noinline)) void count_iteration(void)
{
	iterations++;
}

static void iteration(int i)
{
	char query[64];
	long id = 1000 + i;
	short small = (short)-i;

	snprintf(query, sizeof(query), "SELECT %d FROM demo", i);
	if (DEMO_QUERY_START_ENABLED())
		DTRACE_PROBE4(demo, query__start, query, id, small, 5);
	work(i, query);
	recurse(3);
	outer(i);
	tick(i, 10L * i);
	lib_call(i);
	count_iteration();
	if (DEMO_QUERY_DONE_ENABLED())
		DTRACE_PROBE3(demo, query__done, query, id * 10, iterations);
}

static void print_semaphores(void)
{
	printf("sem %u %u %u\n", demo_query__start_semaphore, demo_query__done_semaphore,
	       demo_tick_semaphore);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	char line[128];

	if (argc == 3 && strcmp(argv[1], "--loop") == 0) {
		long ms = atol(argv[2]);
		struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
		for (int i = 0;; i++) {
			iteration(i);
			nanosleep(&ts, NULL);
		}
	}

	printf("ready %d\n", getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		int n;
		if (sscanf(line, "go %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				iteration(i);
			printf("done %d\n", n);
			fflush(stdout);
		} else if (sscanf(line, "deep %d", &n) == 1) {
			recurse(n);
			printf("deep %d\n", n);
			fflush(stdout);
		} else if (strncmp(line, "sem", 3) == 0) {
			print_semaphores();
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
	}
	return 0;
}
