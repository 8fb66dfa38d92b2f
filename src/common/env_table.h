/*
 * env_table.h - every environment variable dtrain reads, in one table: its
 * name, its default as a user would write it, who sets it, and one line
 * saying what it does. The dtrain-env(7) manual page and `dtrain env` are
 * made from this table, the test `integration_env_table` checks that every
 * variable the code reads is here, and envvars.c uses it to say "did you
 * mean ...?" for a misspelt one. Adding a variable to the code means adding
 * its line here.
 *
 * DT_ENV(name, default, kind, summary); kind is one of
 *   U  set by the user
 *   L  set by `dtrain launch` (or another launcher) for the processes it
 *      starts; a user sets it only when starting nodes by hand
 *   T  testing and fault injection
 */
#ifndef DT_COMMON_ENV_TABLE_H
#define DT_COMMON_ENV_TABLE_H

/* clang-format off */
#define DT_ENV_TABLE(X) \
X(DMLC_ROLE, "(none: one process)", L, "scheduler, server or worker: the node's role in a job") \
X(DMLC_PS_ROOT_URI, "(required in a job)", L, "the scheduler's address") \
X(DMLC_PS_ROOT_PORT, "(required in a job)", L, "the scheduler's port; a scheduler given 0 lets the system choose and prints it") \
X(DMLC_NUM_SERVER, "(required in a job)", L, "servers in the job (0 allowed)") \
X(DMLC_NUM_WORKER, "(required in a job)", L, "workers in the job (at least 1)") \
X(DMLC_WORKER_ID, "(the scheduler assigns)", L, "the rank a worker asks for") \
X(DMLC_SERVER_ID, "(the scheduler assigns)", L, "the rank a server asks for") \
X(DMLC_INTERFACE, "(first non-loopback)", U, "network interface whose IPv4 address a node advertises") \
X(DMLC_NODE_HOST, "(from DMLC_INTERFACE)", U, "address a node advertises (wins over the interface)") \
X(DMLC_PORT, "0 (any free port)", U, "port a server or worker listens on") \
X(DMLC_USE_KUBERNETES, "0", L, "1: the scheduler listens on its pod's address (set by dtrain k8s and Kubeflow)") \
X(PS_VERBOSE, "0", U, "1: connections, ranks, barriers and counters; 2: also every message") \
X(PS_HEARTBEAT_INTERVAL, "1", U, "seconds between heartbeats (0: none)") \
X(PS_HEARTBEAT_TIMEOUT, "10", U, "seconds of silence after which a peer is dead (0: never)") \
X(PS_RESEND, "0", U, "1: every message acknowledged and resent until it is") \
X(PS_RESEND_TIMEOUT, "1000", U, "milliseconds before unacknowledged messages are resent") \
X(PS_DROP_MSG, "0", T, "percentage of incoming messages dropped at random (needs PS_RESEND=1)") \
X(MXNET_KVSTORE_BIGARRAY_BOUND, "1000000", U, "values from which a key is cut over the servers (when set, also the balanced placement's bound)") \
X(DTRAIN_KV_PLACEMENT, "balanced", U, "where keys live: balanced (bytes spread over the servers) or mxnet (key mod servers, big arrays split evenly)") \
X(DTRAIN_KV_SPLIT_BYTES, "16384", U, "bytes from which the balanced placement cuts a key over the servers") \
X(MXNET_KVSTORE_REDUCTION_NTHREADS, "4", U, "threads summing a worker's device arrays") \
X(HOROVOD_FUSION_THRESHOLD, "67108864", U, "bytes of small tensors fused into one allreduce (0: no fusion)") \
X(DTRAIN_SECRET, "(made by dtrain launch)", U, "the job's shared secret, 16 to 4096 bytes; every connection is authenticated with it") \
X(DTRAIN_SECRET_FILE, "(none)", U, "a file holding the secret instead (refused if group or others may read it)") \
X(DTRAIN_JOB_ID, "(made by dtrain launch; empty by hand)", L, "the job's id, bound into the key") \
X(DTRAIN_AUTH, "secret", U, "none: no authentication (a trusted network only)") \
X(DTRAIN_ENCRYPT, "0", U, "1: every frame encrypted and authenticated") \
X(DTRAIN_NODE_TOKEN, "(made by dtrain launch)", L, "a node's place token: a replacement takes a lost node's place only with it") \
X(DTRAIN_LAUNCHED, "(unset)", L, "set by dtrain launch: log lines carry no role prefix (the launcher adds it)") \
X(DTRAIN_TRANSPORT, "auto", U, "auto: shared memory to peers on this host, TCP to others; tcp: TCP to all") \
X(DTRAIN_SHM_RING, "1048576", U, "bytes of each shared-memory ring (a power of two; unset: 1 MiB up to 64 job nodes on this host, then less, at least 65536)") \
X(DTRAIN_SHM_COPY_ONCE, "0", U, "frame pieces this big or bigger are copied once from the sender's memory (0: never)") \
X(DTRAIN_SCHEDULER_BIND, "(DMLC_PS_ROOT_URI)", U, "the address the scheduler listens on") \
X(DTRAIN_COLL_ROOT, "(none)", U, "host:port of rank 0's rendezvous under mpirun or srun") \
X(DTRAIN_RENDEZVOUS, "auto", U, "how ranks under mpirun or srun meet without DTRAIN_COLL_ROOT: auto, pmix or file") \
X(DTRAIN_COLL_HIER, "auto", U, "ranks on several hosts, the same number on each: auto reduces inside each host, then across, above DT_COLL_RING_THRESHOLD; on: at every size; off: one flat ring") \
X(DTRAIN_RENDEZVOUS_DIR, "(the directory the job started in)", U, "shared directory of the rendezvous file") \
X(DTRAIN_DATA_CACHE, "$XDG_RUNTIME_DIR, else /dev/shm", U, "directory of the decoded-data cache of MNIST files that processes of a host share; 0 or off: none") \
X(DTRAIN_STATS, "0", U, "1: each node logs its counters every DTRAIN_STATS_INTERVAL seconds") \
X(DTRAIN_STATS_INTERVAL, "10", U, "seconds between two counter lines") \
X(DTRAIN_STATS_JSON, "(none)", U, "file the scheduler writes the job's counters to, as JSON") \
X(DTRAIN_TIMELINE, "(none)", U, "file the scheduler writes the job's trace to (Chrome trace format)") \
X(DTRAIN_TIMELINE_MAX_EVENTS, "2097152", U, "trace events kept per process") \
X(DTRAIN_CHECKPOINT_DIR, "(none: no checkpoints)", U, "directory of the servers' checkpoints") \
X(DTRAIN_CHECKPOINT_EVERY, "100", U, "rounds between two checkpoints (0: only on demand)") \
X(DTRAIN_CHECKPOINT_SECONDS, "0", U, "also a checkpoint when this many seconds have passed (0: off)") \
X(DTRAIN_CHECKPOINT_LOAD, "0", U, "1: each server starts from its checkpoint") \
X(DTRAIN_RECOVER, "0", U, "1: a lost server or worker may be replaced (implies PS_RESEND=1)") \
X(DTRAIN_ELASTIC, "0", U, "1: an elastic job (collectives, or servers in dist_sync/dist_async): a lost worker leaves the membership instead of ending the job") \
X(DTRAIN_ELASTIC_MIN, "1", U, "the fewest workers an elastic job goes on with") \
X(DTRAIN_ELASTIC_MAX, "(DMLC_NUM_WORKER)", U, "the most workers of an elastic job, those that join it included") \
X(DTRAIN_ELASTIC_SCHEDULE, "(none)", U, "membership changes at commit steps, \"step S: -worker R; step T: +N; ...\": replays a run") \
X(DTRAIN_ELASTIC_TIMEOUT, "600", U, "seconds an elastic job with fewer than DTRAIN_ELASTIC_MIN workers waits for workers to join before it ends") \
X(DT_ELASTIC_TIMEOUT, "60", U, "seconds an elastic worker waits for the scheduler's new membership") \
X(DTRAIN_REPLAY_MAX, "1024", U, "MiB of push copies a worker keeps to replay to a restarted server") \
X(DTRAIN_RECOVER_BATCHED, "1", U, "0: with recovery, batched calls go key by key (by default they stay batched in dist_sync: a lost server or worker is recovered with them; dist_async always sends them key by key)") \
X(DTRAIN_MAX_TABLE_BYTES, "(half the memory)", U, "bytes the row_sparse tables of one server may map together") \
X(DTRAIN_EXE, "(this dtrain)", U, "the dtrain binary the launcher runs as scheduler and servers") \
X(DTRAIN_SSH, "ssh", U, "the ssh command of the ssh launcher") \
X(DTRAIN_SSH_CONNECT_TIMEOUT, "10", U, "seconds ssh may take to connect") \
X(DTRAIN_RSYNC, "rsync", U, "the rsync command of --sync-dst-dir") \
X(DTRAIN_MPIRUN, "mpirun", U, "the mpirun command of --launcher mpi") \
X(DTRAIN_SRUN, "srun", U, "the srun command of --launcher slurm") \
X(DTRAIN_RANK_WRAP, "1", U, "0: under mpirun or srun, ranks run without the dtrain rank-exec wrapper") \
X(DTRAIN_RSVG, "rsvg-convert", U, "the SVG to PNG converter of dtrain plot") \
X(DTRAIN_CTRL_TREE_MIN, "256", U, "servers and workers from which a job's barriers go over a host-aware tree of nodes rooted at the scheduler (not in elastic jobs, nor with PS_RESEND or DTRAIN_RECOVER); 1 to 2000000") \
X(DTRAIN_CTRL_ARITY, "16", U, "children of each node of that tree (2 to 64; a host's leader has up to twice as many)") \
X(DTRAIN_JOIN_PARK_MIN, "16384", U, "servers and workers from which, in a job over that tree, the scheduler parks each worker's join and calls it back with its assignment once all joined, holding no connection per node meanwhile (also when the job has more nodes than the scheduler's descriptor limit less 1024); 1 to 2000000") \
X(DTRAIN_JOIN_WINDOW, "1024", U, "called-back connections of parked workers the scheduler holds open at once, until each worker reached its tree parent") \
X(DTRAIN_JOIN_DIALERS, "8", U, "the scheduler's threads that call parked workers back (1 to 256)") \
X(DT_CONNECT_TIMEOUT, "60", U, "seconds to keep retrying the scheduler and peers") \
X(DT_JOIN_TIMEOUT, "300", U, "seconds the scheduler waits for every node to join") \
X(DT_END_TIMEOUT, "30", U, "seconds the scheduler waits for the servers to leave at the end") \
X(DT_SEND_TIMEOUT, "120", U, "seconds a send may wait for a peer that does not read") \
X(DT_WAIT_TIMEOUT, "3600", U, "seconds a worker's call may wait for its peers") \
X(DT_KV_STALL, "60", U, "seconds a KVStore call waits without an answer before it logs what it waits for and asks its servers (0: never)") \
X(DT_HANDSHAKE_TIMEOUT, "10", U, "seconds an accepted connection has to say who it is") \
X(DT_MAX_PENDING_CONNS, "256, or the job's node count if larger", U, "connections that have not said who they are, at most, per node; the listen queues are as long") \
X(DT_RECONNECT_TIMEOUT, "10", U, "with PS_RESEND=1: seconds a lost connection may take to come back") \
X(DT_RESTART_TIMEOUT, "60", U, "seconds the scheduler waits for a lost node's replacement") \
X(DT_MAX_MESSAGE, "17179869184", U, "largest payload accepted from the wire, in bytes") \
X(DT_SPIN_US, "200 (0 while other programs fill the processors)", U, "microseconds a waiting call polls before it sleeps") \
X(DT_SHARED_LOOP, "0", U, "1: the nodes of a process share three threads (I/O, handshakes, heartbeats) instead of three each (the scale simulator's nodes); waiting calls then sleep until woken, whatever DT_SPIN_US and DT_WAIT_DIRECT say") \
X(DT_WAIT_DIRECT, "1 when the job has more processes on the host than processors, else 0", U, "1: a waiting call sleeps in the network's event loop itself, woken by the message it waits for; 0: the I/O thread receives and wakes it") \
X(OPENBLAS_CORETYPE, "(OpenBLAS chooses)", U, "OpenBLAS's kernels (read by OpenBLAS); dtrain warns, naming the value, when OpenBLAS falls back to slow ones") \
X(DT_LISTEN_FD, "(none)", L, "a listening socket the scheduler adopts") \
X(DT_HOST_ID, "(boot id and network namespace)", T, "this node's host id (tests: a second host on one machine)") \
X(DT_CLOCK_SKEW_MS, "0", T, "milliseconds added to this node's trace clock") \
X(DT_REPORT_SKIP, "0", T, "1: this node sends no end-of-job report over the control tree (its parent names it missing)") \
X(DT_COLL_RING_THRESHOLD, "262144", U, "bytes above which the ring replaces recursive doubling") \
X(DT_COLL_CHUNK_BYTES, "524288", U, "the ring's pipeline chunk, in bytes") \
X(DT_COLL_UNEXPECTED_MAX, "268435456", U, "bytes of early collective messages kept before giving up") \
X(DT_COLL_TIMEOUT, "60", U, "seconds without progress before a collective's stall report") \
X(DT_COLL_CMA, "1", U, "1: read same-host peers' memory directly") \
X(DT_COLL_CMA_THRESHOLD, "65536", U, "bytes above which memory reads replace recursive doubling") \
X(DT_COLL_CMA_PUSH_MAX, "4194304", U, "2 ranks: write into the peer's slots up to this size") \
X(DT_COLL_CMA_PUSH_MANY_MAX, "16384", U, "more than 2 ranks: write into every peer's slots up to this size") \
X(DT_COLL_CMA_HALF_MIN, "131072", U, "2 ranks: push by halves from this size on (0: never)") \
X(DT_COLL_CMA_SHARED_MAX, "4194304", U, "allreduce through shared areas up to this size, 2 ranks up to twice it (each rank offers an area of twice it; 0: never)") \
X(DT_COLL_CMA_FBOX_MAX, "262144", U, "2 ranks: allreduce through fast boxes in the shared areas up to this size, with no message (0: never)") \
X(DT_COLL_CMA_WHOLE_MAX, "8388608", U, "2 ranks: read the whole peer input up to this size") \
X(DT_DROP_SEED, "1", T, "seed of PS_DROP_MSG's drops") \
X(DT_CUT_EVERY, "0", T, "every N-th large frame a node sends is cut mid-payload") \
X(DT_TEST_SERVERS_ASSIGNED_LATE, "0", T, "milliseconds the scheduler waits, after the workers' assignments, before the servers'") \
X(DT_TEST_SYNC_HOLD, "-1 (none)", T, "an elastic job's launch rank that, in its first state sync, waits for a newer membership before the broadcast") \
X(DT_RESET_EVERY, "0", T, "every so many seconds a node closes the connections it dialled")
/* clang-format on */

typedef struct dt__env_var {
	const char *name;
	const char *def;
	char kind; /* 'U', 'L' or 'T' */
	const char *summary;
} dt__env_var;

/* The table, and its length. */
extern const dt__env_var dt__env_vars[];
extern const size_t dt__env_nvars;

/* The table's entry of name, or NULL. */
const dt__env_var *dt__env_find(const char *name);

/*
 * Once per process: a warning on stderr for each variable in the
 * environment named DMLC_*, DTRAIN_* or PS_* that dtrain does not read,
 * with the closest known name when one is near ("did you mean
 * DMLC_NUM_WORKER?"). who prefixes the lines ("dtrain launch").
 * Returns the number of unknown variables.
 */
int dt__env_warn_unknown(const char *who);

#endif
