/*
 * names.c is the C program of the receiver's $name tests (and of the probe
 * browser's golden file): nested structs behind pointers, an enum of flags,
 * a return value, a local read by a line probe, a USDT probe, and (in
 * calltree.c) a tree of 50 functions for function patterns. The tests build
 * it with gcc -g at -O0 and -O2 and split its debuginfo into a build-id
 * tree.
 *
 * Commands on stdin, one per line:
 *
 *	req N    N calls of handle_request(i) for i = 0..N-1; prints "req N SUM"
 *	tree N   N calls of ct_00 (each calls the other 49 ct_ functions once,
 *	         nested as a binary tree); prints "tree N SUM"
 *	exit
 *
 * Lines marked "LINE:name" are found by the tests by that marker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

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
	long id;
	const char *path;
	struct header *hdr;
};

int ct_00(int depth);

/* checksum sums the bytes of a path. */
NOIPA int checksum(const char *s, int seed)
{
	int sum = seed;
	for (; *s; s++)
		sum += (unsigned char)*s;
	return sum; /* LINE:done */
}

/* note_thread's parameter is named like an attribute the receiver sets
 * ("thread.id" for $$params under the key "thread"). */
NOIPA int note_thread(int id)
{
	return id + 1;
}

/* sum10 has more parameters than a span end has values ($$params). */
NOIPA long sum10(long a0, long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, long a9)
{
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
}

/* handle_request is the function the tests read by name: $req->id,
 * $req->path, $req->hdr->len, $req->hdr->name, $flags, $count, $return,
 * and the local total at LINE:total. */
NOIPA int handle_request(struct request *req, enum flags flags, long count)
{
	int total = req->hdr->len * 2 + (int)count + (int)flags;
	int sum = checksum(req->path, total); /* LINE:total */
	DTRACE_PROBE2(names, request, req->id, req->path);
	return total + sum % 1000;
}

/* expect is what handle_request(i) returns, computed without it. */
static int expect(long id, const char *path, int len, int flags, long count)
{
	int total = len * 2 + (int)count + flags;
	int sum = total;
	(void)id;
	for (const char *s = path; *s; s++)
		sum += (unsigned char)*s;
	return total + sum % 1000;
}

static const enum flags cycle[3] = { FLAG_READ | FLAG_WRITE, FLAG_SYNC, FLAG_WRITE };

int main(void)
{
	char line[128];
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d %ld %d\n", (int)getpid(), sum10(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), note_thread(1));
	while (fgets(line, sizeof line, stdin)) {
		int n = 0;
		if (sscanf(line, "req %d", &n) == 1) {
			long sum = 0;
			int ok = 1;
			for (int i = 0; i < n; i++) {
				char path[32], name[16];
				snprintf(path, sizeof path, "/item/%d", i);
				snprintf(name, sizeof name, "hdr-%d", i);
				struct header h = { .len = 3 * i };
				memcpy(h.name, name, sizeof h.name);
				struct request r = { .id = 100 + i, .path = path, .hdr = &h };
				int got = handle_request(&r, cycle[i % 3], i + 7);
				ok &= got == expect(r.id, path, h.len, cycle[i % 3], i + 7);
				sum += got;
			}
			printf("req %d %ld%s\n", n, sum, ok ? "" : " MISMATCH");
		} else if (sscanf(line, "tree %d", &n) == 1) {
			long sum = 0;
			for (int i = 0; i < n; i++)
				sum += ct_00(0);
			printf("tree %d %ld\n", n, sum);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
	}
	return 0;
}
