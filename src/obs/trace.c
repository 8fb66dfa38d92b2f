/*
 * trace.c - the timeline's event buffer: fixed 48-byte events appended
 * under one lock into chunks, up to DTRAIN_TIMELINE_MAX_EVENTS, and handed
 * to the owner (the process's member node) at its stop, which ships them
 * to the scheduler (core/report.c). Their wire form is here too, beside
 * its decoder.
 *
 * Off, every recording site costs one relaxed load (dt__tracing). On, an
 * event costs a clock read and an uncontended lock: a step of the trainer
 * records a few dozen.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "common/bytes.h"
#include "obs/obs.h"

#define DT__EV_NAME(name, str, cat) str,
#define DT__EV_CAT(name, str, cat)  cat,
const char *const dt__ev_name[DT_EV_COUNT] = {DT_TRACE_KINDS(DT__EV_NAME)};
const char *const dt__ev_cat[DT_EV_COUNT] = {DT_TRACE_KINDS(DT__EV_CAT)};
#undef DT__EV_NAME
#undef DT__EV_CAT

#define CHUNK 4096

typedef struct chunk {
	struct chunk *next;
	size_t n;
	dt__tev ev[CHUNK];
} chunk;

int dt__trace_flag;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const void *owner_of;         /* (mu) */
static chunk *head, *tail;           /* (mu) */
static uint64_t count, cap, dropped; /* (mu) */

dt_err
dt__trace_begin(const void *owner, int *owned)
{
	long max;
	dt_err err;

	*owned = 0;
	if (dt__env_str("DTRAIN_TIMELINE") == NULL)
		return DT_OK;
	if ((err = dt__env_long("DTRAIN_TIMELINE_MAX_EVENTS", 1L << 21, 1,
	                        1L << 30, &max)))
		return err;
	pthread_mutex_lock(&mu);
	if (owner_of) {
		pthread_mutex_unlock(&mu);
		return DT_OK;
	}
	owner_of = owner;
	cap = (uint64_t)max;
	count = dropped = 0;
	__atomic_store_n(&dt__trace_flag, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mu);
	*owned = 1;
	return DT_OK;
}

void
dt__trace_add(const dt__tev *e)
{
	if (!dt__tracing())
		return;
	pthread_mutex_lock(&mu);
	if (!owner_of) {
		pthread_mutex_unlock(&mu);
		return;
	}
	if (count >= cap) {
		dropped++;
		pthread_mutex_unlock(&mu);
		return;
	}
	if (tail == NULL || tail->n == CHUNK) {
		/* (malloc under the lock: once per 4096 events) */
		chunk *c = malloc(sizeof(*c));

		if (c == NULL) {
			dropped++;
			pthread_mutex_unlock(&mu);
			return;
		}
		c->next = NULL;
		c->n = 0;
		if (tail)
			tail->next = c;
		else
			head = c;
		tail = c;
	}
	tail->ev[tail->n++] = *e;
	count++;
	pthread_mutex_unlock(&mu);
}

void
dt__trace_span(int kind, int tid, uint64_t t0, uint64_t key, unsigned flags,
               uint64_t bytes, int peer)
{
	if (!dt__tracing())
		return;
	dt__trace_range(kind, tid, t0, dt__now_ns(), key, flags, bytes, peer);
}

static void
record(int kind, int tid, uint64_t t0, uint64_t t1, uint64_t key,
       unsigned flags, uint64_t bytes, uint64_t id, int peer)
{
	dt__tev e = {.ts = t0,
	             .dur = t1 > t0 ? t1 - t0 : 0,
	             .key = key,
	             .bytes = bytes,
	             .id = id,
	             .kind = (uint16_t)kind,
	             .tid = (uint8_t)tid,
	             .flags = (uint8_t)flags,
	             .peer = peer};
	dt__trace_add(&e);
}

void
dt__trace_range(int kind, int tid, uint64_t t0, uint64_t t1, uint64_t key,
                unsigned flags, uint64_t bytes, int peer)
{
	if (dt__tracing())
		record(kind, tid, t0, t1, key, flags & ~DT_EVF_ASYNC, bytes, 0,
		       peer);
}

void
dt__trace_async(int kind, uint64_t id, uint64_t t0, uint64_t t1, uint64_t key,
                unsigned flags, uint64_t bytes, int peer)
{
	if (dt__tracing())
		record(kind, DT_TID_MAIN, t0, t1, key, flags | DT_EVF_ASYNC,
		       bytes, id, peer);
}

uint64_t
dt__trace_end(const void *owner,
              void (*fn)(void *arg, const dt__tev *ev, size_t n), void *arg)
{
	chunk *c;
	uint64_t lost;

	pthread_mutex_lock(&mu);
	if (owner_of != owner || owner == NULL) {
		pthread_mutex_unlock(&mu);
		return 0;
	}
	__atomic_store_n(&dt__trace_flag, 0, __ATOMIC_RELEASE);
	owner_of = NULL;
	c = head;
	head = tail = NULL;
	lost = dropped;
	count = dropped = 0;
	pthread_mutex_unlock(&mu);
	while (c) {
		chunk *next = c->next;

		if (fn && c->n)
			fn(arg, c->ev, c->n);
		free(c);
		c = next;
	}
	return lost;
}

void
dt__tev_encode(const dt__tev *e, int64_t offset_ns, uint8_t *out)
{
	dt__put_u64(out, e->ts + (uint64_t)offset_ns);
	dt__put_u64(out + 8, e->dur);
	dt__put_u64(out + 16, e->key);
	dt__put_u64(out + 24, e->bytes);
	dt__put_u64(out + 32, e->id);
	dt__put_u16(out + 40, e->kind);
	out[42] = e->tid;
	out[43] = e->flags;
	dt__put_u32(out + 44, (uint32_t)e->peer);
}

dt_err
dt__tev_decode(const uint8_t *in, dt__tev *e)
{
	e->ts = dt__get_u64(in);
	e->dur = dt__get_u64(in + 8);
	e->key = dt__get_u64(in + 16);
	e->bytes = dt__get_u64(in + 24);
	e->id = dt__get_u64(in + 32);
	e->kind = dt__get_u16(in + 40);
	e->tid = in[42];
	e->flags = in[43];
	e->peer = (int32_t)dt__get_u32(in + 44);
	if (e->kind >= DT_EV_COUNT)
		return dt__fail(DT_EPROTO,
		                "timeline event of kind %u (%d known)", e->kind,
		                DT_EV_COUNT);
	if (e->tid >= DT_TID_COUNT)
		return dt__fail(DT_EPROTO, "timeline event on track %u",
		                e->tid);
	if (e->flags &
	    ~(DT_EVF_KEY | DT_EVF_BYTES | DT_EVF_PEER | DT_EVF_ASYNC))
		return dt__fail(DT_EPROTO, "timeline event with flags 0x%x",
		                e->flags);
	/* A span is at most a week long and starts within 2^62 ns. */
	if (e->dur > 7ull * 86400 * 1000000000ull || e->ts > (1ull << 62))
		return dt__fail(
		    DT_EPROTO, "timeline event at %llu ns lasting %llu ns",
		    (unsigned long long)e->ts, (unsigned long long)e->dur);
	if ((e->flags & DT_EVF_PEER) &&
	    (e->peer < 0 || e->peer >= DT_MAX_NODES))
		return dt__fail(DT_EPROTO, "timeline event naming node %d",
		                (int)e->peer);
	return DT_OK;
}
