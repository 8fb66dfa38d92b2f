/*
 * app.c - the registry of apps: the layers above the core (the KVStore,
 * the collectives) that own a range of commands and plug into nodes.
 *
 * The core names none of them. A class registers itself once per process
 * (dt__app_register); the node starts the classes meant for its role and
 * hands each message of a class's range to the instance attached for it
 * (dt__node_app_of). core.h has the rules for attaching and detaching.
 */
#include <pthread.h>
#include <string.h>

#include "core/node_impl.h"

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static const dt__app_class *registry[DT__MAX_APPS]; /* (reg_mu) */
static int nregistry;                               /* (reg_mu) */

static int
ranges_overlap(const dt__app_class *a, const dt__app_class *b)
{
	return a->cmd_first <= b->cmd_last && b->cmd_first <= a->cmd_last;
}

dt_err
dt__app_register(const dt__app_class *cls)
{
	dt_err err = DT_OK;

	if (cls->cmd_first > cls->cmd_last ||
	    dt__cmd_is_control(cls->cmd_first))
		return dt__fail(DT_EINVAL, "app %s: bad command range %u..%u",
		                cls->name, cls->cmd_first, cls->cmd_last);
	pthread_mutex_lock(&reg_mu);
	for (int i = 0; i < nregistry; i++) {
		if (registry[i] == cls)
			goto out;
		if (ranges_overlap(registry[i], cls)) {
			err =
			    dt__fail(DT_EEXIST,
			             "app %s: commands %u..%u overlap app %s's",
			             cls->name, cls->cmd_first, cls->cmd_last,
			             registry[i]->name);
			goto out;
		}
	}
	if (nregistry == DT__MAX_APPS) {
		err = dt__fail(DT_ENOMEM, "app %s: %d apps registered already",
		               cls->name, DT__MAX_APPS);
		goto out;
	}
	registry[nregistry++] = cls;
out:
	pthread_mutex_unlock(&reg_mu);
	return err;
}

/* A snapshot of the registry; classes are never unregistered. */
static int
registry_get(const dt__app_class **out)
{
	int n;

	pthread_mutex_lock(&reg_mu);
	n = nregistry;
	memcpy(out, registry, sizeof(registry[0]) * (size_t)n);
	pthread_mutex_unlock(&reg_mu);
	return n;
}

dt_err
dt__apps_start(dt_node *n)
{
	const dt__app_class *cls[DT__MAX_APPS];
	int count = registry_get(cls);
	dt_err err;

	for (int i = 0; i < count; i++) {
		if (!cls[i]->start ||
		    !(cls[i]->start_roles & DT__ROLE_BIT(n->role)))
			continue;
		if ((err = cls[i]->start(n)))
			return err;
		n->started |= 1u << i;
	}
	return DT_OK;
}

void
dt__apps_stop(dt_node *n)
{
	const dt__app_class *cls[DT__MAX_APPS];
	int count = registry_get(cls);

	for (int i = count - 1; i >= 0; i--)
		if ((n->started & (1u << i)) && cls[i]->stop)
			cls[i]->stop(n);
	n->started = 0;
}

dt_err
dt__node_attach(dt_node *n, const dt__app_class *cls,
                const dt__app_hooks *hooks)
{
	int slot = -1;

	pthread_mutex_lock(&n->mu);
	for (int i = 0; i < DT__MAX_APPS; i++) {
		const dt__app_class *o = n->apps[i].cls;

		if (o && ranges_overlap(o, cls)) {
			pthread_mutex_unlock(&n->mu);
			return dt__fail(DT_EEXIST,
			                "this node already has a %s attached",
			                o == cls ? cls->name : o->name);
		}
		if (!o && slot < 0)
			slot = i;
	}
	if (slot < 0) {
		pthread_mutex_unlock(&n->mu);
		return dt__fail(DT_ENOMEM, "%d apps attached already",
		                DT__MAX_APPS);
	}
	/* The hooks first, then the class that makes the slot live: the I/O
	 * thread reads slots without the lock (dt__node_app_of). */
	n->apps[slot].hooks = *hooks;
	__atomic_store_n(&n->apps[slot].cls, cls, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&n->mu);
	return DT_OK;
}

void
dt__node_detach(dt_node *n, const dt__app_class *cls)
{
	/* Only the class goes: a reader that saw it live may still copy the
	 * hooks, which stay valid until a later attach reuses the slot. */
	pthread_mutex_lock(&n->mu);
	for (int i = 0; i < DT__MAX_APPS; i++)
		if (n->apps[i].cls == cls)
			__atomic_store_n(&n->apps[i].cls, NULL,
			                 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&n->mu);
}

void *
dt__node_app_arg(dt_node *n, const dt__app_class *cls)
{
	void *arg = NULL;

	pthread_mutex_lock(&n->mu);
	for (int i = 0; i < DT__MAX_APPS; i++)
		if (n->apps[i].cls == cls)
			arg = n->apps[i].hooks.arg;
	pthread_mutex_unlock(&n->mu);
	return arg;
}

const dt__node_app *
dt__node_app_of(const dt_node *n, unsigned cmd)
{
	for (int i = 0; i < DT__MAX_APPS; i++) {
		const dt__app_class *c =
		    __atomic_load_n(&n->apps[i].cls, __ATOMIC_ACQUIRE);

		if (c && cmd >= c->cmd_first && cmd <= c->cmd_last)
			return &n->apps[i];
	}
	return NULL;
}

void
dt__node_fail_apps(dt_node *n, int peer, dt_err err)
{
	dt__node_note_lost_server(n, peer);
	for (int i = 0; i < DT__MAX_APPS; i++) {
		dt__app_hooks hk;

		if (!__atomic_load_n(&n->apps[i].cls, __ATOMIC_ACQUIRE))
			continue;
		hk = n->apps[i].hooks;
		if (hk.on_fail)
			hk.on_fail(hk.arg, n, peer, err);
	}
}

void
dt__node_restart_apps(dt_node *n, int peer)
{
	for (int i = 0; i < DT__MAX_APPS; i++) {
		dt__app_hooks hk;

		if (!__atomic_load_n(&n->apps[i].cls, __ATOMIC_ACQUIRE))
			continue;
		hk = n->apps[i].hooks;
		if (hk.on_peer_restart)
			hk.on_peer_restart(hk.arg, n, peer);
	}
}
