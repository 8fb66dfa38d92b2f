#!/usr/bin/env python3
"""Write the hand-made seeds of the control, kv, auth and coll fuzz targets into
fuzz/corpus/<target>/ (the codec seeds predate this script and are kept as
they are). One idea per file; docs/protocol.md has the layouts. Run from
anywhere: python3 fuzz/make_seeds.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u8(v): return struct.pack('<B', v)
def u32(v): return struct.pack('<I', v & 0xffffffff)
def u64(v): return struct.pack('<Q', v & 0xffffffffffffffff)
def f64(v): return struct.pack('<d', v)
def s(text): b = text.encode(); return u32(len(b)) + b


def add_node(role=2, want=-1, host='127.0.0.1', port=40000, pid=1234,
             ns=2, nw=2, hostid='0f1e2d3c-aaaa-bbbb-cccc-000000000001/4026531840',
             local='dtrain.1234.00ff00ff00ff00ff', old=False,
             token='0123456789abcdef0123456789abcdef', no_token=False):
    out = u8(role) + u32(want) + s(host) + u32(port) + u32(pid) + u32(ns) + u32(nw)
    if old:
        return out
    out += s(hostid) + s(local)
    return out if no_token else out + s(token)


def entry(i, known=1, host=None, port=None):
    if not known:
        return u8(0)
    return (u8(known) + s(host if host is not None else '10.0.0.%d' % i)
            + u32(port if port is not None else 9000 + i) + u32(100 + i)
            + s('host-a/1' if i % 2 else '') + s('dtrain.%d.ab' % (100 + i) if i % 2 else ''))


def assign(me=3, ns=2, nw=2, epoch=0, here=4, first=1, count=None, rows=None,
           spid=77):
    if count is None:
        count = ns
    if rows is None:
        rows = b''.join(entry(first + k) for k in range(count))
    return (u32(me) + u32(ns) + u32(nw) + u64(epoch) + u32(here) + u32(spid)
            + u32(first) + u32(count) + rows)


def answer(first=3, count=2, rows=None):
    if rows is None:
        rows = b''.join(entry(first + k) for k in range(count))
    return u32(first) + u32(count) + rows


def opt(kind, lr=0.1, mom=0.9, wd=1e-4, rescale=1.0, clip=0.0, b1=0.9, b2=0.999, eps=1e-8):
    return u8(kind) + b''.join(f64(v) for v in (lr, mom, wd, rescale, clip, b1, b2, eps))


def push(cmd=0, kind=0, answer=0, n=16, meta=b'', body=b''):
    # fuzz_kv_push's layout: [u8 command][u32 arg2][u32 values][u8 meta
    # length], the meta, the body (command 0 push, 1 pull, 2 pushpull)
    return u8(cmd) + u32(kind | answer << 8) + u32(n) + u8(len(meta)) + meta + body


def f32(v): return struct.pack('<f', v)


def many(cmd=1, keys=(1, 2), lens=None, uniform=1, answer=0, vals=True):
    # fuzz_kv_many's layout: [u8 command][u32 arg0][u32 arg1][u32 arg2],
    # the payload (command 0 init, 1 push, 2 pull, 3 pushpull)
    body = b''.join(u64(k) for k in keys)
    if lens is not None:
        body += b''.join(u32(x) for x in lens)
    n = sum(lens) if lens is not None else uniform * len(keys)
    if vals:
        body += f32(1) * n
    return u8(cmd) + u32(len(keys)) + u32(0 if lens is not None else uniform) + u32(answer << 8) + body


def rows(cmd=0, ids=(8, 9), width=2, kind=0, answer=0, meta=b'', body=None):
    # fuzz_kv_rows's layout: [u8 command][u32 arg0][u32 arg1][u32 arg2]
    # [u8 meta length][meta], the payload (command 0 push, 1 pull,
    # 2 pushpull); the table holds rows 8..71 of 80
    payload = b''.join(u64(i) for i in ids)
    if body is None and cmd != 1:
        body = f32(1) * (len(ids) * width)
    payload += body or b''
    return (u8(cmd) + u32(len(ids)) + u32(width) + u32(kind | answer << 8)
            + u8(len(meta)) + meta + payload)


def kvs(cmd, w=0, arg2=0, key=0, arg0=0, arg1=0, meta=b'', payload=b''):
    # fuzz_kv_server's frame: [u8 command - 32][u8 worker][u32 arg2]
    # [u64 key][u64 arg0][u64 arg1][u16 meta length][u32 payload length],
    # the meta, the payload; a seed is a run of frames to one server
    # (dist_sync, 2 workers, DTRAIN_MAX_TABLE_BYTES 64 MiB)
    return (u8(cmd - 32) + u8(w) + u32(arg2) + u64(key) + u64(arg0) + u64(arg1)
            + struct.pack('<H', len(meta)) + u32(len(payload)) + meta + payload)


KV_CONFIG, KV_SET_OPT, KV_INIT, KV_PUSH, KV_PULL, KV_PUSHPULL = 32, 33, 34, 35, 36, 37
KV_CHECKPOINT, KV_REPLAYED, KV_RESUME = 38, 40, 41
KV_INIT_MANY, KV_PUSH_MANY, KV_PULL_MANY, KV_PUSHPULL_MANY = 42, 43, 44, 45
KV_ROW_INIT, KV_ROW_PUSH, KV_ROW_PULL, KV_ROW_PUSHPULL = 46, 47, 48, 49


def floats(n, v=1.0): return f32(v) * n


def key_ready(key=1, n=4):
    # worker 1 waits for the value, worker 0 brings it
    return (kvs(KV_INIT, w=1, key=key, arg0=n)
            + kvs(KV_INIT, w=0, arg2=1, key=key, arg0=n, payload=floats(n)))


def many_body(keys, n, vals=True):
    return b''.join(u64(k) for k in keys) + (floats(len(keys) * n) if vals else b'')


def row_ready(key=7, rows=80, width=2, value=False):
    return kvs(KV_ROW_INIT, arg2=1 if value else 0, key=key, arg0=rows, arg1=width,
               meta=u64(0) + u64(rows), payload=floats(rows * width) if value else b'')


def row_ids(ids, width=0):
    return b''.join(u64(i) for i in ids) + floats(len(ids) * width)


def stats(node=3, role=2, rank=0, peers=2, keys=1, busbw=0.0):
    # a REPORT counters block (obs/stats.c): 5 u32, busbw, 16 u64 scalars,
    # 3 latencies of 5 u64, then peers and keys of 5 u64 each
    head = u32(node) + u32(role) + u32(rank) + u32(peers) + u32(keys) + f64(busbw)
    head += b''.join(u64(i) for i in range(16)) + b''.join(u64(i) for i in range(15))
    return (head + b''.join(u64(i) + u64(1) * 4 for i in range(peers))
            + b''.join(u64(7 + i) + u64(2) * 4 for i in range(keys)))


def hist(values=()):
    # a merged histogram (obs/merge.c): n, sum, max, 496 u64 buckets
    b = [0] * 496
    for v in values:
        e = v.bit_length() - 1
        b[v if v < 8 else (e - 2) * 8 + ((v >> (e - 3)) & 7)] += 1
    return (u64(len(values)) + u64(sum(values)) + u64(max(values, default=0))
            + b''.join(u64(x) for x in b))


def merged(nodes=(0, 1, 2), missing=(9,), missing_nodes=2, keys=(1, 2),
           slow=((5, 3000000),), busy=((1, 4096),), lat=(1500, 2500, 90000),
           hist_n_extra=0, busbw=1e9):
    # a merged REPORT (obs/merge.c): 8 u32 counts, 16 missing ids (u32),
    # wall, traffic (36), the batched row (5) and keys omitted, 5
    # histograms, 4 server, 4 collective u64s and busbw, 5 phase sums, 8 +
    # 8 top rows (u32 id, 5 u64), then the key rows (5 u64 each)
    head = b''.join(u32(n) for n in nodes) + u32(missing_nodes) + u32(len(missing))
    head += u32(len(keys)) + u32(len(slow)) + u32(len(busy))
    head += b''.join(u32(missing[i] if i < len(missing) else 0) for i in range(16))
    body = u64(2000000000) + b''.join(u64(i * 100) for i in range(36))
    body += u64(0xffffffffffffffff) + u64(1) * 4 + u64(0)
    h = hist(lat)
    h = u64(len(lat) + hist_n_extra) + h[8:]
    body += h + hist() + hist() + hist(lat) + hist((3000000,))
    body += u64(60) + u64(1000) + u64(10) + u64(500) + u64(2) + u64(4096) + u64(100) + u64(1)
    body += f64(busbw) + u64(20) + u64(100000000) + u64(3000000) + u64(0) + u64(0)
    tops = b''
    for rows in (slow, busy):
        for i in range(8):
            nid, rank = rows[i] if i < len(rows) else (0, 0)
            tops += u32(nid) + u64(rank) + (u64(1) if i < len(rows) else u64(0)) * 4
    return head + body + tops + b''.join(u64(k) + u64(3) * 4 for k in keys)


def tev(ts=1000, dur=50, key=7, nbytes=4000, id_=0, kind=4, tid=0, flags=3, peer=0):
    # a REPORT timeline record (obs/trace.c), 48 bytes
    return (u64(ts) + u64(dur) + u64(key) + u64(nbytes) + u64(id_)
            + struct.pack('<H', kind) + u8(tid) + u8(flags) + u32(peer))


def sig(kind=1, dtype=0, op=0, ntensors=1, root=0, count=1024, hash_=0):
    return u8(kind) + u8(dtype) + u8(op) + u8(ntensors) + u32(root) + u64(count) + u64(hash_)


SEEDS = {
    'control': {
        'add_node_worker': add_node(),
        'add_node_server_rank0': add_node(role=1, want=0),
        'add_node_role_scheduler': add_node(role=0),
        'add_node_rank_huge': add_node(want=0x7fffffff),
        'add_node_port_zero': add_node(port=0),
        'add_node_job_huge': add_node(ns=0xffffffff),
        'add_node_host_empty': add_node(host=''),
        'add_node_host_255': add_node(host='h' * 255),
        'add_node_truncated': add_node()[:12],
        'add_node_without_local': add_node(old=True),
        'add_node_local_bad_chars': add_node(local='dtrain\n@x'),
        'add_node_hostid_96': add_node(hostid='h' * 96),
        'add_node_without_token': add_node(no_token=True),
        'add_node_token_empty': add_node(token=''),
        'add_node_token_128': add_node(token='t' * 128),
        'add_node_token_129': add_node(token='t' * 129),
        'add_node_token_bad_chars': add_node(token='tok en\n0123456789'),
        'assign_worker_2x2': assign(),
        'assign_server_no_entries': assign(me=1, count=0),
        'assign_0_servers': assign(me=1, ns=0, nw=1, here=1, count=0),
        'assign_elastic_epoch': assign(me=4, nw=6, epoch=7),
        'assign_count_wrap': assign(count=0xffffffff, rows=b''),
        'assign_claims_2000': assign(ns=3000, nw=3000, count=2000, rows=entry(1)),
        'assign_range_past_job': assign(first=4, count=2),
        'assign_id_zero': assign(me=0),
        'assign_here_zero': assign(here=0),
        'assign_sched_pid_huge': assign(spid=0x80000000),
        'assign_port_zero': assign(rows=entry(1, port=0) + entry(2)),
        'assign_known_2': assign(rows=entry(1, known=2) + entry(2)),
        'assign_trailing': assign() + b'\x00' * 7,
        # TREE, for node 3 of a job of 2 servers and 5 workers (the
        # fuzz target's): parent, subtree servers and workers, children
        'tree_leaf': u32(1) + u32(0) + u32(1) + u32(0),
        'tree_interior': (u32(0) + u32(1) + u32(3) + u32(2)
                          + u32(2) + u32(1) + u32(1) + u32(4) + u32(0) + u32(1)),
        'tree_parent_self': u32(3) + u32(0) + u32(1) + u32(0),
        'tree_parent_past_job': u32(8) + u32(0) + u32(1) + u32(0),
        'tree_child_self': u32(1) + u32(0) + u32(2) + u32(1) + u32(3) + u32(0) + u32(1),
        'tree_children_descend': (u32(1) + u32(0) + u32(3) + u32(2)
                                  + u32(5) + u32(0) + u32(1) + u32(4) + u32(0) + u32(1)),
        'tree_child_empty': u32(1) + u32(0) + u32(1) + u32(1) + u32(4) + u32(0) + u32(0),
        'tree_counts_off': u32(1) + u32(0) + u32(5) + u32(1) + u32(4) + u32(0) + u32(1),
        'tree_children_huge': u32(1) + u32(0) + u32(1) + u32(0xffffffff),
        'tree_trailing': u32(1) + u32(0) + u32(1) + u32(0) + b'\x00' * 3,
        # ASSIGN with the place (node 3 of 2 servers and 2 workers under
        # worker 4... or the scheduler) and the parent's entry
        'assign_tree_parent_worker': (assign(nw=3) + u32(5) + u32(0) + u32(1)
                                      + u32(0) + entry(5)),
        'assign_tree_parent_server': (assign() + u32(1) + u32(0) + u32(2) + u32(1)
                                      + u32(4) + u32(0) + u32(1) + entry(1, known=0)),
        'assign_tree_under_scheduler': (assign(me=1, count=0) + u32(0) + u32(1)
                                        + u32(0) + u32(0) + entry(0, known=0)),
        'assign_tree_scheduler_entry': (assign(me=1, count=0) + u32(0) + u32(1)
                                        + u32(0) + u32(0) + entry(9)),
        'assign_tree_no_entry': assign() + u32(1) + u32(0) + u32(1) + u32(0),
        'assign_tree_trailing': (assign() + u32(1) + u32(0) + u32(1) + u32(0)
                                 + entry(1, known=0) + b'\x00'),
        # LOOKUP of hosts, the answer: range, runs, (length, host) each
        'hosts_answer': u32(2) + u32(5) + u32(2) + u32(3) + u32(0) + u32(2) + u32(1),
        'hosts_answer_unknown': u32(1) + u32(2) + u32(1) + u32(2) + u32(0xffffffff),
        'hosts_answer_host_past_job': u32(1) + u32(1) + u32(1) + u32(1) + u32(8),
        'hosts_answer_runs_short': u32(1) + u32(4) + u32(1) + u32(3) + u32(0),
        'hosts_answer_runs_huge': u32(1) + u32(4) + u32(0xffffffff) + u32(4) + u32(0),
        'hosts_answer_run_empty': u32(1) + u32(2) + u32(2) + u32(0) + u32(0) + u32(2) + u32(0),
        # TREE_LOST, in a job of nodes 1..7: lost id, reason, silence (ns)
        'tree_lost_silent': u32(5) + u32(1) + u64(3000000000),
        'tree_lost_closed': u32(7) + u32(2) + u64(0),
        'tree_lost_id_zero': u32(0) + u32(1) + u64(1),
        'tree_lost_past_job': u32(8) + u32(1) + u64(1),
        'tree_lost_reason_3': u32(5) + u32(3) + u64(1),
        'tree_lost_silence_huge': u32(5) + u32(1) + u64(0xffffffffffffffff),
        'tree_lost_short': u32(5) + u32(1) + u32(0),
        'lookup_request': u32(3) + u32(4),
        'lookup_request_zero': u32(0) + u32(1),
        'lookup_request_empty': u32(3) + u32(0),
        'lookup_request_wrap': u32(5) + u32(0xfffffffc),
        'lookup_answer': answer(),
        'lookup_answer_unknown_row': answer(first=6, count=2, rows=entry(6) + entry(7, known=0)),
        'lookup_answer_all_unknown': answer(first=1, count=7, rows=u8(0) * 7),
        'lookup_answer_host_empty': answer(rows=entry(3, host='') + entry(4)),
        'lookup_answer_short': answer()[:20],
        'report_stats': stats(),
        'report_stats_no_peers': stats(peers=0, keys=0),
        'report_stats_peers_huge': stats(peers=0)[:12] + u32(0xffffffff) + stats()[16:],
        'report_stats_short': stats()[:100],
        'report_stats_nan_busbw': stats(busbw=float('nan')),
        'report_events': tev() + tev(kind=10, tid=1, flags=7, peer=3) + tev(id_=9, flags=8 | 3),
        'report_event_kind_bogus': tev(kind=999),
        'report_event_tid_bogus': tev(tid=200),
        'report_event_dur_huge': tev(dur=1 << 60),
        'report_merged': merged(),
        'report_merged_empty': merged(nodes=(0, 0, 0), missing=(), missing_nodes=0, keys=(), slow=(), busy=(), lat=()),
        'report_merged_keys_unsorted': merged(keys=(5, 2)),
        'report_merged_key_batched': merged(keys=(1, 0xffffffffffffffff)),
        'report_merged_keys_huge': merged()[:20] + u32(0xffffffff) + merged()[24:],
        'report_merged_hist_count': merged(hist_n_extra=1),
        'report_merged_missing_unsorted': merged(missing=(9, 4)),
        'report_merged_nodes_huge': u32(0xffffffff) + merged()[4:],
        'report_merged_top_node_huge': merged(slow=((0x7fffffff, 1),)),
        'report_merged_nan_busbw': merged(busbw=float('nan')),
        'report_merged_short': merged()[:21000],
    },
    'kv': {
        'error_esize': u32(11) + s('push of key 3: length 4 != initialised length 8'),
        'error_code_zero': u32(0) + s('no error?'),
        'error_code_huge': u32(0xffffffff) + s('x'),
        'error_str_len_huge': u32(8) + u32(0xffffffff),
        'error_msg_511': u32(13) + s('m' * 511),
        'opt_sgd': opt(1),
        'opt_adam': opt(2, mom=0.0),
        'opt_nan_lr': opt(1, lr=float('nan')),
        'opt_adam_beta_1': opt(2, mom=0.0, b1=1.0),
        'opt_kind_7': opt(7),
        'opt_truncated': opt(1)[:30],
        'push_fp32_4': push(n=4, body=f32(1) * 4),
        'push_fp16_5': push(kind=1, n=5, body=b'\x00\x3c' * 5),
        'push_2bit_17': push(kind=2, n=17, meta=f32(0.5), body=u32(0x6) + u32(0x1)),
        'push_2bit_code3': push(kind=2, n=16, meta=f32(0.5), body=u32(0xc)),
        'push_2bit_past_end': push(kind=2, n=3, meta=f32(0.5), body=u32(0x40)),
        'push_2bit_nan_threshold': push(kind=2, n=16, meta=f32(float('nan')), body=u32(0)),
        'push_2bit_no_meta': push(kind=2, n=16, body=u32(0)),
        'push_1bit_33': push(kind=3, n=33, body=f32(0.25) + f32(-0.5) + u32(0xffff0000) + u32(1)),
        'push_1bit_inf': push(kind=3, n=8, body=f32(float('inf')) + f32(0) + u32(0)),
        'push_size_mismatch': push(kind=1, n=5, body=b'\x00' * 9),
        'push_kind_9': push(kind=9, n=1, body=b'\x00' * 4),
        'pull_fp16_answer': push(cmd=1, answer=1),
        'pull_answer_2bit': push(cmd=1, answer=2),
        'pushpull_reserved_bits': push(cmd=2, kind=0x10000, n=1, body=f32(1)),
        'many_push_uniform': many(keys=(7, 1 << 63, 0)),
        'many_init_lens': many(cmd=0, keys=(3, 9, 4), lens=(1, 3, 2)),
        'many_pull_fp16': many(cmd=2, keys=(5, 6), answer=1, vals=False),
        'many_dup_keys': many(cmd=0, keys=(8, 2, 8)),
        'many_zero_len': many(keys=(1, 2), lens=(0, 1)),
        'many_count_huge': u8(1) + u32(0xffffffff) + u32(1) + u32(0) + u64(1),
        'stall_query': u32(2) + u64(57) + u32(35) + u64(3) + u64(58) + u32(37) + u64(4),
        'stall_query_count_huge': u32(0xffffffff) + u64(1) + u32(35) + u64(1),
        'stall_answer': s('request 57 (push of key 3): in the open round'),
        'rows_push': rows(ids=(8, 71, 20)),
        'rows_pull_repeats_fp16': rows(cmd=1, ids=(9, 9, 40), answer=1),
        'rows_push_dup': rows(ids=(10, 11, 10)),
        'rows_push_out_of_range': rows(ids=(7, 72)),
        'rows_pushpull_2bit': rows(cmd=2, ids=(12, 13), width=16, kind=2, meta=f32(0.5), body=u32(0x5) + u32(0xa)),
        'rows_width_zero': rows(width=0, body=b''),
        'rows_count_huge': u8(0) + u32(0xffffffff) + u32(0xffffff) + u32(0) + u8(0) + u64(8),
    },
    'kv_server': {
        'config_async': kvs(KV_CONFIG) + key_ready() + kvs(KV_PUSH, key=1, arg0=4, payload=floats(4)),
        'set_opt_sgd': kvs(KV_SET_OPT, meta=opt(1)) + key_ready() + kvs(KV_PUSH, key=1, arg0=4, payload=floats(4))
                       + kvs(KV_PUSH, w=1, key=1, arg0=4, payload=floats(4)),
        'set_opt_adam_late': key_ready() + kvs(KV_SET_OPT, meta=opt(2)),
        'init_push_pull': key_ready() + kvs(KV_PUSH, key=1, arg0=4, payload=floats(4))
                          + kvs(KV_PULL, key=1, arg0=4) + kvs(KV_PUSHPULL, w=1, key=1, arg0=4, payload=floats(4))
                          + kvs(KV_PUSH, key=1, arg0=4, payload=floats(4)),
        'init_value_empty': kvs(KV_INIT, arg2=1, key=5, arg0=1000) + kvs(KV_PULL, key=5, arg0=1000),
        'init_value_cut': kvs(KV_INIT, arg2=1, key=5, arg0=4, payload=floats(1) + b'\0\0'),
        'init_value_outside': kvs(KV_INIT, arg2=1, key=5, arg0=4, arg1=2, payload=floats(4)),
        'init_again_other_length': key_ready() + kvs(KV_INIT, arg2=1, key=1, arg0=8, payload=floats(8)),
        'push_wrong_length': key_ready() + kvs(KV_PUSH, key=1, arg0=4, payload=floats(3)),
        'push_2bit_pull_fp16': key_ready(n=32) + kvs(KV_PUSH, arg2=2, key=1, arg0=32, meta=f32(0.5), payload=u32(0x6) + u32(0x9))
                               + kvs(KV_PULL, w=1, arg2=1 << 8, key=1, arg0=32),
        'push_1bit': key_ready(n=32) + kvs(KV_PUSH, arg2=3, key=1, arg0=32, payload=f32(1) + f32(-1) + u32(0xf0f0f0f0)),
        'push_streamed': key_ready(n=1 << 16) + kvs(KV_PUSH, key=1, arg0=1 << 16, payload=floats(1 << 16)),
        'push_twice_in_round': key_ready() + kvs(KV_PUSH, key=1, arg0=4, payload=floats(4)) * 2
                               + kvs(KV_PUSH, w=1, key=1, arg0=4, payload=floats(4)),
        'push_unknown_key': kvs(KV_PUSH, key=9, arg0=4, payload=floats(4)),
        'checkpoint_no_dir': kvs(KV_CHECKPOINT),
        'replayed_resume': key_ready() + kvs(KV_REPLAYED) + kvs(KV_RESUME, key=1, arg0=4, meta=u64(0)),
        'many_init_push_pull': kvs(KV_INIT_MANY, arg0=2, arg1=3, payload=many_body((1, 2), 3))
                               + kvs(KV_PUSH_MANY, arg0=2, arg1=3, payload=many_body((1, 2), 3))
                               + kvs(KV_PUSHPULL_MANY, w=1, arg0=2, arg1=3, payload=many_body((1, 2), 3))
                               + kvs(KV_PULL_MANY, arg0=2, arg1=3, arg2=1 << 8, payload=many_body((1, 2), 3, vals=False)),
        'many_lengths': kvs(KV_INIT_MANY, arg0=2, arg1=0, payload=u64(1) + u64(2) + u32(1) + u32(2) + floats(3)),
        'many_dup_keys': kvs(KV_INIT_MANY, arg0=2, arg1=1, payload=many_body((4, 4), 1)),
        'row_push_pull': row_ready() + kvs(KV_ROW_PUSH, key=7, arg0=2, arg1=2, payload=row_ids((3, 9), 2))
                         + kvs(KV_ROW_PUSHPULL, w=1, key=7, arg0=2, arg1=2, payload=row_ids((9, 1), 2))
                         + kvs(KV_ROW_PULL, key=7, arg0=3, arg1=2, arg2=1 << 8, payload=row_ids((1, 3, 9))),
        'row_init_value': row_ready(value=True) + kvs(KV_ROW_PULL, w=1, key=7, arg0=1, arg1=2, payload=row_ids((79,))),
        'row_pull_one_row_256_times': row_ready(rows=16, width=1 << 12)
                                      + kvs(KV_ROW_PULL, key=7, arg0=256, arg1=1 << 12, payload=row_ids((3,) * 256)),
        'row_table_2_36': row_ready(rows=1 << 36, width=1)
                          + kvs(KV_ROW_PUSH, key=7, arg0=4, arg1=1, payload=row_ids((0, 1 << 22, 2 << 22, 3 << 22), 1)),
        'row_tables_past_limit': row_ready(key=7, rows=3 << 20, width=1) + row_ready(key=8, rows=3 << 20, width=1)
                                 + row_ready(key=9, rows=3 << 20, width=1),
        'row_push_2bit': row_ready(width=16) + kvs(KV_ROW_PUSH, arg2=2, key=7, arg0=2, arg1=16, meta=f32(0.5),
                                                   payload=row_ids((12, 13)) + u32(0x5) + u32(0xa)),
        'row_push_dup': row_ready() + kvs(KV_ROW_PUSH, key=7, arg0=2, arg1=2, payload=row_ids((3, 3), 2)),
        'row_key_of_other_store': key_ready(key=7) + row_ready(key=7) + kvs(KV_ROW_PULL, key=7, arg0=1, arg1=2, payload=row_ids((0,))),
        'unknown_command': kvs(60, key=1) + kvs(39),
    },
    'auth': {
        'acceptor_hello_proof': b'\x00' + b'DTH1' + u32(0) + bytes(range(32)) + b'DTP1' + bytes(32),
        'acceptor_hello_encrypt': b'\x00' + b'DTH1' + u32(3) + bytes(32) + b'DTP1' + b'\xff' * 32,
        'acceptor_frame_not_hello': b'\x00' + u32(0x4e525444) + bytes(36),
        'acceptor_short': b'\x00' + b'DTH1' + bytes(10),
        'connector_challenge': b'\x01' + b'DTC1' + u32(1) + bytes(32) + bytes(32),
        'connector_not_challenge': b'\x01' + b'HTTP/1.1 200 OK\r\n' + bytes(60),
        'records_one': b'\x02' + u32(5) + b'hello' + bytes(16),
        'records_len_huge': b'\x02' + u32(0xffffffff) + bytes(40),
        'records_len_over_max': b'\x02' + u32((64 << 10) + 1) + bytes(40),
        'records_two': b'\x02' + (u32(3) + b'abc' + bytes(16)) * 2,
        'records_plain_64k': b'\x02' + bytes(70000),
    },
    'coll': {
        'ready_allreduce': sig(),
        'data_cma': sig(count=1 << 20) + u64(0x7ffd12345678),
        'broadcast_root_huge': sig(kind=2, root=0xffffffff),
        'group_of_255': sig(ntensors=255, count=1 << 40),
        'kind_bogus': sig(kind=200, dtype=99, op=77),
        'short': sig()[:10],
        'abort_text': b'rank 1: allreduce(count=4) != broadcast(count=4)\x00',
    },
}

for target, files in SEEDS.items():
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), 'wb') as f:
            f.write(data)
