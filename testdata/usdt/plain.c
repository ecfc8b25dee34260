/* Probes without semaphores: register, stack, constant and floating-point
 * arguments, and probes with several sites. */
#include <sys/sdt.h>

void sem_probes(int n, const char *path);
void sem_touch(int n);
extern long counter;
extern struct state {
	long a;
	int b;
} state;

/* Always inlined, so its probe has one site per call, with other args. */
static inline __attribute__((always_inline)) void emit(int kind, long v)
{
	DTRACE_PROBE2(fixture, multi, kind, v);
}

__attribute__((noinline)) void plain_probes(int a, long b, char c, short d, double x, unsigned char *buf)
{
	DTRACE_PROBE(fixture, noargs);
	/* Globals read in place: symbolic %rip-relative operands. */
	DTRACE_PROBE2(fixture, globals, counter, state.b);
	DTRACE_PROBE1(fixture, constant, 5);
	DTRACE_PROBE2(fixture, constants, -1, 0x10);
	DTRACE_PROBE4(fixture, mixed, a, b, c, d);
	DTRACE_PROBE2(fixture, bytes, (unsigned char)c, buf[a]);
	DTRACE_PROBE1(fixture, dbl, x);
	emit(1, b);
	emit(2, a + b);
	/* The same probe written twice. */
	DTRACE_PROBE1(fixture, twice, a);
	DTRACE_PROBE1(fixture, twice, b * 3);
}

int main(int argc, char **argv)
{
	unsigned char buf[64] = {0};
	plain_probes(argc, (long)argc * 1000, (char)argc, (short)-argc, argc / 3.0, buf);
	sem_touch(argc);
	sem_probes(argc, argv[0]);
	return 0;
}
