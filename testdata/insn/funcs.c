/*
 * Fixture for internal/insn: small C functions whose instructions the tests
 * decode and compare with objdump. The tests build it with and without
 * -fcf-protection=full (endbr64 at function entries), at -O0 and -O2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

/* A leaf: at -O2 it has no push at all. */
NOINLINE int add3(int a, int b, int c) { return a + b * c; }

/* A loop over an array. */
NOINLINE long sum(const long *p, int n)
{
	long s = 0;
	for (int i = 0; i < n; i++)
		s += p[i];
	return s;
}

/* A dense switch, which gcc compiles to a jump table (in .rodata, reached
 * with an indirect jmp; notrack jmp under -fcf-protection). */
NOINLINE int dispatch(int op, int a, int b)
{
	switch (op) {
	case 0: return a + b;
	case 1: return a - b;
	case 2: return a * b;
	case 3: return b ? a / b : 0;
	case 4: return b ? a % b : 0;
	case 5: return a & b;
	case 6: return a | b;
	case 7: return a ^ b;
	case 8: return a << (b & 31);
	case 9: return a >> (b & 31);
	case 10: return -a;
	case 11: return ~a;
	default: return 0;
	}
}

/* Recursion, several returns. */
NOINLINE int fib(int n)
{
	if (n < 2)
		return n;
	return fib(n - 1) + fib(n - 2);
}

/* A local buffer: stack protector, %fs-relative load, calls. */
NOINLINE int describe(char *out, size_t len, const char *name, int v)
{
	char buf[64];
	snprintf(buf, sizeof buf, "%s=%d", name, v);
	if (strlen(buf) >= len)
		return -1;
	strcpy(out, buf);
	return (int)strlen(out);
}

/* Callee-saved registers: several pushes at -O2. */
NOINLINE long mix(long a, long b, long c, long d)
{
	long x = sum(&a, 1) + add3((int)b, (int)c, (int)d);
	long y = fib((int)(a & 7)) * dispatch((int)(b & 15), (int)c, (int)d);
	return x * y + sum(&d, 1);
}

int main(int argc, char **argv)
{
	long v[4] = {1, 2, 3, argc};
	char out[32];
	describe(out, sizeof out, argv[0], argc);
	printf("%ld %s\n", mix(v[0], v[1], v[2], v[3]) + sum(v, 4), out);
	return 0;
}
