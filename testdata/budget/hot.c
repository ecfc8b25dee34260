/*
 * hot is the program the overhead budget is tested and measured on. Its main
 * thread calls hot_fn() RATE times a second, the way a server handles
 * requests arriving at that rate: when it falls behind (while a probe makes
 * every call slower) it catches up, so that the calls it makes are exactly
 * RATE × time, and it counts them. Between calls it does units of work; its
 * speed is the work it gets done per second of its own CPU time, which other
 * processes do not change and probe hits do (the kernel handles a trap on
 * the thread's time).
 *
 * Commands on stdin (read by a second thread):
 *   rate N   calls of hot_fn per second from now on (0: none)
 *   twin N   calls of hot_twin, an identical function that is never
 *            probed, per second from now on: the unprobed speed at the
 *            same rate, measured while the tracer runs
 *   stop     stops calling and prints "total CALLS" (of hot_fn)
 *   exit
 * Every 100 ms the main thread prints, cumulative since it started:
 *   tick WALL_NS CPU_NS CALLS WORK
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* In assembly so that it starts with push %rbp (emulated by the kernel)
 * whatever the compiler. */
long hot_fn(long a, long b);
__asm__(".text\n"
	".globl hot_fn\n.type hot_fn, @function\n"
	"hot_fn:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tpop %rbp\n\tret\n"
	".size hot_fn, .-hot_fn\n");

long hot_twin(long a, long b);
__asm__(".text\n"
	".globl hot_twin\n.type hot_twin, @function\n"
	"hot_twin:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tpop %rbp\n\tret\n"
	".size hot_twin, .-hot_twin\n");

static long rate_cmd;  /* calls per second wanted; negative: of hot_twin */
static int stop_cmd;   /* print the total and stop calling */
volatile long sink;

static long long clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *commands(void *arg)
{
	char line[128];
	(void)arg;
	while (fgets(line, sizeof(line), stdin)) {
		long n;
		if (sscanf(line, "rate %ld", &n) == 1)
			__atomic_store_n(&rate_cmd, n, __ATOMIC_RELAXED);
		else if (sscanf(line, "twin %ld", &n) == 1)
			__atomic_store_n(&rate_cmd, -n, __ATOMIC_RELAXED);
		else if (strncmp(line, "stop", 4) == 0)
			__atomic_store_n(&stop_cmd, 1, __ATOMIC_RELAXED);
		else if (strncmp(line, "exit", 4) == 0)
			break;
	}
	exit(0);
	return NULL;
}

/* One unit of work: a few dependent multiply-adds. */
static inline unsigned long work(unsigned long x)
{
	for (int i = 0; i < 8; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

int main(void)
{
	pthread_t t;
	if (pthread_create(&t, NULL, commands, NULL) != 0)
		return 1;
	long long start = clock_ns(CLOCK_MONOTONIC), next_tick = start + 100000000LL;
	long long phase_start = start;
	long rate = 0, phase_calls = 0, calls = 0, units = 0;
	int stopped = 0;
	unsigned long x = 1;
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		long long now = clock_ns(CLOCK_MONOTONIC);
		long want = stopped ? 0 : __atomic_load_n(&rate_cmd, __ATOMIC_RELAXED);
		if (!stopped && __atomic_load_n(&stop_cmd, __ATOMIC_RELAXED)) {
			stopped = 1;
			want = 0;
			printf("total %ld\n", calls);
			fflush(stdout);
		}
		if (want != rate) {
			rate = want;
			phase_start = now;
			phase_calls = 0;
		}
		if (rate > 0) {
			long due = (long)((double)(now - phase_start) * (double)rate / 1e9);
			while (phase_calls < due) {
				sink = hot_fn(calls, phase_calls);
				calls++;
				phase_calls++;
			}
		} else if (rate < 0) {
			long due = (long)((double)(now - phase_start) * (double)-rate / 1e9);
			while (phase_calls < due) {
				sink = hot_twin(calls, phase_calls);
				phase_calls++;
			}
		}
		for (int k = 0; k < 32; k++)
			x = work(x);
		units += 32;
		if (now >= next_tick) {
			sink = (long)x;
			printf("tick %lld %lld %ld %ld\n", now - start, clock_ns(CLOCK_THREAD_CPUTIME_ID), calls, units);
			fflush(stdout);
			next_tick += 100000000LL;
		}
	}
}
