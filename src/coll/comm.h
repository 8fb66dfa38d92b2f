/*
 * comm.h - the router (comm.c): attaching a communicator to its node,
 * routing every collective message to the operation it belongs to, and
 * the executor that runs one operation at a time through its algorithm.
 */
#ifndef DT_COLL_COMM_H
#define DT_COLL_COMM_H

#include "coll/state.h"

/* comm.c: the router and the executor. */
/* The collectives' app class (the COLL command range). */
extern const dt__app_class dt__coll_app;
dt_err dt__coll_attach(dt_coll *c);
/* Run op to completion in the calling thread (the executor). */
void dt__coll_execute(dt_coll *c, coll_op *op);

#endif
