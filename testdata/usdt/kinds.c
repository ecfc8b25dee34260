/* Probes whose arguments take every operand form <sys/sdt.h> produces:
 * registers of each size, constants small and large, globals, struct
 * fields and array elements through pointers, stack arguments, locals,
 * floating-point values and more live values than registers. The tests
 * cross-build it for arm64 and compare the parsed specs with readelf. */
#include <sys/sdt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int counter = 3;
long table[16];
struct state { int a; long b; char c[8]; } st = {1, 2, "x"};
static unsigned char small_global = 7;
volatile int sink;
double dglobal = 1.5;

__attribute__((noinline)) void regs(int a, long b, char c, short d, unsigned e, unsigned long f, const char *p, void *q)
{
	DTRACE_PROBE8(kinds, regs, a, b, c, d, e, f, p, q);
}

__attribute__((noinline)) void consts(void)
{
	DTRACE_PROBE6(kinds, consts, 5, -1, 0, 4096, 0x123456789abcLL, (char)-3);
	DTRACE_PROBE3(kinds, consts2, 65535, -4097, 1UL << 40);
}

__attribute__((noinline)) void globals(int i)
{
	DTRACE_PROBE5(kinds, globals, counter, table[i], st.b, small_global, st.c[i & 7]);
	DTRACE_PROBE3(kinds, globals2, &counter, table[3], dglobal);
}

__attribute__((noinline)) void mem(struct state *s, long *arr, int i)
{
	DTRACE_PROBE6(kinds, mem, s->a, s->b, arr[i], arr[2], s->c[1], arr[i + 1]);
}

__attribute__((noinline)) long many(long a0, long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, long a9, long a10, long a11)
{
	long x = a0 * a1 + a2;
	DTRACE_PROBE12(kinds, many, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
	return x;
}

__attribute__((noinline)) void locals(int n)
{
	char buf[32];
	long v[4] = {n, n * 2, n * 3, n * 4};
	memset(buf, n, sizeof buf);
	for (int i = 0; i < n; i++)
		v[i & 3] += buf[i & 31];
	DTRACE_PROBE6(kinds, locals, v[0], v[1], v[2], v[3], buf[5], &v[1]);
	sink = buf[n & 31];
}

__attribute__((noinline)) void floats(float f, double d, int i)
{
	DTRACE_PROBE3(kinds, floats, f, d, i);
}

__attribute__((noinline)) void pressure(long *p)
{
	long a = p[0], b = p[1], c = p[2], d = p[3], e = p[4], f = p[5], g = p[6], h = p[7];
	long i = p[8], j = p[9], k = p[10], l = p[11];
	DTRACE_PROBE12(kinds, pressure, a*b, b*c, c*d, d*e, e*f, f*g, g*h, h*i, i*j, j*k, k*l, l*a);
	DTRACE_PROBE12(kinds, pressure2, a, b, c, d, e, f, g, h, i, j, k, l);
	p[0] = a + b + c + d + e + f + g + h + i + j + k + l;
}

int main(int argc, char **argv)
{
	long arr[16] = {0};
	regs(argc, -2, 'c', -4, 5u, 6ul, argv[0], arr);
	consts();
	globals(argc);
	mem(&st, arr, argc);
	many(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
	locals(argc + 3);
	floats(1.0f, 2.0, argc);
	for (int i = 0; i < 16; i++) arr[i] = i + argc;
	pressure(arr);
	return (int)arr[0] & 1;
}
