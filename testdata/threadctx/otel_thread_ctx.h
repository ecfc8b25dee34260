/*
 * otel_thread_ctx.h is what an OpenTelemetry SDK's native part declares to
 * publish the active span of each thread as OTEP 4947 says ("Thread
 * Context: Sharing Thread-Level Information with External Readers"): the
 * thread-local pointer otel_thread_ctx_v1, exported in .dynsym, to a
 * packed record.
 */
#ifndef OTEL_THREAD_CTX_H
#define OTEL_THREAD_CTX_H

#include <stdint.h>

struct otel_thread_ctx_record {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t valid;       /* 1: complete; anything else: ignore the record */
	uint8_t trace_flags; /* W3C trace flags: 1 = sampled */
	uint16_t attrs_data_size;
	uint8_t attrs_data[100]; /* key index, length, UTF-8 value; ... */
} __attribute__((packed, aligned(8)));

/* The SDK's calls (ctxlib.c): attach a record to the calling thread, detach
 * it, and the address of the calling thread's variable. */
void otel_ctx_attach(struct otel_thread_ctx_record *r);
void otel_ctx_detach(void);
void *otel_ctx_address(void);

#endif
