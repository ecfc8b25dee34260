/*
 * demo is the program the receiver's tests and `make run` trace. It has USDT
 * probes guarded by semaphores (one with two call sites), nested and recursive
 * functions, and calls into a shared library (libdemo.so).
 *
 *   demo            reads commands on stdin:
 *                     go N        runs N iterations, prints "done N"
 *                     deep N      calls recurse(N), prints "deep N"
 *                     req CTX     one request: request__start(CTX), an
 *                                 iteration, request__done; prints "req done"
 *                     sql TEXT    one iteration whose query text is TEXT;
 *                                 prints "sql done"
 *                     fail        one iteration whose query fails halfway:
 *                                 fail_deep(2) longjmps back to the command
 *                                 loop, so query__done and three returns never
 *                                 come; prints "failed"
 *                     sem         prints the semaphores
 *                     exit        exits
 *   demo --loop MS  runs one iteration every MS milliseconds, forever.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demolib.h"

unsigned short demo_query__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short demo_query__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short demo_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short demo_request__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short demo_request__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));

#define DEMO_QUERY_START_ENABLED() __builtin_expect(demo_query__start_semaphore, 0)
#define DEMO_QUERY_DONE_ENABLED() __builtin_expect(demo_query__done_semaphore, 0)
#define DEMO_TICK_ENABLED() __builtin_expect(demo_tick_semaphore, 0)
#define DEMO_REQUEST_START_ENABLED() __builtin_expect(demo_request__start_semaphore, 0)
#define DEMO_REQUEST_DONE_ENABLED() __builtin_expect(demo_request__done_semaphore, 0)

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

/* on_error is where a failing query jumps back to, like PostgreSQL's
 * error recovery. */
static jmp_buf on_error;

__attribute__((noinline)) void fail_deep(int n)
{
	if (n < 0)
		return;
	if (n == 0)
		longjmp(on_error, 1);
	fail_deep(n - 1);
	checksum++;
}

static __attribute__((noinline)) void run_query(int i, const char *query, int fail)
{
	long id = 1000 + i;
	short small = (short)-i;

	if (DEMO_QUERY_START_ENABLED())
		DTRACE_PROBE4(demo, query__start, query, id, small, 5);
	work(i, query);
	if (fail)
		fail_deep(2);
	recurse(3);
	outer(i);
	tick(i, 10L * i);
	lib_call(i);
	count_iteration();
	if (DEMO_QUERY_DONE_ENABLED())
		DTRACE_PROBE3(demo, query__done, query, id * 10, iterations);
}

/* iteration is called from the command loop for "go" and "fail" alike, so
 * query__start fires at the same stack position in both. */
static __attribute__((noinline)) void iteration(int i, int fail)
{
	char query[64];

	snprintf(query, sizeof(query), "SELECT %d FROM demo", i);
	run_query(i, query, fail);
}

/* request carries a trace context (e.g. a W3C traceparent) as its argument,
 * the way a server would pass the context of the request it handles. */
static __attribute__((noinline)) void request(const char *context)
{
	if (DEMO_REQUEST_START_ENABLED())
		DTRACE_PROBE1(demo, request__start, context);
	iteration(0, 0);
	if (DEMO_REQUEST_DONE_ENABLED())
		DTRACE_PROBE1(demo, request__done, context);
}

static void print_semaphores(void)
{
	printf("sem %u %u %u\n", demo_query__start_semaphore, demo_query__done_semaphore,
	       demo_tick_semaphore);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	char line[1024];

	if (argc == 3 && strcmp(argv[1], "--loop") == 0) {
		long ms = atol(argv[2]);
		struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
		for (int i = 0;; i++) {
			iteration(i, 0);
			nanosleep(&ts, NULL);
		}
	}

	printf("ready %d\n", getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		int n;
		if (sscanf(line, "go %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				iteration(i, 0);
			printf("done %d\n", n);
			fflush(stdout);
		} else if (strncmp(line, "req ", 4) == 0) {
			line[strcspn(line, "\n")] = 0;
			request(line + 4);
			printf("req done\n");
			fflush(stdout);
		} else if (strncmp(line, "sql ", 4) == 0) {
			line[strcspn(line, "\n")] = 0;
			run_query(0, line + 4, 0);
			printf("sql done\n");
			fflush(stdout);
		} else if (strncmp(line, "fail", 4) == 0) {
			if (setjmp(on_error) == 0)
				iteration(0, 1);
			printf("failed\n");
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
