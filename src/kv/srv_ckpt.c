/*
 * srv_ckpt.c - a parameter server's checkpoints: a snapshot of every
 * store kind taken in the I/O thread between two rounds, written to disk
 * by a writer thread of its own (DTRAIN_CHECKPOINT_DIR, _EVERY, _SECONDS),
 * loaded back at the start (DTRAIN_CHECKPOINT_LOAD, or a server that takes
 * a lost one's place), and told to the workers under DTRAIN_RECOVER so
 * they keep copies of the pushes a file does not hold yet.
 *
 * The file's format is ckpt.c's; each kind writes and reads its own
 * section through its ops (server.h: count, snapshot, held, load, drop),
 * in the order of srv_kinds. Threads: everything but writer_main runs in
 * the node's I/O thread; the writer only takes finished snapshots, under
 * ck_mu.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/kv_impl.h"
#include "kv/server.h"

/* A snapshot of the store on its way to disk. */
struct ckpt_job {
	uint8_t *buf;
	size_t len;
	uint64_t number;
	/* What the workers are told once it is on disk (recovery): its
	 * keys, and each key's pushes of each worker in it. */
	size_t nkeys;
	dt_key *keys;
	uint64_t *applied; /* nkeys x nworkers */
};

static void
job_free(ckpt_job *job)
{
	if (job == NULL)
		return;
	free(job->buf);
	free(job->keys);
	free(job->applied);
	free(job);
}

/*
 * Recovery: tell each worker which of its pushes a checkpoint holds
 * (KV_CKPT_DONE: u64 number, u64 count, then count x (u64 key, u64
 * pushes)); it keeps a copy of the later ones to send again should this
 * server be restarted from that file. arg2 bit 0: this server was just
 * restarted from it (or from nothing: count 0), and the later pushes are
 * wanted now.
 */
static void
tell_workers(kv_server *s, uint64_t number, size_t nkeys, const dt_key *keys,
             const uint64_t *applied, int restarted)
{
	for (int w = 0; w < s->nworkers; w++) {
		dt_wbuf b;
		dt_msg_hdr h = {.cmd = DT_CMD_KV_CKPT_DONE,
		                .flags = DT_F_REQUEST,
		                .arg2 = restarted ? 1u : 0u};

		dt__wbuf_init(&b);
		dt__wbuf_u64(&b, number);
		dt__wbuf_u64(&b, nkeys);
		for (size_t k = 0; k < nkeys; k++) {
			dt__wbuf_u64(&b, keys[k]);
			dt__wbuf_u64(
			    &b, applied[k * (size_t)s->nworkers + (size_t)w]);
		}
		if (dt__wbuf_err(&b) == DT_OK)
			(void)dt__node_send(s->node,
			                    dt__node_worker_id(s->node, w), &h,
			                    b.data, (uint32_t)b.len, NULL, 0);
		dt__wbuf_fini(&b);
	}
}

/* A checkpoint written since the last call: tell the workers (I/O
 * thread). */
static void
announce(kv_server *s)
{
	ckpt_job *job;

	if (s->ck_dir == NULL || !dt__node_recover(s->node))
		return;
	pthread_mutex_lock(&s->ck_mu);
	job = s->ck_ok;
	s->ck_ok = NULL;
	pthread_mutex_unlock(&s->ck_mu);
	if (job == NULL)
		return;
	tell_workers(s, job->number, job->nkeys, job->keys, job->applied, 0);
	job_free(job);
}

/* What the store's kinds hold, for the workers: each record's key and
 * the pushes of each worker in it (*keys and *applied malloc'd); DT_ENOMEM
 * when there is no room. */
static dt_err
held_all(kv_server *s, size_t *n, dt_key **keys, uint64_t **applied)
{
	size_t total = 0, k = 0;

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->count)
			total += (size_t)(*kind)->count(s);
	*keys = malloc(sizeof(dt_key) * DT_MAX(total, 1));
	*applied =
	    malloc(sizeof(uint64_t) * DT_MAX(total, 1) * (size_t)s->nworkers);
	if (*keys == NULL || *applied == NULL) {
		free(*keys);
		free(*applied);
		*keys = NULL;
		*applied = NULL;
		return DT_ENOMEM;
	}
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++) {
		if ((*kind)->count == NULL)
			continue;
		(*kind)->held(s, *keys + k, *applied + k * (size_t)s->nworkers);
		k += (size_t)(*kind)->count(s);
	}
	*n = total;
	return DT_OK;
}

/* Recovery: this server took a lost one's place. Its store is the last
 * checkpoint (or empty); each worker hears what it holds of its pushes
 * and sends the rest again. */
dt_err
srv_rejoin(kv_server *s)
{
	size_t n;
	dt_key *keys;
	uint64_t *applied;

	if (held_all(s, &n, &keys, &applied))
		return dt__fail(DT_ENOMEM, "rejoining: out of memory");
	dt__log(0,
	        "taking server %d's place with %zu keys and tables "
	        "(checkpoint #%llu); the workers send again what came after",
	        s->rank, n, (unsigned long long)s->ck_number);
	tell_workers(s, s->ck_number, n, keys, applied, 1);
	free(keys);
	free(applied);
	return DT_OK;
}

/* Copy the store, in the file's format, and hand it to the writer; the
 * number it will have on disk. Runs in the I/O thread: the store does not
 * change meanwhile, and each kind writes its records as they are between
 * two rounds (a round's pushes so far are in merge buffers, not in the
 * values, and are not counted as applied). */
static dt_err
snapshot(kv_server *s, uint64_t *number)
{
	uint64_t t0 = dt__now_ns();
	dt_wbuf w;
	ckpt_job *job;
	dt_err err;
	dt_ckpt_head head = {.rank = (uint32_t)s->rank,
	                     .nservers = (uint32_t)s->nservers,
	                     .nworkers = (uint32_t)s->nworkers,
	                     .sync = s->sync,
	                     .opt = s->opt,
	                     .number = s->ck_number + 1,
	                     .rounds = s->rounds,
	                     .split = s->ck_split};
	/* One allocation of the file's size (header, sections, trailer). */
	size_t size = 256 + DT_CKPT_TRAILER;

	memcpy(head.placement, s->ck_placement, sizeof(head.placement));

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->snapshot)
			size += (*kind)->snap_bytes(s);
	dt__wbuf_init(&w);
	dt__wbuf_reserve(&w, size);
	dt__ckpt_begin(&w, &head);
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->snapshot)
			(*kind)->snapshot(s, &w);
	dt__wbuf_reserve(&w, DT_CKPT_TRAILER); /* (the writer's) */
	if ((err = dt__wbuf_err(&w)) != DT_OK ||
	    (job = calloc(1, sizeof(*job))) == NULL) {
		dt__wbuf_fini(&w);
		return err ? err
		           : dt__fail(DT_ENOMEM, "checkpoint: out of memory");
	}
	job->buf = w.data; /* heap (reserved): taken over, not freed here */
	job->len = w.len;
	if (dt__node_recover(s->node) &&
	    held_all(s, &job->nkeys, &job->keys, &job->applied))
		job->nkeys = 0; /* (the workers keep their copies longer) */
	job->number = ++s->ck_number;
	s->ck_rounds_at = s->rounds;
	s->ck_last_ns = dt__now_ns();
	s->ck_snap_ns += s->ck_last_ns - t0;
	pthread_mutex_lock(&s->ck_mu);
	if (s->ck_next) /* not begun yet: this newer one replaces it */
		job_free(s->ck_next);
	s->ck_next = job;
	pthread_cond_broadcast(&s->ck_cv);
	pthread_mutex_unlock(&s->ck_mu);
	*number = job->number;
	return DT_OK;
}

static void *
writer_main(void *arg)
{
	kv_server *s = arg;

	pthread_mutex_lock(&s->ck_mu);
	for (;;) {
		ckpt_job *job = s->ck_next;

		if (job == NULL && s->ck_stop)
			break;
		if (job == NULL) {
			pthread_cond_wait(&s->ck_cv, &s->ck_mu);
			continue;
		}
		s->ck_next = NULL;
		pthread_mutex_unlock(&s->ck_mu);
		uint64_t t0 = dt__now_ns();
		job->len = dt__ckpt_seal(job->buf, job->len);
		dt_err err =
		    dt__ckpt_write(s->ck_dir, s->ck_name, job->buf, job->len);
		uint64_t dt = dt__now_ns() - t0;
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", err ? dt_errmsg() : "");
		if (err)
			dt__log(0, "checkpoint #%llu not written: %s",
			        (unsigned long long)job->number, msg);
		else
			DT_LOG(1,
			       "checkpoint #%llu: %zu bytes in %s/%s (%.1f ms)",
			       (unsigned long long)job->number, job->len,
			       s->ck_dir, s->ck_name, (double)dt / 1e6);
		pthread_mutex_lock(&s->ck_mu);
		s->ck_done = job->number;
		s->ck_err = err;
		snprintf(s->ck_errmsg, sizeof(s->ck_errmsg), "%s", msg);
		s->ck_written += err == DT_OK;
		s->ck_write_ns += dt;
		pthread_cond_broadcast(&s->ck_cv);
		free(job->buf);
		job->buf = NULL;
		if (err == DT_OK) { /* the next to tell the workers */
			job_free(s->ck_ok);
			s->ck_ok = job;
		} else {
			job_free(job);
		}
	}
	pthread_mutex_unlock(&s->ck_mu);
	return NULL;
}

/* After a round (or an async update): a checkpoint if one is due. */
void
srv_maybe_checkpoint(kv_server *s)
{
	uint64_t number, nkeys = 0;

	if (s->ck_dir == NULL)
		return;
	announce(s);
	/* (N rounds of every key and table) */
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->count)
			nkeys += (*kind)->count(s);
	nkeys = DT_MAX(nkeys, 1);
	if (!(s->ck_every &&
	      s->rounds - s->ck_rounds_at >= s->ck_every * nkeys) &&
	    !(s->ck_every_ns && dt__now_ns() - s->ck_last_ns >= s->ck_every_ns))
		return;
	if (snapshot(s, &number) != DT_OK)
		dt__log(0, "checkpoint skipped: %s", dt_errmsg());
}

/* KV_CHECKPOINT: a snapshot now, answered once it is on disk (the I/O
 * thread waits: every worker waits for this answer anyway). */
void
srv_on_checkpoint(kv_server *s, int worker, const dt_msg_hdr *h)
{
	uint64_t number;
	dt_err err;
	char msg[256];

	if (s->ck_dir == NULL) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, 0, DT_ESTATE,
		    "checkpoint: server %d has no DTRAIN_CHECKPOINT_DIR",
		    s->rank);
		return;
	}
	if ((err = snapshot(s, &number)) != DT_OK) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, err,
		                "checkpoint of server %d: %s", s->rank,
		                dt_errmsg());
		return;
	}
	/* As long as a worker waits for an answer (DT_WAIT_TIMEOUT): a disk
	 * that hangs fails the call, not the server. */
	uint64_t until = dt__now_ns() + dt__node_wait_ns(s->node);
	struct timespec ts = dt__timespec_at(until);

	pthread_mutex_lock(&s->ck_mu);
	while (s->ck_done < number && dt__now_ns() < until)
		pthread_cond_timedwait(&s->ck_cv, &s->ck_mu, &ts);
	if (s->ck_done < number) {
		err = DT_ETIMEDOUT;
		snprintf(msg, sizeof(msg),
		         "the file was not written within DT_WAIT_TIMEOUT");
	} else {
		err = s->ck_err;
		snprintf(msg, sizeof(msg), "%s", s->ck_errmsg);
	}
	pthread_mutex_unlock(&s->ck_mu);
	if (err)
		srv_reply_error(s, worker, h->cmd, h->seq, 0, err,
		                "checkpoint of server %d: %s", s->rank, msg);
	else
		srv_reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
	announce(s);
}

/* Load path (checked whole first, then applied): the header, then each
 * kind's section in the format's order. */
static dt_err
load_file(kv_server *s, const char *path)
{
	uint8_t *buf;
	size_t len;
	dt_rbuf r;
	dt_ckpt_head head;
	dt_err err;

	if ((err = dt__ckpt_read(path, &buf, &len)))
		return err;
	if ((err = dt__ckpt_open(path, buf, len, &r, &head)))
		goto out;
	if (head.rank != (uint32_t)s->rank ||
	    head.nservers != (uint32_t)s->nservers ||
	    head.nworkers != (uint32_t)s->nworkers) {
		err =
		    dt__fail(DT_EMISMATCH,
		             "%s is server %u's of a job of %u servers and %u "
		             "workers; this is server %d of %d and %d",
		             path, head.rank, head.nservers, head.nworkers,
		             s->rank, s->nservers, s->nworkers);
		goto out;
	}
	/* (a file older than version 3 does not say: it loads as before) */
	if (head.version >= 3 && (strcmp(head.placement, s->ck_placement) ||
	                          head.split != s->ck_split)) {
		err = dt__fail(
		    DT_EMISMATCH,
		    "%s was written under key placement %s (arrays of %llu "
		    "floats and more cut over the servers); this job's is %s "
		    "(%llu floats): its slices of the keys would not be this "
		    "job's. Start the job with the placement it was written "
		    "under (DTRAIN_KV_PLACEMENT, DTRAIN_KV_SPLIT_BYTES, "
		    "MXNET_KVSTORE_BIGARRAY_BOUND)",
		    path, head.placement, (unsigned long long)head.split,
		    s->ck_placement, (unsigned long long)s->ck_split);
		goto out;
	}
	s->sync = head.sync;
	s->opt = head.opt;
	for (const srv_kind *const *kind = srv_kinds; *kind && !err; kind++)
		if ((*kind)->load)
			err = (*kind)->load(s, path, &r, &head);
	if (err == DT_OK && r.off != r.len)
		err =
		    dt__fail(DT_EFORMAT, "%s: %zu bytes after the last record",
		             path, r.len - r.off);
	s->rounds = s->ck_rounds_at = head.rounds;
	s->ck_number = head.number;
out:
	free(buf);
	return err;
}

/* Empty the store (a checkpoint that did not load). */
static void
drop_keys(kv_server *s)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->drop)
			(*kind)->drop(s);
	s->opt.kind = DT_OPT_NONE;
	s->sync = 1;
	s->ninit = 0;
	s->rounds = s->ck_rounds_at = s->ck_number = 0;
}

/* "restored checkpoint #3 from <path>: 4 keys, 1 row tables and 0
 * many-key keys after 120 rounds" (each kind's count, in order). */
static void
log_restored(kv_server *s, const char *path)
{
	char what[256];
	size_t at = 0, nkinds = 0, k = 0;

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		nkinds += (*kind)->count != NULL;
	what[0] = '\0';
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++) {
		if ((*kind)->count == NULL)
			continue;
		k++;
		at += (size_t)snprintf(
		    what + at, sizeof(what) - DT_MIN(at, sizeof(what)),
		    "%s%llu %s",
		    k == 1        ? ""
		    : k == nkinds ? " and "
		                  : ", ",
		    (unsigned long long)(*kind)->count(s), (*kind)->noun);
		at = DT_MIN(at, sizeof(what) - 1);
	}
	dt__log(0, "restored checkpoint #%llu from %s: %s after %llu rounds",
	        (unsigned long long)s->ck_number, path, what,
	        (unsigned long long)s->rounds);
}

/* DTRAIN_CHECKPOINT_LOAD=1: the newest good checkpoint of this rank, else
 * the previous one; none at all is an empty start. */
static dt_err
load_checkpoint(kv_server *s)
{
	char path[4096], prev[4096];
	dt__err_kept first = {DT_OK, ""};
	dt_err err;

	snprintf(path, sizeof(path), "%s/%s", s->ck_dir, s->ck_name);
	snprintf(prev, sizeof(prev), "%s/%s.prev", s->ck_dir, s->ck_name);
	if (access(path, F_OK) != 0 && access(prev, F_OK) != 0) {
		dt__log(0, "no checkpoint in %s yet: starting empty",
		        s->ck_dir);
		return DT_OK;
	}
	if (access(path, F_OK) == 0) {
		if ((err = load_file(s, path)) == DT_OK)
			goto loaded;
		dt__err_keep(&first, err);
		dt__log(0, "%s; trying the previous checkpoint", first.msg);
		drop_keys(s);
	}
	if ((err = load_file(s, prev)) != DT_OK) {
		dt__err_kept second;

		dt__err_keep(&second, err);
		drop_keys(s);
		if (first.err)
			return dt__fail(err, "no usable checkpoint: %s; %s",
			                first.msg, second.msg);
		return dt__fail(err, "no usable checkpoint: %s", second.msg);
	}
	snprintf(path, sizeof(path), "%s", prev);
loaded:
	log_restored(s, path);
	return DT_OK;
}

/* The job's key placement, as the workers will compute it from the same
 * variables (the server places nothing itself: placement.c). */
static dt_err
placement_config(kv_server *s)
{
	dt_kv_map *m;
	dt_err err;

	if ((err = dt__kv_map_from_env(s->nservers, &m)))
		return err;
	snprintf(s->ck_placement, sizeof(s->ck_placement), "%s",
	         dt__kv_map_policy(m));
	s->ck_split = dt__kv_map_split(m);
	dt__kv_map_destroy(m);
	return DT_OK;
}

dt_err
srv_ckpt_start(kv_server *s)
{
	const char *dir = dt__env_str("DTRAIN_CHECKPOINT_DIR");
	long every, load;
	uint64_t every_ns;
	struct stat st;
	dt_err err;

	if ((err = dt__env_long("DTRAIN_CHECKPOINT_EVERY", 100, 0, 1L << 40,
	                        &every)) ||
	    (err = dt__env_seconds("DTRAIN_CHECKPOINT_SECONDS", 0, 0,
	                           86400 * 365, &every_ns)) ||
	    (err = dt__env_long("DTRAIN_CHECKPOINT_LOAD", 0, 0, 1, &load)))
		return err;
	if (dir == NULL || *dir == '\0') {
		if (load)
			return dt__fail(DT_ECONFIG,
			                "DTRAIN_CHECKPOINT_LOAD=1 "
			                "needs DTRAIN_CHECKPOINT_DIR");
		return DT_OK;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return dt__fail(DT_ECONFIG, "DTRAIN_CHECKPOINT_DIR %s: %s", dir,
		                strerror(errno));
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    access(dir, W_OK | X_OK) < 0)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_CHECKPOINT_DIR %s: not a writable "
		                "directory",
		                dir);
	if ((err = placement_config(s)))
		return err;
	if ((s->ck_dir = strdup(dir)) == NULL)
		return DT_ENOMEM;
	snprintf(s->ck_name, sizeof(s->ck_name), "server-%d.ckpt", s->rank);
	s->ck_every = (uint64_t)every;
	s->ck_every_ns = every_ns;
	s->ck_last_ns = dt__now_ns();
	/* A server that takes a lost one's place starts from its last
	 * checkpoint (recovery), as a whole job resumed from files. */
	if ((load || dt__node_rejoined(s->node)) && (err = load_checkpoint(s)))
		return err;
	pthread_mutex_init(&s->ck_mu, NULL);
	dt__cond_init_monotonic(&s->ck_cv); /* (on_checkpoint's deadline) */
	if (pthread_create(&s->ck_thread, NULL, writer_main, s) != 0) {
		pthread_cond_destroy(&s->ck_cv);
		pthread_mutex_destroy(&s->ck_mu);
		return dt__fail(DT_ESYS, "checkpoint writer thread");
	}
	s->ck_started = 1;
	return DT_OK;
}

void
srv_ckpt_stop(kv_server *s)
{
	if (!s->ck_started)
		return;
	pthread_mutex_lock(&s->ck_mu);
	s->ck_stop = 1;
	pthread_cond_broadcast(&s->ck_cv);
	pthread_mutex_unlock(&s->ck_mu);
	pthread_join(s->ck_thread, NULL);
	if (s->ck_written)
		dt__log(0,
		        "%llu checkpoints written (%.1f ms each on average; "
		        "%.2f ms of snapshots in the I/O thread)",
		        (unsigned long long)s->ck_written,
		        (double)s->ck_write_ns / 1e6 / (double)s->ck_written,
		        (double)s->ck_snap_ns / 1e6);
	job_free(s->ck_ok);
	s->ck_ok = NULL;
	pthread_cond_destroy(&s->ck_cv);
	pthread_mutex_destroy(&s->ck_mu);
	s->ck_started = 0;
}
