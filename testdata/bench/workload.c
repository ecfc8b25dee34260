/*
 * workload is the program the benchmark traces. probed() and twin() are
 * identical functions (both start with push %rbp, an instruction the kernel
 * emulates), so the cost a probe adds is probed - twin, timed in the same run.
 *
 * Commands on stdin:
 *   measure N R     R interleaved rounds of N calls to each; prints
 *                   "ns PROBED TWIN": median nanoseconds of the thread's
 *                   CPU time per call
 *   measure3 ARGS N R [SET]
 *                   the same for probed(), twin() and twin2() (a second
 *                   twin, where a second floor runs), called with the
 *                   arguments ARGS names; prints "ns PROBED TWIN TWIN2".
 *                   ARGS: "ints" (i, round), "names" (a struct whose name
 *                   is two pointers away, round), "yes1" (the string "yes"
 *                   in 1 call of 100, "no" in the others, round). SET
 *                   picks other triples of identical functions: "line"
 *                   (line_probed, line_twin, line_twin2: C functions whose
 *                   marked lines a line probe takes), "calling"
 *                   (calling_probed, calling_twin, calling_twin2: the
 *                   same as probed, twin and twin2 but for a call of
 *                   callee() instead of their own xor), "tree" (pt_0, tt_0,
 *                   tt2_0: the roots of three identical call trees of 100
 *                   functions, which the benchmark assembles beside this
 *                   file; N calls of a root are 100 * N calls)
 *   measure_cet N R the same for probed_cet() and twin_cet(), which start
 *                   with endbr64 (as gcc -fcf-protection compiles them)
 *   pace RATE SECS  calls probed() RATE times a second (0: as fast as it
 *                   can) for SECS seconds; prints "paced CALLS NS" (NS: time taken)
 *   ping            calls ping() once and prints "pong" (a tracer's probe on
 *                   ping() tells when it is attached)
 *   ctxrun N WITH   (built with -DTHREAD_CTX) N calls of probed() with
 *                   (WITH 1) or without (0) a thread context published
 *                   (OTEP 4947: otel_thread_ctx_v1, in this executable's
 *                   static TLS); prints "ns PER_CALL"
 *   exit
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Written in assembly so that every compiler gives them the same first
 * instruction (push %rbp) and the same length. */
long probed(long a, long b);
long twin(long a, long b);
long twin2(long a, long b);
long probed_cet(long a, long b);
long twin_cet(long a, long b);
__asm__(".text\n"
	".globl probed_cet\n.type probed_cet, @function\n"
	"probed_cet:\n\tendbr64\n\tpush %rbp\n\tmov %rsp, %rbp\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tpop %rbp\n\tret\n"
	".size probed_cet, .-probed_cet\n"
	".globl twin_cet\n.type twin_cet, @function\n"
	"twin_cet:\n\tendbr64\n\tpush %rbp\n\tmov %rsp, %rbp\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tpop %rbp\n\tret\n"
	".size twin_cet, .-twin_cet\n");
__asm__(".text\n"
	".globl probed\n.type probed, @function\n"
	"probed:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tpop %rbp\n\tret\n"
	".size probed, .-probed\n"
	".globl twin\n.type twin, @function\n"
	"twin:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tpop %rbp\n\tret\n"
	".size twin, .-twin\n"
	".globl twin2\n.type twin2, @function\n"
	"twin2:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tpop %rbp\n\tret\n"
	".size twin2, .-twin2\n");

/* The calling set: probed(), twin() and twin2() as functions that call
 * another (callee, unprobed) instead of being leaves, so that a call left
 * out by head sampling is marked by the return address it left on the
 * stack (a read of user memory), not by the function's code (SITE_LEAF). */
long calling_probed(long a, long b);
long calling_twin(long a, long b);
long calling_twin2(long a, long b);
__asm__(".text\n"
	".globl callee\n.type callee, @function\n"
	"callee:\n\tmov %rdi, %rax\n\txor %rsi, %rax\n\tret\n"
	".size callee, .-callee\n"
	".globl calling_probed\n.type calling_probed, @function\n"
	"calling_probed:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tcall callee\n\tpop %rbp\n\tret\n"
	".size calling_probed, .-calling_probed\n"
	".globl calling_twin\n.type calling_twin, @function\n"
	"calling_twin:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tcall callee\n\tpop %rbp\n\tret\n"
	".size calling_twin, .-calling_twin\n"
	".globl calling_twin2\n.type calling_twin2, @function\n"
	"calling_twin2:\n\tpush %rbp\n\tmov %rsp, %rbp\n\tcall callee\n\tpop %rbp\n\tret\n"
	".size calling_twin2, .-calling_twin2\n");

__attribute__((noinline)) void ping(void)
{
	__asm__ volatile("" ::: "memory");
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* thread_ns is the calling thread's CPU time: the traps a probe costs are
 * the thread's (the kernel handles them on its time), while other
 * processes that take the CPU meanwhile are not. measure and measure3 time
 * with it, so that a busy machine does not inflate their rounds. */
static long long thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

volatile long sink;

#ifdef THREAD_CTX
/* The thread context an SDK would publish (OTEP 4947): the exported
 * thread-local pointer and a record with sampled ids. Only the build with
 * -DTHREAD_CTX has it (the benchmark's workload-ctx): the others are
 * programs without an SDK. */
struct otel_thread_ctx_record {
	unsigned char trace_id[16], span_id[8], valid, trace_flags;
	unsigned short attrs_data_size;
} __attribute__((packed, aligned(8)));
__thread struct otel_thread_ctx_record *otel_thread_ctx_v1 __attribute__((visibility("default")));
static struct otel_thread_ctx_record record = {
	.trace_id = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	.span_id = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	.valid = 1,
	.trace_flags = 1,
};

static void ctxrun(long n, int with)
{
	otel_thread_ctx_v1 = with ? &record : 0;
	__asm__ volatile("" ::: "memory");
	long long t0 = now_ns();
	for (long i = 0; i < n; i++)
		sink = probed(i, with);
	long long t1 = now_ns();
	otel_thread_ctx_v1 = 0;
	printf("ns %.1f\n", (double)(t1 - t0) / n);
	fflush(stdout);
}
#endif

/* TIMED times n calls of fn in round r, with the arguments ARG(i) gives,
 * into out[r]: nanoseconds of the thread's CPU time per call. */
#define TIMED(fn, ARG, out)                                     \
	do {                                                    \
		long long t0_ = thread_ns();                    \
		for (long i = 0; i < n; i++)                    \
			sink = fn(ARG(i), r);                   \
		out[r] = (double)(thread_ns() - t0_) / n;       \
	} while (0)
#define PLAIN_ARG(i) (i)

/* measure and measure3 take turns at which function a round times first,
 * so that none of them is always the one after the others (the caches and
 * branch predictors a probed function's traps leave behind; the A/A row of
 * the benchmark read 1.02 when probed() always came first). */
static inline __attribute__((always_inline)) void measure(long n, int rounds, long (*probed)(long, long), long (*twin)(long, long))
{
	double *p = calloc(rounds, sizeof(double)), *t = calloc(rounds, sizeof(double));
	for (int r = 0; r < rounds; r++) {
		if (r % 2 == 0) {
			TIMED(probed, PLAIN_ARG, p);
			TIMED(twin, PLAIN_ARG, t);
		} else {
			TIMED(twin, PLAIN_ARG, t);
			TIMED(probed, PLAIN_ARG, p);
		}
	}
	qsort(p, rounds, sizeof(double), cmp);
	qsort(t, rounds, sizeof(double), cmp);
	printf("ns %.1f %.1f\n", p[rounds / 2], t[rounds / 2]);
	fflush(stdout);
	free(p);
	free(t);
}

/* The arguments of measure3: a request whose connection's name is two
 * pointers away from the first argument (+0(+0(+8(arg0))):string), and
 * the strings of a filter that holds in 1 call of 100. */
struct conn {
	const char *name;
};
struct request {
	long id;
	struct conn *conn;
};
static struct conn the_conn = {"checkout-service"};
static struct request the_request = {42, &the_conn};
static const char yes[] = "yes", no[] = "no";

static long arg_of(int kind, long i)
{
	switch (kind) {
	case 1:
		return (long)&the_request;
	case 2:
		return (long)(i % 100 == 0 ? yes : no);
	}
	return i;
}

/* The line set: the statement marked in each is where a line probe goes
 * (the benchmark finds the markers); it starts with a nop, which the kernel
 * emulates, as the push of the other sets is. */
__attribute__((noinline)) long line_probed(long a, long b)
{
	long r = a ^ b;
	__asm__ volatile("nop" : "+r"(r)); /* line: line_probed */
	return r;
}

__attribute__((noinline)) long line_twin(long a, long b)
{
	long r = a ^ b;
	__asm__ volatile("nop" : "+r"(r)); /* line: line_twin */
	return r;
}

__attribute__((noinline)) long line_twin2(long a, long b)
{
	long r = a ^ b;
	__asm__ volatile("nop" : "+r"(r)); /* line: line_twin2 */
	return r;
}

/* The tree set, assembled beside this file by the benchmark (weak: the
 * tests build this file alone). */
long pt_0(long a, long b) __attribute__((weak));
long tt_0(long a, long b) __attribute__((weak));
long tt2_0(long a, long b) __attribute__((weak));

/* measure3 is inlined where it is called with its functions, so that it
 * calls them directly, as most calls are: a call through a function
 * pointer changes what a call left out by head sampling costs (it keeps
 * its return, see called_directly in bpf/engine.bpf.c). */
static inline __attribute__((always_inline)) void measure3(int kind, long n, int rounds, long (*probed)(long, long),
							  long (*twin)(long, long), long (*twin2)(long, long))
{
	double *p = calloc(rounds, sizeof(double)), *t = calloc(rounds, sizeof(double)),
	       *t2 = calloc(rounds, sizeof(double));
#define KIND_ARG(i) arg_of(kind, i)
	for (int r = 0; r < rounds; r++) {
		switch (r % 3) {
		case 0:
			TIMED(probed, KIND_ARG, p);
			TIMED(twin, KIND_ARG, t);
			TIMED(twin2, KIND_ARG, t2);
			break;
		case 1:
			TIMED(twin, KIND_ARG, t);
			TIMED(twin2, KIND_ARG, t2);
			TIMED(probed, KIND_ARG, p);
			break;
		default:
			TIMED(twin2, KIND_ARG, t2);
			TIMED(probed, KIND_ARG, p);
			TIMED(twin, KIND_ARG, t);
		}
	}
#undef KIND_ARG
	qsort(p, rounds, sizeof(double), cmp);
	qsort(t, rounds, sizeof(double), cmp);
	qsort(t2, rounds, sizeof(double), cmp);
	printf("ns %.1f %.1f %.1f\n", p[rounds / 2], t[rounds / 2], t2[rounds / 2]);
	fflush(stdout);
	free(p);
	free(t);
	free(t2);
}

static void pace(long rate, double secs)
{
	long long start = now_ns(), end = start + (long long)(secs * 1e9), next = start;
	long long step = rate > 0 ? 1000000000LL / rate : 0;
	long calls = 0;
	for (;;) {
		long long t = now_ns();
		if (t >= end)
			break;
		if (t < next)
			continue; /* busy-wait: sleeping would not keep the rate */
		for (int k = 0; k < 64 && (step == 0 || next <= t); k++) {
			sink = probed(calls, k);
			calls++;
			next += step;
		}
	}
	printf("paced %ld %lld\n", calls, now_ns() - start);
	fflush(stdout);
}

int main(void)
{
	char line[128], args[16];
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		long n, rate;
		int r;
		double secs;
		if (sscanf(line, "measure3 %15s %ld %d", args, &n, &r) == 3) {
			int kind = strcmp(args, "names") == 0 ? 1 : strcmp(args, "yes1") == 0 ? 2 : 0;
			if (strstr(line, " line"))
				measure3(kind, n, r, line_probed, line_twin, line_twin2);
			else if (strstr(line, " calling"))
				measure3(kind, n, r, calling_probed, calling_twin, calling_twin2);
			else if (strstr(line, " tree") && pt_0 && tt_0 && tt2_0)
				measure3(kind, n, r, pt_0, tt_0, tt2_0);
			else if (strstr(line, " tree")) {
				printf("no tree\n");
				fflush(stdout);
			} else
				measure3(kind, n, r, probed, twin, twin2);
		}
		else if (sscanf(line, "measure %ld %d", &n, &r) == 2)
			measure(n, r, probed, twin);
		else if (sscanf(line, "measure_cet %ld %d", &n, &r) == 2)
			measure(n, r, probed_cet, twin_cet);
#ifdef THREAD_CTX
		else if (sscanf(line, "ctxrun %ld %d", &n, &r) == 2)
			ctxrun(n, r);
#endif
		else if (sscanf(line, "pace %ld %lf", &rate, &secs) == 2)
			pace(rate, secs);
		else if (strncmp(line, "ping", 4) == 0) {
			ping();
			printf("pong\n");
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0)
			break;
	}
	return 0;
}
