/*
 * msg.h - the bodies of the cluster's control messages, each encoder
 * beside its decoder (docs/protocol.md describes them byte by byte).
 *
 * Decoders take the metadata block exactly as it arrived, check every
 * field against its limit before anything is sized from it, and name what
 * was wrong in the error (DT_EPROTO). They allocate only what the checked
 * counts allow.
 */
#ifndef DT_CORE_MSG_H
#define DT_CORE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "common/limits.h"
#include "core/core.h"
#include "core/tree.h"
#include "net/codec.h"

/* The most nodes a job can have (DT_MAX_ROLE_NODES of each role) is
 * common/limits.h's. */
/* The largest rank a node may ask for. */
#define DT_MAX_RANK_WISH (DT_MAX_ROLE_NODES - 1)
/* A node's place token (DTRAIN_NODE_TOKEN): at most 128 bytes and a NUL. */
#define DT_NODE_TOKEN_MAX 129
/* The ticket of a parked join (JOIN_PARK, and the HELLO that calls the
 * worker back): random bytes, the body of both. */
#define DT_JOIN_TICKET 16

/* ADD_NODE: a server or worker asks the scheduler to admit it. */
typedef struct dt__msg_add_node {
	dt_role role;           /* DT_ROLE_SERVER or DT_ROLE_WORKER */
	int want;               /* rank asked for, -1 for none */
	char host[DT_HOST_MAX]; /* address it listens on */
	int port;               /* 1..65535 */
	int pid;                /* for messages naming it */
	int num_servers;        /* the job size it was started with */
	int num_workers;
	char hostid[DT_HOSTID_MAX]; /* its host, "" if unknown */
	char local[DT_LOCAL_MAX];   /* its shared-memory endpoint, or "" */
	/* Its place token, "" if none: what proves that a process taking a
	 * lost node's place is that node's successor (recovery). Sent to the
	 * scheduler only; a NODE_UPDATE carries it empty. */
	char token[DT_NODE_TOKEN_MAX];
} dt__msg_add_node;

dt_err dt__msg_add_node_encode(const dt__msg_add_node *a, dt_wbuf *w);
dt_err dt__msg_add_node_decode(const void *meta, size_t len,
                               dt__msg_add_node *a);

/* Where node id sits in a job of num_servers servers: id 0 is the
 * scheduler, 1..S the servers (rank id - 1), then the workers (rank
 * id - 1 - S), so a member knows every node's role and rank from its id
 * and needs the scheduler only for addresses. */
void dt__msg_place(int id, int num_servers, dt_role *role, int *rank);

/* The most entries one LOOKUP answer (or an ASSIGN) carries: with the
 * longest names an entry takes 434 bytes, so 1,024 fit a metadata block
 * (DT_MAX_META) with room to spare. */
#define DT_DIR_MAX 1024

/* ASSIGN: the scheduler's reply to a node that joined. */
typedef struct dt__msg_assign {
	int id;          /* the node's id; its rank follows (dt__msg_place) */
	int num_servers; /* S */
	int slots;       /* W, or an elastic job's DTRAIN_ELASTIC_MAX */
	uint64_t epoch;  /* the membership epoch (0 outside elastic jobs) */
	int here;        /* servers and workers on the node's host, itself
	                    included */
	int sched_pid;   /* the scheduler's pid, for messages naming it */
} dt__msg_assign;

/*
 * ASSIGN's body: the fields above, then the entries e[0..count) of the
 * nodes first..first+count-1 (a worker's: the servers), at most
 * DT_DIR_MAX. The decoder checks every field against the job's size and
 * allocates the entries (*out, the caller frees it; NULL when count is
 * 0) only once their count fits the block.
 */
dt_err dt__msg_assign_encode(const dt__msg_assign *a, int first, int count,
                             const dt_node_entry *e, dt_wbuf *w);
dt_err dt__msg_assign_decode(const void *meta, size_t len, dt__msg_assign *a,
                             int *first, int *count, dt_node_entry **out);

/*
 * A node's place in the control tree (tree.h), which the scheduler sends
 * in the node's ASSIGN when the job's barriers go over the tree (its
 * header's key 1). The body: the parent's id, the subtree's
 * servers and workers, the count of children, then per child its id and
 * its subtree's servers and workers, all u32. The decoder checks every
 * field against the job's size (S servers, W workers) for node self:
 * the ids in the job and none of them self, the parent not a child, the
 * children ascending, each subtree not empty, and the node's own count
 * the sum of its children's and itself.
 */
dt_err dt__msg_tree_encode(const dt__tree_place *p, dt_wbuf *w);
dt_err dt__msg_tree_decode(const void *meta, size_t len, int self,
                           int num_servers, int num_workers, dt__tree_place *p);

/*
 * ASSIGN in a job with a control tree: the assignment (as above), then
 * the node's place (the body above), then one entry (as a LOOKUP
 * answer's): the tree parent's address when the node needs it (a parent
 * other than the scheduler whose entry the assignment does not carry),
 * else an empty one (a single byte 0). parent may be NULL (empty). The
 * decoder checks the assignment, then the place against the job's sizes
 * it gives, an entry for the scheduler refused, and that nothing
 * follows; *parent is the parent's entry, or zero (not known). On error
 * nothing is left to free; on DT_OK the caller frees *out.
 */
dt_err dt__msg_assign_tree_encode(const dt__tree_place *p,
                                  const dt_node_entry *parent, dt_wbuf *w);
dt_err dt__msg_assign_tree_decode(const void *meta, size_t len,
                                  dt__msg_assign *a, int *first, int *count,
                                  dt_node_entry **out, dt__tree_place *p,
                                  dt_node_entry *parent);

/*
 * TREE_LOST: a node of the control tree tells its parent (which passes it
 * on, up to the scheduler) that a node under it was lost. The body: the
 * lost node's id, the reason (DT_TREE_LOST_SILENT: it sent nothing for
 * silent_ns; DT_TREE_LOST_CLOSED: its connection to its parent closed),
 * u32 each, then silent_ns, u64: 16 bytes. The decoder refuses another
 * length, an id outside 1..ntable-1, another reason, and a silence over
 * DT_TREE_LOST_SILENT_MAX.
 */
enum { DT_TREE_LOST_SILENT = 1, DT_TREE_LOST_CLOSED = 2 };
#define DT_TREE_LOST_SILENT_MAX (7ull * 86400 * 1000000000ull) /* a week */
typedef struct dt__msg_tree_lost {
	int lost;
	int reason;
	uint64_t silent_ns;
} dt__msg_tree_lost;
dt_err dt__msg_tree_lost_encode(const dt__msg_tree_lost *l, dt_wbuf *w);
dt_err dt__msg_tree_lost_decode(const void *meta, size_t len, int ntable,
                                dt__msg_tree_lost *l);

/*
 * LOOKUP, the request: the node ids first..first+count-1 whose entries a
 * member asks for; the decoder refuses a range outside 1..ntable-1 or of
 * more than DT_DIR_MAX ids.
 */
dt_err dt__msg_lookup_encode(int first, int count, dt_wbuf *w);
dt_err dt__msg_lookup_decode(const void *meta, size_t len, int ntable,
                             int *first, int *count);

/*
 * LOOKUP, the answer: the same range and an entry for each (one still
 * unknown to the scheduler, an elastic job's empty row, says so: its
 * `known` is 0). The decoder checks the range against the job's ntable
 * ids as the request's does, fills each entry's id, role and rank from
 * its id (num_servers) and allocates *out as the ASSIGN's does.
 */
dt_err dt__msg_dir_encode(int first, int count, const dt_node_entry *e,
                          dt_wbuf *w);
dt_err dt__msg_dir_decode(const void *meta, size_t len, int num_servers,
                          int ntable, int *first, int *count,
                          dt_node_entry **out);

/*
 * LOOKUP's hosts-only form (the header's arg0 DT_LOOKUP_HOSTS, both ways):
 * the request is a range as above, of at most DT_HOSTS_MAX ids; the
 * answer gives each node of the range the number of its host (the
 * scheduler numbers the job's hosts once: nodes of one host share a
 * number, below the job's count of ids; a node it does not know has
 * DT_HOST_UNKNOWN) as runs of equal numbers: the range, the count of
 * runs, then each run's length and number, u32 each. Ranks placed host by
 * host take one run a host; at worst 8 bytes an id fit the metadata
 * block. The decoder checks the range against the job's ntable ids, each
 * run (not empty, its number below ntable or DT_HOST_UNKNOWN) and that
 * the runs cover the range exactly, before it allocates *out (count
 * numbers; the caller frees it).
 */
#define DT_LOOKUP_HOSTS 1
#define DT_HOSTS_MAX    65536
dt_err dt__msg_hosts_encode(int first, int count, const uint32_t *hostno,
                            dt_wbuf *w);
dt_err dt__msg_hosts_decode(const void *meta, size_t len, int ntable,
                            int *first, int *count, uint32_t **out);
dt_err dt__msg_hosts_lookup_decode(const void *meta, size_t len, int ntable,
                                   int *first, int *count);

/*
 * MEMBERSHIP (elastic jobs): the node ids of the live workers, ascending,
 * as u32 each; the epoch and the cause ride in the header. The decoder
 * takes at most max_ids ids (the job's worker rows, DTRAIN_ELASTIC_MAX)
 * into ids and refuses
 * an empty list, one out of order or repeated, or an id outside
 * [first_id, first_id + max_ids).
 */
dt_err dt__msg_membership_encode(const int *ids, int n, dt_wbuf *w);
dt_err dt__msg_membership_decode(const void *meta, size_t len, int first_id,
                                 int max_ids, int *ids, int *n);

#endif
