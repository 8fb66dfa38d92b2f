/*
 * proto.h - every command of dtrain's wire protocol, in one table.
 *
 * A frame's header names its command (codec.h has the frame layout); the
 * command decides who may send it, what its header fields and metadata
 * mean, and which layer handles it. The ranges are reserved by layer:
 *   1..31   the cluster's control messages (core/),
 *   32..63  the KVStore (kv/),
 *   64..95  the collectives (coll/).
 * A node hands a message of the KV or collective range to the app that
 * registered that range with the core (core/core.h); the core itself
 * handles the control range. docs/protocol.md describes each message in
 * full: who sends it, each header field, its body and its limits. Each
 * body's encoder and decoder sit side by side: control bodies in
 * core/msg.c, KV bodies in kv/kv_msg.c, collective metadata in
 * coll/coll_msg.c.
 *
 * Adding a message: one line here (a free number in the owner's range),
 * its encoder/decoder beside the others of its layer, its section in
 * docs/protocol.md, and its decoder in the layer's fuzz target.
 */
#ifndef DT_NET_PROTO_H
#define DT_NET_PROTO_H

/* X(NAME, number, direction) - DT_CMD_<NAME>, named "<NAME>" in logs. */
#define DT_PROTO_COMMANDS(X)                                                   \
	/* Control (core/). */                                                 \
	X(ADD_NODE, 1, "node -> scheduler")                                    \
	X(ASSIGN, 2, "scheduler -> node")                                      \
	X(HELLO, 3, "node -> peer")                                            \
	X(HELLO_ACK, 4, "peer -> node")                                        \
	X(BARRIER, 5, "node -> scheduler, or tree parent")                     \
	X(BARRIER_DONE, 6, "scheduler -> node, or to tree children")           \
	X(WORKER_DONE, 7, "worker -> scheduler")                               \
	X(TERMINATE, 8, "scheduler -> server")                                 \
	X(ABORT, 9, "scheduler -> node")                                       \
	X(HEARTBEAT, 10, "any node -> its peers")                              \
	X(TEXT, 11, "any -> any")                                              \
	X(ACK, 12, "any node -> its peers (PS_RESEND)")                        \
	X(BYE, 13, "any node -> its peers, on a clean stop")                   \
	X(NODE_UPDATE, 14, "scheduler -> node (recovery)")                     \
	X(REPORT, 15, "node -> scheduler, or merged to tree parent")           \
	X(CLOCK, 16, "node -> scheduler, and back")                            \
	X(MEMBERSHIP, 17, "scheduler -> worker (elastic)")                     \
	X(GROW, 18, "scheduler <-> worker (elastic)")                          \
	X(LOOKUP, 19, "member -> scheduler, and back")                         \
	X(TREE, 20, "scheduler -> node")                                       \
	X(TREE_LOST, 21, "node -> tree parent, up to the scheduler")           \
	X(JOIN_PARK, 22, "scheduler <-> joining worker (a large job)")         \
	/* KVStore (kv/). */                                                   \
	X(KV_CONFIG, 32, "worker 0 -> server")                                 \
	X(KV_SET_OPT, 33, "worker 0 -> server")                                \
	X(KV_INIT, 34, "worker -> server")                                     \
	X(KV_PUSH, 35, "worker -> server")                                     \
	X(KV_PULL, 36, "worker -> server")                                     \
	X(KV_PUSHPULL, 37, "worker -> server")                                 \
	X(KV_CHECKPOINT, 38, "worker 0 -> server")                             \
	X(KV_CKPT_DONE, 39, "server -> worker (recovery)")                     \
	X(KV_REPLAYED, 40, "worker -> server (recovery)")                      \
	X(KV_RESUME, 41, "worker -> server (recovery)")                        \
	X(KV_INIT_MANY, 42, "worker 0 -> server")                              \
	X(KV_PUSH_MANY, 43, "worker -> server")                                \
	X(KV_PULL_MANY, 44, "worker -> server")                                \
	X(KV_PUSHPULL_MANY, 45, "worker -> server")                            \
	X(KV_ROW_INIT, 46, "worker 0 -> server")                               \
	X(KV_ROW_PUSH, 47, "worker -> server")                                 \
	X(KV_ROW_PULL, 48, "worker -> server")                                 \
	X(KV_ROW_PUSHPULL, 49, "worker -> server")                             \
	X(KV_STALL, 50, "worker -> server, and back")                          \
	/* Collectives (coll/). */                                             \
	X(COLL_DATA, 64, "worker -> worker")                                   \
	X(COLL_READY, 65, "worker -> worker")                                  \
	X(COLL_ABORT, 66, "worker -> worker")                                  \
	X(COLL_STALL_QUERY, 67, "worker -> worker")                            \
	X(COLL_STALL_REPLY, 68, "worker -> worker")                            \
	X(COLL_FIN, 69, "worker -> worker")                                    \
	X(COLL_P2P, 70, "worker -> worker")                                    \
	X(COLL_P2P_ACK, 71, "worker -> worker")

enum dt_cmd {
#define DT__PROTO_ENUM(name, num, dir) DT_CMD_##name = num,
	DT_PROTO_COMMANDS(DT__PROTO_ENUM)
#undef DT__PROTO_ENUM
	/* The ranges reserved by layer; a frame outside them is refused. */
	DT_CMD_CONTROL_FIRST = 1,
	DT_CMD_CONTROL_LAST = 31,
	DT_CMD_KV_FIRST = 32,
	DT_CMD_KV_LAST = 63,
	DT_CMD_COLL_FIRST = 64,
	DT_CMD_COLL_LAST = 95,
};

/* Header flags. */
#define DT_F_REQUEST  0x1
#define DT_F_RESPONSE 0x2
#define DT_F_ERROR    0x4 /* meta holds a u32 dt_err and a message */
/* PS_RESEND: the metadata begins with a 16-byte link block, u64 link
 * sequence number (0: none, an ACK) and u64 cumulative acknowledgement
 * (core/link.c strips it before any layer sees the frame). */
#define DT_F_LINK     0x8
#define DT_LINK_BLOCK 16 /* bytes of that block */

/* Name of a command for logs ("ADD_NODE", "KV_PUSH", "cmd 77"). */
const char *dt__cmd_name(unsigned cmd);
/* 1 if cmd is in a reserved range (a frame may carry it). */
int dt__cmd_in_range(unsigned cmd);
/* 1 if cmd is a control command (the core's own). */
int dt__cmd_is_control(unsigned cmd);

#endif
