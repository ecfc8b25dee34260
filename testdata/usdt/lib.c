/* A shared library with probes with semaphores. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

unsigned short fixturelib_call_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short fixturelib_ret_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short fixturelib_peek_semaphore __attribute__((unused)) __attribute__((section(".probes")));

static long calls;

long lib_call(int x, long y)
{
	calls++;
	if (fixturelib_call_semaphore)
		DTRACE_PROBE3(fixturelib, call, x, y, calls);
	long r = x * y;
	if (fixturelib_ret_semaphore)
		DTRACE_PROBE1(fixturelib, ret, r);
	if (fixturelib_ret_semaphore)
		DTRACE_PROBE1(fixturelib, ret, -r);
	return r;
}

long lib_peek(void)
{
	/* A static read in place: a symbolic %rip-relative operand. */
	if (fixturelib_peek_semaphore)
		DTRACE_PROBE1(fixturelib, peek, calls);
	return 0;
}
