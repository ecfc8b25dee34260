/*
 * prog.c is the C fixture of internal/debuginfo: nested structs behind
 * pointers, an enum parameter, a function returning a value, a local used on
 * a known line, a global, and more arguments than registers. The tests build
 * it with gcc at -O0 and -O2 (-g, DWARF 5 and 4) and with clang, and look
 * its names up.
 * Lines marked "LINE:name" are found by the tests by that marker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NOIPA keeps each function's signature and calling convention as written:
 * GCC must not clone or specialize it, clang must not inline it. */
#ifdef __clang__
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

enum flags {
	FLAG_NONE = 0,
	FLAG_READ = 1,
	FLAG_WRITE = 2,
	FLAG_SYNC = 4,
};

struct header {
	int len;
	char name[16];
};

struct request {
	int id;
	const char *path;
	struct header *hdr;
	unsigned short port;
	signed char prio;
	struct header inline_hdr;
	int codes[4];
};

struct point {
	long x;
	long y;
};

int global_counter;
const char *global_name = "fixture";

NOIPA int handle_request(struct request *req, enum flags fl, long count)
{
	int n = 0;
	if (fl & FLAG_READ)
		n += req->hdr->len;
	if (fl & FLAG_WRITE)
		n += (int)strlen(req->path);
	global_counter += n;
	printf("request %d %s %s %d\n", req->id, req->path, req->hdr->name, n);
	return n + (int)count;
}

NOIPA long compute(int a, unsigned int b)
{
	long r = (long)a * (long)b;
	return r - 7;
}

NOIPA int sum_text(const char *text)
{
	int total = 0;
	for (const char *p = text; *p; p++) {
		int c = *p;
		total += c; /* LINE:total */
	}
	printf("sum %d\n", total);
	return total;
}

NOIPA long by_value(struct point p, char tag[8])
{
	return p.x + p.y + tag[0];
}

NOIPA long many_args(long a, long b, long c, long d, long e, long f, long g, long h)
{
	return a + b + c + d + e + f + g + h;
}

NOIPA void use_flags(enum flags fl)
{
	printf("flags %d\n", (int)fl);
}

static inline int twice(int v)
{
	global_counter += v; /* LINE:twice */
	return v * 2;
}

NOIPA int call_twice(int x)
{
	int a = twice(x);
	int b = twice(x + 1);
	return a + b;
}

int main(int argc, char **argv)
{
	struct header h = { .len = argc, .name = "hdr" };
	struct request r = {
		.id = argc * 3,
		.path = argc > 1 ? argv[1] : "/index",
		.hdr = &h,
		.port = 8080,
		.prio = -3,
		.inline_hdr = { .len = 5, .name = "inl" },
		.codes = { 10, 20, 30, 40 },
	};
	struct point pt = { argc, argc + 1 };
	char tag[8] = "t";
	handle_request(&r, FLAG_READ | FLAG_WRITE, argc);
	printf("%ld\n", compute(argc, 6));
	sum_text(r.path);
	printf("%ld\n", by_value(pt, tag));
	printf("%ld\n", many_args(argc, 2, 3, 4, 5, 6, 7, 8));
	use_flags(FLAG_SYNC);
	printf("%d %s\n", call_twice(argc), global_name);
	return 0;
}
