/*
 * loop_shared.h - the shared event loops of a process (DT_SHARED_LOOP=1):
 * one thread per kind of work, serving every node of the process instead
 * of each node having threads of its own. A van in shared mode hands its
 * epoll set to the I/O loop and its handshake set to the handshake loop
 * (van.c); a node's heartbeats are a timer on the heartbeat loop
 * (core/watch.c). A process that simulates thousands of nodes thus needs
 * three library threads whatever its count of nodes.
 *
 * A loop is a thread that sleeps in epoll_wait on the descriptors it was
 * given (each one an epoll set of its own, which epoll reports readable,
 * level-triggered, while it holds an event) and on a heap of timers, and
 * runs each source's callback in turn. Callbacks run in the loop's one
 * thread, one at a time, and must never wait for a peer or for another
 * node: every node of the process waits behind them (dt__loop_thread
 * tells the van to queue what a peer does not take at once).
 */
#ifndef DT_NET_LOOP_SHARED_H
#define DT_NET_LOOP_SHARED_H

#include <stdint.h>

#include "dtrain/err.h"

typedef struct dt_loop dt_loop;
typedef struct dt_loop_src dt_loop_src;

/* The loops of a process, one thread each. */
enum dt_loop_kind {
	DT_LOOP_IO,   /* the vans' events ("dt-io-shared") */
	DT_LOOP_HS,   /* the vans' handshakes ("dt-hs-shared", niced) */
	DT_LOOP_BEAT, /* the nodes' heartbeats ("dt-hb-shared") */
	DT_LOOP_KINDS
};

/* Whether DT_SHARED_LOOP asks for the shared loops (*on, 0 or 1). */
dt_err dt__loop_configure(int *on);

/*
 * Take a reference to the process's loop of kind, starting its thread if
 * nobody holds one. Release it with dt__loop_put once the sources added
 * to it are removed; the last put stops and joins the thread. Neither may
 * be called from a loop's own thread.
 */
dt_err dt__loop_get(int kind, dt_loop **out);
void dt__loop_put(dt_loop *l);

/*
 * Run ready(arg) in the loop's thread whenever fd is readable
 * (level-triggered), and tick(arg) (if not NULL) about every 100 ms
 * whatever fd does (periodic work: sweeps, timeouts).
 */
dt_err dt__loop_add_fd(dt_loop *l, int fd, void (*ready)(void *arg),
                       void (*tick)(void *arg), void *arg, dt_loop_src **out);

/*
 * Run run(arg, now) in the loop's thread at at (dt__now_ns clock), then
 * again at the time it returns (UINT64_MAX: not until dt__loop_timer_at).
 */
dt_err dt__loop_add_timer(dt_loop *l, uint64_t (*run)(void *arg, uint64_t now),
                          void *arg, uint64_t at, dt_loop_src **out);
/* Run s's timer no later than at (any thread; wakes the loop). */
void dt__loop_timer_at(dt_loop *l, dt_loop_src *s, uint64_t at);

/*
 * Remove s: once this returns, none of its callbacks runs or will run
 * (from another thread: it waits for one that runs now), and fd is no
 * longer watched (the caller may close it). The loop frees s.
 */
void dt__loop_remove(dt_loop *l, dt_loop_src *s);

/* 1 in the thread of a shared loop: it must not wait for a peer. */
int dt__loop_thread(void);

/*
 * The loop's own stalls, as a van's (van_int.h: busy_since, stall_end):
 * when its round of callbacks that still runs began (0: none runs) and
 * when the last one that took longer than stall_ns ended. A node served
 * by a loop that is behind has not read its peers' bytes yet.
 */
void dt__loop_stalls(dt_loop *l, uint64_t *busy_since, uint64_t *stall_end);

#endif
