/*
 * ctxapp is an application instrumented by an SDK that publishes its
 * threads' active spans (OTEP 4947), for the receiver's thread-context
 * tests. The SDK's writer (ctxlib.c) is linked into it, in a shared library
 * it needs, or (built with -DCTX_DLOPEN) in libctx.so, which it loads with
 * dlopen when told. The traced functions are probed(), outer() and inner()
 * (nested spans) and carried() (a span with its own traceparent).
 *
 * Commands on stdin, each answered by one line:
 *   open                 dlopen("libctx.so") (CTX_DLOPEN); prints "opened"
 *   where                prints "where TP VAR": the calling thread's thread
 *                        pointer and the address of its otel_thread_ctx_v1
 *   call N               N calls of probed(i) with no context; "called N"
 *   ctx N SEED FLAGS     N calls of probed(i), each under context ids(SEED, i)
 *                        with trace flags FLAGS; "ctx N"
 *   nest N SEED          N calls of outer(i) (which calls inner twice) under
 *                        ids(SEED, i); "nest N"
 *   threads N SEED       two threads at once, thread t making N calls of
 *                        probed(i) under ids(SEED + t, i); "threads N"
 *   torn N SEED          N calls of probed(i) while the record, published
 *                        with ids(SEED, 0), is being rewritten (valid = 0);
 *                        "torn N"
 *   carrier N SEED       N calls of carried(traceparent of ids(SEED + 1, i))
 *                        under ids(SEED, i); "carrier N"
 *   pub TRACE SPAN FLAGS N
 *                        N calls of outer(i) (which calls inner twice) under
 *                        the context of trace id TRACE and span id SPAN (hex)
 *                        with trace flags FLAGS, as an SDK publishes its
 *                        active span; "pub N"
 *   attrs N SEED         N calls of probed(i) under ids(SEED, i) with
 *                        attributes method=GET (key 0) and route=/r/i (key 1),
 *                        after publishing the OTEP 4719 process context whose
 *                        key map names them; "attrs N"
 *   exit
 *
 * ids(seed, i): trace id bytes 0 to 11 are (seed + 7*b + 1) mod 256 and
 * bytes 12 to 15 i (big endian); span id bytes 0 to 5 are
 * (3*seed + 13*b + 0x55) mod 256 and bytes 6 and 7 i (big endian).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "otel_thread_ctx.h"

#ifdef CTX_DLOPEN
static void (*attach)(struct otel_thread_ctx_record *);
static void (*detach)(void);
static void *(*address)(void);
#else
#define attach otel_ctx_attach
#define detach otel_ctx_detach
#define address otel_ctx_address
#endif

static volatile long sink;

__attribute__((noinline)) long probed(int i)
{
	sink += i;
	return sink;
}

__attribute__((noinline)) long inner(int i)
{
	sink += i;
	return sink;
}

__attribute__((noinline)) long outer(int i)
{
	inner(i);
	inner(i + 1);
	return sink;
}

__attribute__((noinline)) long carried(const char *traceparent)
{
	sink += traceparent[0];
	probed(1);
	return sink;
}

static void ids(struct otel_thread_ctx_record *r, int seed, int i)
{
	for (int b = 0; b < 12; b++)
		r->trace_id[b] = (uint8_t)(seed + 7 * b + 1);
	for (int b = 12; b < 16; b++)
		r->trace_id[b] = (uint8_t)(i >> (8 * (15 - b)));
	for (int b = 0; b < 6; b++)
		r->span_id[b] = (uint8_t)(3 * seed + 13 * b + 0x55);
	r->span_id[6] = (uint8_t)(i >> 8);
	r->span_id[7] = (uint8_t)i;
}

static void hex(char *out, const uint8_t *b, int n)
{
	for (int i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* unhex decodes n bytes of hex digits into b; it returns 0 on success. */
static int unhex(uint8_t *b, const char *s, int n)
{
	if ((int)strlen(s) != 2 * n)
		return -1;
	for (int i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		b[i] = (uint8_t)v;
	}
	return 0;
}

static void *thread_pointer(void)
{
#if defined(__x86_64__)
	void *tp;
	__asm__ volatile("mov %%fs:0, %0" : "=r"(tp)); /* glibc's tcb->tcb points at itself */
	return tp;
#else
	return __builtin_thread_pointer();
#endif
}

struct run {
	int n, seed;
	pthread_barrier_t *start;
};

static void *run_thread(void *arg)
{
	struct run *r = arg;
	struct otel_thread_ctx_record rec = {.trace_flags = 1};

	pthread_barrier_wait(r->start);
	for (int i = 0; i < r->n; i++) {
		ids(&rec, r->seed, i);
		attach(&rec);
		probed(i);
		detach();
		if (i % 8 == 0)
			sched_yield(); /* let the other thread in */
	}
	return NULL;
}

/* publish_process_context publishes an OTEP 4719 process context whose
 * attributes hold threadlocal.schema_version and a key map of two names. */
static void publish_process_context(void)
{
	static const char *keys[] = {"http.request.method", "http.route"};
	static uint8_t payload[256];
	size_t n = 0;
	/* ProcessContext.attributes (2): KeyValue{key (1), value (2): AnyValue} */
	const char *schema = "tlsdesc_v1_dev";
	uint8_t kv[128];
	size_t k = 0;
	const char *name = "threadlocal.schema_version";
	kv[k++] = 0x0a, kv[k++] = (uint8_t)strlen(name), memcpy(kv + k, name, strlen(name)), k += strlen(name);
	kv[k++] = 0x12, kv[k++] = (uint8_t)(2 + strlen(schema));
	kv[k++] = 0x0a, kv[k++] = (uint8_t)strlen(schema), memcpy(kv + k, schema, strlen(schema)), k += strlen(schema);
	payload[n++] = 0x12, payload[n++] = (uint8_t)k, memcpy(payload + n, kv, k), n += k;
	/* threadlocal.attribute_key_map: AnyValue{array_value (5): ArrayValue{values (1): AnyValue{string_value (1)}}} */
	uint8_t arr[96];
	size_t a = 0;
	for (int i = 0; i < 2; i++) {
		size_t l = strlen(keys[i]);
		arr[a++] = 0x0a, arr[a++] = (uint8_t)(2 + l), arr[a++] = 0x0a, arr[a++] = (uint8_t)l;
		memcpy(arr + a, keys[i], l), a += l;
	}
	k = 0;
	name = "threadlocal.attribute_key_map";
	kv[k++] = 0x0a, kv[k++] = (uint8_t)strlen(name), memcpy(kv + k, name, strlen(name)), k += strlen(name);
	kv[k++] = 0x12, kv[k++] = (uint8_t)(2 + a), kv[k++] = 0x2a, kv[k++] = (uint8_t)a, memcpy(kv + k, arr, a), k += a;
	payload[n++] = 0x12, payload[n++] = (uint8_t)k, memcpy(payload + n, kv, k), n += k;

	/* A memfd named OTEL_CTX (/memfd:OTEL_CTX in the maps), or an
	 * anonymous mapping the kernel may name [anon:OTEL_CTX]. */
	uint8_t *m = MAP_FAILED;
	int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd >= 0 && ftruncate(fd, 4096) == 0)
		m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (fd >= 0)
		close(fd);
	if (m == MAP_FAILED)
		m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return;
	madvise(m, 4096, MADV_DONTFORK);
	memcpy(m, "OTEL_CTX", 8);
	uint32_t version = 2, size = (uint32_t)n;
	uint64_t at = (uint64_t)(uintptr_t)payload;
	memcpy(m + 8, &version, 4);
	memcpy(m + 12, &size, 4);
	memcpy(m + 24, &at, 8);
	atomic_thread_fence(memory_order_seq_cst);
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	uint64_t published = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	memcpy(m + 16, &published, 8);
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, m, 4096, "OTEL_CTX");
}

int main(void)
{
	char line[128];
	int n, seed, flags;

	printf("ready %d\n", getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		struct otel_thread_ctx_record rec = {.trace_flags = 1};
		if (strncmp(line, "open", 4) == 0) {
#ifdef CTX_DLOPEN
			void *h = dlopen("libctx.so", RTLD_NOW);
			if (!h || !(attach = dlsym(h, "otel_ctx_attach")) || !(detach = dlsym(h, "otel_ctx_detach")) ||
			    !(address = dlsym(h, "otel_ctx_address"))) {
				printf("dlopen failed: %s\n", dlerror());
				return 1;
			}
#endif
			printf("opened\n");
		} else if (strncmp(line, "where", 5) == 0) {
			printf("where %p %p\n", thread_pointer(), address());
		} else if (sscanf(line, "call %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				probed(i);
			printf("called %d\n", n);
		} else if (sscanf(line, "ctx %d %d %d", &n, &seed, &flags) == 3) {
			rec.trace_flags = (uint8_t)flags;
			for (int i = 0; i < n; i++) {
				ids(&rec, seed, i);
				attach(&rec);
				probed(i);
				detach();
			}
			printf("ctx %d\n", n);
		} else if (sscanf(line, "nest %d %d", &n, &seed) == 2) {
			for (int i = 0; i < n; i++) {
				ids(&rec, seed, i);
				attach(&rec);
				outer(i);
				detach();
			}
			printf("nest %d\n", n);
		} else if (sscanf(line, "threads %d %d", &n, &seed) == 2) {
			pthread_barrier_t start;
			pthread_t t[2];
			struct run r[2] = {{n, seed, &start}, {n, seed + 1, &start}};
			pthread_barrier_init(&start, NULL, 2);
			for (int i = 0; i < 2; i++)
				pthread_create(&t[i], NULL, run_thread, &r[i]);
			for (int i = 0; i < 2; i++)
				pthread_join(t[i], NULL);
			pthread_barrier_destroy(&start);
			printf("threads %d\n", n);
		} else if (sscanf(line, "torn %d %d", &n, &seed) == 2) {
			ids(&rec, seed, 0);
			attach(&rec);
			for (int i = 0; i < n; i++) {
				/* In-place update (OTEP 4947): valid = 0, rewrite, valid = 1;
				 * the probed call comes in the middle. */
				rec.valid = 0;
				atomic_signal_fence(memory_order_seq_cst);
				ids(&rec, seed, i + 1);
				probed(i);
				atomic_signal_fence(memory_order_seq_cst);
				rec.valid = 1;
			}
			detach();
			printf("torn %d\n", n);
		} else if (sscanf(line, "carrier %d %d", &n, &seed) == 2) {
			struct otel_thread_ctx_record other;
			char tp[64];
			for (int i = 0; i < n; i++) {
				ids(&rec, seed, i);
				ids(&other, seed + 1, i);
				memcpy(tp, "00-", 3);
				hex(tp + 3, other.trace_id, 16);
				tp[35] = '-';
				hex(tp + 36, other.span_id, 8);
				strcpy(tp + 52, "-01");
				attach(&rec);
				carried(tp);
				detach();
			}
			printf("carrier %d\n", n);
		} else if (strncmp(line, "pub ", 4) == 0) {
			char trace[40], span[24];
			if (sscanf(line, "pub %39s %23s %d %d", trace, span, &flags, &n) != 4 || unhex(rec.trace_id, trace, 16) ||
			    unhex(rec.span_id, span, 8)) {
				printf("pub: bad arguments\n");
				return 1;
			}
			rec.trace_flags = (uint8_t)flags;
			attach(&rec);
			for (int i = 0; i < n; i++)
				outer(i);
			detach();
			printf("pub %d\n", n);
		} else if (sscanf(line, "attrs %d %d", &n, &seed) == 2) {
			static int published;
			if (!published++)
				publish_process_context();
			for (int i = 0; i < n; i++) {
				char route[16];
				int l = snprintf(route, sizeof(route), "/r/%d", i);
				uint8_t *d = rec.attrs_data;
				ids(&rec, seed, i);
				d[0] = 0, d[1] = 3, memcpy(d + 2, "GET", 3);
				d[5] = 1, d[6] = (uint8_t)l, memcpy(d + 7, route, l);
				rec.attrs_data_size = (uint16_t)(7 + l);
				attach(&rec);
				probed(i);
				detach();
			}
			printf("attrs %d\n", n);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
