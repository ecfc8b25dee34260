/*
 * filters.c is the program of the receiver's in-kernel filter and value
 * histogram tests. Call i of serve() gets the path, size and return code
 * the tests compute the same way (see receiver/filters_test.go):
 *
 *	path  i%4: "/api/users/I", "/health", "/api/orders/I", "/static/app.js"
 *	size  (i*37) % 3000 - 500
 *	code  i%5 == 0: -(i%13) - 1; i%5 == 1: i%3; otherwise 0
 *
 * Commands on stdin, one per line:
 *
 *	run N   N calls of serve() for i = 0..N-1; prints "run N SUM"
 *	labels  label() with strings at the filters' limits (see below);
 *	        prints "labels"
 *	nest    outer(x) for x = 0..3, each calling inner(x); prints "nest"
 *	big     hu() with 2^63, 2^63+1 and 2^64-1, hs() with INT64_MIN and
 *	        INT64_MIN+1, deref() with a null pointer and with 7; prints "big"
 *	exit
 *
 * label(s, r) gets, in order: 64 'a's and a full char[16] without a NUL;
 * 65 'a's and "0123456789abcde"; 63 'a's and "short"; "ab" and the full
 * char[16] again.
 */
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>

#define NOIPA __attribute__((noipa))

/* serve handles one request; its USDT probe sees the path and the size. */
NOIPA int serve(const char *path, long size, int code)
{
	STAP_PROBE2(filt, req, path, size);
	return code + (int)(size - size); /* code, without the compiler knowing */
}

struct rec {
	char tag[16];
	long after; /* what a read past tag would see */
};

NOIPA int label(const char *s, const struct rec *r)
{
	return (int)strlen(s) + r->tag[0];
}

NOIPA int inner(int x)
{
	return x;
}

NOIPA int outer(int x)
{
	return inner(x) % 2 ? -1 : 0;
}

NOIPA unsigned long hu(unsigned long v)
{
	return v >> 1;
}

NOIPA long hs(long v)
{
	return v >> 1;
}

NOIPA long deref(const long *p)
{
	return p ? *p : 0;
}

static void labels(void)
{
	char a65[66];
	memset(a65, 'a', 65);
	a65[65] = 0;
	struct rec full = {.after = 0x4142434445464748};
	memcpy(full.tag, "0123456789abcdef", 16);
	struct rec r15 = {.tag = "0123456789abcde", .after = 0x4142434445464748};
	struct rec shortr = {.tag = "short", .after = 0x4142434445464748};
	label(a65 + 1, &full);
	label(a65, &r15);
	label(a65 + 2, &shortr);
	label("ab", &full);
}

int main(void)
{
	char line[128], path[64];
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin)) {
		long n;
		if (sscanf(line, "run %ld", &n) == 1) {
			long sum = 0;
			for (long i = 0; i < n; i++) {
				switch (i % 4) {
				case 0: snprintf(path, sizeof(path), "/api/users/%ld", i); break;
				case 1: snprintf(path, sizeof(path), "/health"); break;
				case 2: snprintf(path, sizeof(path), "/api/orders/%ld", i); break;
				default: snprintf(path, sizeof(path), "/static/app.js"); break;
				}
				long size = (i * 37) % 3000 - 500;
				int code = i % 5 == 0 ? -(int)(i % 13) - 1 : i % 5 == 1 ? (int)(i % 3) : 0;
				sum += serve(path, size, code);
			}
			printf("run %ld %ld\n", n, sum);
		} else if (strncmp(line, "labels", 6) == 0) {
			labels();
			printf("labels\n");
		} else if (strncmp(line, "nest", 4) == 0) {
			for (int x = 0; x < 4; x++)
				outer(x);
			printf("nest\n");
		} else if (strncmp(line, "big", 3) == 0) {
			long seven = 7;
			hu(1UL << 63);
			hu((1UL << 63) + 1);
			hu(~0UL);
			hs(-9223372036854775807L - 1);
			hs(-9223372036854775807L);
			deref(NULL);
			deref(&seven);
			printf("big\n");
		} else if (strncmp(line, "exit", 4) == 0) {
			return 0;
		}
	}
	return 0;
}
