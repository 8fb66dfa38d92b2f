/*
 * rendezvous.c - a communicator's ranks under mpirun or srun, where no
 * dtrain launch has set the DMLC_* variables: the launcher's rank and size
 * (core's one list of their variables), the job's scheduler run by rank 0
 * in a thread ("dt-sched"), and how the others learn where it listens and
 * which secret the job holds (rdv.h: a card, exchanged by a kind).
 *
 * The address comes from DTRAIN_COLL_ROOT when the user set it (as
 * before: then the secret must come from the environment too); otherwise
 * rank 0 listens on a port the kernel chooses, on the address this node
 * advertises, makes a fresh secret and publishes both. The secret a
 * variable names (DTRAIN_SECRET, DTRAIN_SECRET_FILE, DTRAIN_AUTH=none)
 * still wins over the card's: net/auth.c uses the card's only when no
 * variable says otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "coll/rdv.h"
#include "net/sock.h"

/* The kinds, in the order they are tried: the first that can serve the
 * process's launcher carries the card. */
static const dt__rdv_kind *const kinds[] = {&dt__rdv_pmix, &dt__rdv_file};

/* Bind host:port for the in-process scheduler, so a busy port is an error
 * of rank 0 at once rather than a timeout everywhere. */
static dt_err
bind_root(const char *host, int port, const char *var, int *fd_out, int *bound)
{
	dt_err err =
	    dt__sock_listen(host, port, "the rendezvous socket", fd_out, bound);

	if (err == DT_OK)
		return DT_OK;
	/* (dt__fail formats before it records) */
	return dt__fail(err,
	                "rank 0 cannot listen on %s%s:%d for the "
	                "rendezvous (%s)",
	                var, host, port, dt_errmsg());
}

typedef struct sched_arg {
	dt_coll *c;
	dt_node_config cfg;
} sched_arg;

/* The in-process scheduler of an mpirun/srun job (rank 0's thread
 * "dt-sched"): admit the ranks, then serve until every one has left. */
static void *
sched_main(void *arg)
{
	sched_arg *a = arg;
	dt_coll *c = a->c;
	dt_node *s = NULL;
	dt_err err;

	err = dt_node_start(&a->cfg, &s);
	if (err == DT_OK)
		err = dt_node_serve(s);
	if (err) {
		snprintf(c->sched_msg, sizeof(c->sched_msg), "%s", dt_errmsg());
		dt__log(0, "in-process scheduler: %s", c->sched_msg);
	}
	if (s)
		dt_node_stop(s);
	c->sched_err = err;
	free(a);
	return NULL;
}

/* Rank 0: start the scheduler thread on the bound socket fd (which it
 * owns from here on, even on error). */
static dt_err
start_sched(dt_coll *c, const dt_node_config *cfg, int fd)
{
	sched_arg *a = dt__calloc(1, sizeof(*a));

	if (a == NULL) {
		close(fd);
		return DT_ENOMEM;
	}
	a->c = c;
	a->cfg = *cfg;
	a->cfg.role = DT_ROLE_SCHEDULER;
	a->cfg.requested_rank = -1;
	a->cfg.listen_fd = fd;
	if (pthread_create(&c->sched_thread, NULL, sched_main, a)) {
		close(fd);
		free(a);
		return dt__fail(DT_ESYS, "cannot start the scheduler thread");
	}
	pthread_setname_np(c->sched_thread, "dt-sched");
	c->sched_started = 1;
	return DT_OK;
}

/* DTRAIN_COLL_ROOT=host:port into cfg's root. */
static dt_err
explicit_root(const char *root, dt_node_config *cfg)
{
	const char *colon = strrchr(root, ':');
	long port;
	dt_err err;

	if (colon == NULL || colon == root ||
	    (size_t)(colon - root) >= sizeof(cfg->root_uri))
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_COLL_ROOT='%s': expected host:port",
		                root);
	memcpy(cfg->root_uri, root, (size_t)(colon - root));
	cfg->root_uri[colon - root] = '\0';
	if ((err = dt__parse_long("DTRAIN_COLL_ROOT port", colon + 1, 1, 65535,
	                          &port)))
		return err;
	cfg->root_port = (int)port;
	snprintf(cfg->root_var, sizeof(cfg->root_var), "DTRAIN_COLL_ROOT");
	return DT_OK;
}

/* The first kind that can serve this launcher (or the one DTRAIN_RENDEZVOUS
 * names), prepared in r. */
static dt_err
choose_kind(dt__rdv *r)
{
	const char *want = dt__env_str("DTRAIN_RENDEZVOUS");
	int usable = 0, known = 0;
	dt_err err;

	for (size_t i = 0; i < DT_ARRAY_LEN(kinds); i++) {
		if (want && strcmp(want, "auto") != 0 &&
		    strcmp(want, kinds[i]->id) != 0)
			continue;
		known = 1;
		if ((err = kinds[i]->prepare(r, &usable)))
			return err;
		if (usable) {
			r->kind = kinds[i];
			return DT_OK;
		}
	}
	if (!known)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_RENDEZVOUS=%s: expected auto (the "
		                "default), pmix or file",
		                want);
	if (want && strcmp(want, "auto") != 0)
		return dt__fail(DT_ECONFIG,
		                "rank %d of %d: DTRAIN_RENDEZVOUS=%s cannot "
		                "serve this launcher (%s)",
		                r->rank, r->size, want,
		                strcmp(want, "pmix") == 0
		                    ? "no PMIx server, or no libpmix.so.2"
		                    : "it names no job id");
	return dt__fail(DT_ECONFIG,
	                "rank %d of %d under mpirun/srun: no way to find rank "
	                "0 (no job id from the launcher); set "
	                "DTRAIN_COLL_ROOT=host:port to an address rank 0 can "
	                "listen on, or start the job with dtrain launch",
	                r->rank, r->size);
}

/* Every rank: the card's secret for this process's nodes, its address as
 * the scheduler's; the card is wiped. */
static void
take_card(const dt__rdv *r, dt__rdv_card *card, dt_node_config *cfg)
{
	dt__auth_set_job_secret(card->secret);
	snprintf(cfg->root_uri, sizeof(cfg->root_uri), "%s", card->host);
	cfg->root_port = card->port;
	/* A rank that cannot reach it names where the address came from. */
	snprintf(cfg->root_var, sizeof(cfg->root_var), "%s", r->kind->name);
	explicit_bzero(card, sizeof(*card));
}

/*
 * Rank 0 without DTRAIN_COLL_ROOT: listen on a free port of the address
 * this node advertises, make the job's secret and publish the card. *fd is
 * the bound socket.
 */
static dt_err
publish(dt__rdv *r, dt_node_config *cfg, int *fd)
{
	dt__rdv_card card;
	dt_err err;

	memset(&card, 0, sizeof(card));
	if ((err = dt__net_local_addr(cfg->node_host, cfg->interface, card.host,
	                              sizeof(card.host))))
		return err;
	if ((err = bind_root(card.host, 0, "", fd, &card.port)))
		return err;
	card.size = r->size;
	if (getrandom(card.secret, sizeof(card.secret), 0) !=
	    (ssize_t)sizeof(card.secret)) {
		err = dt__fail(DT_ESYS,
		               "no random bytes for the job's secret: "
		               "%s",
		               strerror(errno));
		goto fail;
	}
	if ((err = r->kind->exchange(r, &card)))
		goto fail;
	take_card(r, &card, cfg);
	return DT_OK;
fail:
	explicit_bzero(&card, sizeof(card));
	close(*fd);
	*fd = -1;
	return err;
}

/* Every rank but 0: read the card, take its address and secret. */
static dt_err
lookup(dt__rdv *r, dt_node_config *cfg)
{
	dt__rdv_card card;
	dt_err err;

	memset(&card, 0, sizeof(card));
	if ((err = r->kind->exchange(r, &card)))
		return err;
	if (card.size != r->size) {
		explicit_bzero(&card, sizeof(card));
		return dt__fail(DT_ECONFIG,
		                "rank %d: the rendezvous card is for a job of "
		                "%d ranks, this one has %d (a card left by "
		                "another job?)",
		                r->rank, card.size, r->size);
	}
	take_card(r, &card, cfg);
	return DT_OK;
}

/* The configuration every rank's nodes share, and c->rdv. */
static dt_err
rank_config(dt_coll *c, int rank, int size, dt_node_config *cfg)
{
	dt_err err;

	memset(cfg, 0, sizeof(*cfg));
	cfg->role = DT_ROLE_WORKER;
	cfg->num_servers = 0;
	cfg->num_workers = size;
	cfg->requested_rank = rank;
	cfg->listen_fd = -1;
	if ((err = dt__node_config_local(cfg)))
		return err;
	cfg->port = 0; /* DMLC_PORT is a server's; the ranks take any */
	if ((c->rdv = dt__calloc(1, sizeof(*c->rdv))) == NULL)
		return DT_ENOMEM;
	c->rdv->rank = rank;
	c->rdv->size = size;
	c->rdv->deadline_ns =
	    dt__now_ns() + (uint64_t)cfg->connect_timeout_ms * 1000000ull;
	return DT_OK;
}

dt_err
dt__coll_rdv_join(dt_coll *c)
{
	const char *root = dt__env_str("DTRAIN_COLL_ROOT"), *var;
	dt_node_config cfg;
	int rank, size, fd = -1, bound;
	dt_err err;

	if ((err = dt__launcher_rank(&rank, &size, &var)))
		return err;
	if (var == NULL || size <= 1)
		return DT_OK; /* a process alone */
	if ((err = rank_config(c, rank, size, &cfg)))
		return err;
	if (root) {
		if ((err = explicit_root(root, &cfg)))
			return err;
		if (rank == 0 &&
		    (err = bind_root(cfg.root_uri, cfg.root_port,
		                     "DTRAIN_COLL_ROOT=", &fd, &bound)))
			return err;
	} else {
		if ((err = choose_kind(c->rdv)))
			return err;
		err = rank == 0 ? publish(c->rdv, &cfg, &fd)
		                : lookup(c->rdv, &cfg);
		if (err)
			return err;
	}
	if (rank == 0 && (err = start_sched(c, &cfg, fd)))
		return err;
	if ((err = dt_node_start(&cfg, &c->node)))
		return err;
	c->own_node = 1;
	DT_LOG(1, "rank %d of %d (%s): met at %s:%d, by %s", rank, size, var,
	       cfg.root_uri, cfg.root_port,
	       root ? "DTRAIN_COLL_ROOT" : c->rdv->kind->name);
	/* Every rank has read the card once rank 0's node is up: the
	 * scheduler admitted them all before answering it. */
	if (c->rdv->kind)
		c->rdv->kind->done(c->rdv);
	return DT_OK;
}

dt_err
dt__coll_rdv_end(dt_coll *c)
{
	dt_err err = DT_OK;

	if (c->rdv && c->rdv->kind)
		c->rdv->kind->done(c->rdv);
	if (c->sched_started) {
		pthread_join(c->sched_thread, NULL);
		c->sched_started = 0;
		if (c->sched_err)
			err = dt__fail(c->sched_err, "in-process scheduler: %s",
			               c->sched_msg);
	}
	if (c->rdv) {
		dt__auth_set_job_secret(NULL);
		free(c->rdv);
		c->rdv = NULL;
	}
	return err;
}
