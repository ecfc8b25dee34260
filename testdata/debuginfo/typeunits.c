/*
 * typeunits.c is the type-unit fixture of internal/debuginfo: structs
 * behind pointers and typedefs, nested and anonymous structs, a union,
 * enums, arrays of ints, of structs and of two dimensions, a struct by
 * value, a global and a returned pointer. It is C that is also C++: the
 * tests build it with gcc as C and with g++ and clang++ as C++, each at
 * DWARF 4 and 5, with and without -fdebug-types-section (which moves the
 * structs, unions and enums into type units: .debug_types at DWARF 4,
 * DW_UT_type units of .debug_info at DWARF 5; clang does so for C++
 * only), and check that every path compiles to the same fetch either way.
 *
 * It calls handle and pick once and prints their sum; "loop N" calls them
 * N times. The values are checked under gdb (TestRuntimeAgainstGDB).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

typedef long long i64;
typedef unsigned short port_t;

enum color { RED = 1, GREEN = 2, BLUE = 4 };
typedef enum color color_t;

struct header {
	int len;
	char name[16];
};
typedef struct header header_t;

union number {
	int i;
	long l;
};

struct point {
	long x;
	long y;
};
typedef struct point point_t;

struct request {
	i64 id;
	const char *path;
	header_t *hdr;
	port_t port;
	color_t color;
	struct header inline_hdr;
	int codes[4];
	header_t hdrs[2];
	struct {
		int x;
		int y;
	} pos;
	union number num;
	struct request *next;
	int grid[2][3];
};
typedef struct request request_t;
typedef request_t *request_p;

request_t global_req;

NOIPA long handle(request_t *req, request_p other, color_t c, point_t pt, i64 n)
{
	long sum = req->id + req->hdr->len + other->color + c + pt.y + n;
	sum += req->hdrs[1].len + req->pos.y + req->num.i + req->grid[1][2];
	if (req->next)
		sum += req->next->id;
	return sum;
}

NOIPA header_t *pick(request_t *req, int which)
{
	return which ? req->hdr : &req->inline_hdr;
}

int main(int argc, char **argv)
{
	header_t h = { 7, "hdr" };
	request_t tail;
	memset(&tail, 0, sizeof tail);
	tail.id = 99;
	tail.port = 4242;
	request_t r;
	memset(&r, 0, sizeof r);
	r.id = argc * 3;
	r.path = "/index";
	r.hdr = &h;
	r.port = 8080;
	r.color = BLUE;
	r.inline_hdr.len = 5;
	strcpy(r.inline_hdr.name, "inl");
	r.codes[3] = 40;
	r.hdrs[1].len = 11;
	strcpy(r.hdrs[1].name, "second");
	r.pos.y = -2;
	r.num.l = 1234;
	r.next = &tail;
	r.grid[1][2] = 12;
	global_req = r;
	point_t pt = { 1, 2 };
	long loops = argc > 2 && strcmp(argv[1], "loop") == 0 ? atol(argv[2]) : 1;
	long total = 0;
	for (long i = 0; i < loops; i++) {
		total += handle(&r, &r, GREEN, pt, i);
		total += pick(&r, (int)(i & 1))->len;
	}
	printf("%ld\n", total);
	return 0;
}
