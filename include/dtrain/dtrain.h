/*
 * dtrain/dtrain.h - the whole public API of dtrain in one include.
 *
 *   err.h   error codes, dt_strerror(), dt_errmsg()
 *   node.h  cluster membership: roles, bootstrap, barriers
 *   kv.h    MXNet's KVStore: push/pull by key, dist_sync/dist_async
 *   coll.h  Horovod-style collectives: allreduce, broadcast, allgather
 *   nn.h    the trainer: layers, losses, optimizers, data, metrics
 */
#ifndef DTRAIN_DTRAIN_H
#define DTRAIN_DTRAIN_H

#include "dtrain/err.h"
#include "dtrain/node.h"
#include "dtrain/kv.h"
#include "dtrain/coll.h"
#include "dtrain/elastic.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"

#define DTRAIN_VERSION_MAJOR 0
#define DTRAIN_VERSION_MINOR 1
#define DTRAIN_VERSION_PATCH 0

#endif
