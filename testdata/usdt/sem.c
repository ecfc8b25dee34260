/* Probes with semaphores (is-enabled probes). With _SDT_HAS_SEMAPHORES
 * defined, <sys/sdt.h> records the address of PROVIDER_NAME_semaphore in
 * every note of this translation unit, so each probe here needs one. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

unsigned short fixture_request__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short fixture_request__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));

long counter = 42;
static int table[16] = {1, 2, 3};
struct state {
	long a;
	int b;
};
struct state state = {7, 8};

void sem_touch(int n)
{
	table[n & 15] = n;
	state.b = n;
}

__attribute__((noinline)) void sem_probes(int n, const char *path)
{
	if (fixture_request__start_semaphore)
		DTRACE_PROBE2(fixture, request__start, n, path);
	counter += n;
	/* An indexed array. */
	if (fixture_request__done_semaphore)
		DTRACE_PROBE4(fixture, request__done, counter, state.b, table[n & 15], state.a);
}
