"""attack.py PORT CASE[,CASE...] [ARG]: attacks of a stranger (no secret, or
a secret of its own) on the dtrain node listening on 127.0.0.1:PORT, one
after the other on a connection each (one process for many cases: a
Python start costs more than most attacks).

Exit 0 when, for every case, the node hung up within the time limit and
sent nothing but a refusal: no bytes at all, or the handshake's challenge
(72 bytes that begin "DTC1": a nonce and a MAC, nothing of the job). Exit 3
when nobody listens on the port. Exit 1 at the first case that fails, with
what happened on stderr. The cases are issue 11's table and a few more; see
tests/security/attacks.sh.
"""
import os
import socket
import struct
import sys
import time

import dtpeer

PORT, CASES = int(sys.argv[1]), sys.argv[2].split(",")
CASE = CASES[0]
ARG = int(sys.argv[3]) if len(sys.argv) > 3 else 2
LIMIT_S = 15  # DT_HANDSHAKE_TIMEOUT is 2 s in the suite
CMD_ADD_NODE, CMD_HELLO, CMD_TEXT, CMD_KV_INIT, CMD_KV_PUSH = 1, 3, 11, 34, 35


def bad(why):
    sys.stderr.write("attack %s on port %d: %s\n" % (CASE, PORT, why))
    sys.exit(1)


def only_refusal(got):
    """What a stranger may get back: nothing, or one challenge."""
    if got and not (len(got) == 72 and got[:4] == b'DTC1'):
        bad("received %d bytes that are not a refusal: %r" %
            (len(got), got[:80]))


def finish(s):
    s.settimeout(LIMIT_S)
    got, hung_up = dtpeer.drain(s)
    only_refusal(got)
    if not hung_up:
        bad("the node did not hang up within %d s" % LIMIT_S)
    sys.exit(0)


def add_node(role, port_of_node):
    host = b"127.0.0.1"
    meta = (struct.pack('<BI', role, 0xffffffff) +
            struct.pack('<I', len(host)) + host +
            struct.pack('<IIII', port_of_node, 4242, 1, 1))
    return dtpeer.hdr(CMD_ADD_NODE, recver=0, flags=1,
                      meta_len=len(meta)) + meta


def attack():
    global s
    try:
        s = socket.create_connection(("127.0.0.1", PORT), timeout=LIMIT_S)
    except ConnectionRefusedError:
        sys.stderr.write("attack %s: nobody listens on port %d\n" %
                         (CASE, PORT))
        sys.exit(3)
    play()


def play():
    if CASE == "hello_2_31":  # row 1: a HELLO naming node 2^31
        s.sendall(dtpeer.hdr(CMD_HELLO, sender=1 << 31, flags=1))
    elif CASE == "push_nan":  # row 2: a push of NaNs, no HELLO
        nans = struct.pack('<4f', *([float('nan')] * 4))
        s.sendall(dtpeer.hdr(CMD_KV_PUSH, sender=ARG, payload_len=len(nans),
                             flags=1, arg0=4) + nans)
    elif CASE == "hello_live_worker":  # row 3: a live worker's id
        s.sendall(dtpeer.hdr(CMD_HELLO, sender=ARG, flags=1))
    elif CASE == "init_4gib":  # row 4: a KV_INIT claiming 4 GiB
        s.sendall(dtpeer.hdr(CMD_KV_INIT, sender=ARG, payload_len=4 << 30,
                             flags=1, arg0=1 << 30))
        try:
            for _ in range(16):
                s.sendall(b"\0" * (1 << 20))
        except OSError:
            pass
    elif CASE == "add_node":  # row 5: ADD_NODE as a worker
        s.sendall(add_node(2, 50001))
    elif CASE == "text_forged":  # row 7: a TEXT with a forged line
        text = b"hi\n[server 0] FAKE LINE"
        s.sendall(dtpeer.hdr(CMD_TEXT, sender=ARG, meta_len=len(text)) + text)
    elif CASE == "garbage":
        s.sendall(b"GET / HTTP/1.1\r\nHost: dtrain\r\n\r\n" + bytes(range(256)))
    elif CASE == "wrong_secret":  # a secret of its own: refused
        try:
            dtpeer.handshake(s, b"guessed secret, not the job's")
            bad("a wrong secret passed the handshake")
        except dtpeer.AuthError:
            pass
        finish(s)
    elif CASE == "wrong_secret_proof":  # ...and a proof made up anyway
        key = dtpeer.job_key(b"guessed secret, not the job's")
        hello = b'DTH1' + struct.pack('<I', 0) + os.urandom(32)
        s.sendall(hello)
        chal = dtpeer.recv_exact(s, 72)
        only_refusal(chal)
        s.sendall(b'DTP1' + dtpeer.mac(key, b'cli', hello, chal))
        s.sendall(dtpeer.hdr(CMD_HELLO, sender=ARG, flags=1))
    elif CASE == "other_job":  # the job's secret, another job's id
        secret = os.environ["DTRAIN_SECRET"].encode()
        try:
            dtpeer.handshake(s, secret, job_id=b"another-job")
            bad("another job's node passed the handshake")
        except dtpeer.AuthError:
            pass
        finish(s)
    elif CASE == "replay":
        # A recorded handshake of a real node played again: the node's fresh
        # nonce makes the old proof worthless. (The recording is made here
        # with the secret, as an eavesdropper would have seen it.)
        secret = os.environ["DTRAIN_SECRET"].encode()
        key = dtpeer.job_key(secret, os.environ.get("DTRAIN_JOB_ID",
                                                    "").encode())
        rec = socket.create_connection(("127.0.0.1", PORT), timeout=LIMIT_S)
        hello = b'DTH1' + struct.pack('<I', 0) + os.urandom(32)
        rec.sendall(hello)
        chal = dtpeer.recv_exact(rec, 72)
        proof = b'DTP1' + dtpeer.mac(key, b'cli', hello, chal)
        rec.close()  # (never sends the proof: this connection is not used)
        s.sendall(hello)
        only_refusal(dtpeer.recv_exact(s, 72))
        s.sendall(proof + dtpeer.hdr(CMD_HELLO, sender=ARG, flags=1))
    elif CASE == "slowloris":  # row 8: a HELLO a byte every 0.2 s
        s.settimeout(0.2)
        end = time.time() + LIMIT_S
        for b in b'DTH1' + bytes(36):
            try:
                s.sendall(bytes([b]))
                if s.recv(1) == b"":
                    sys.exit(0)
            except socket.timeout:
                pass
            except OSError:
                sys.exit(0)
            if time.time() > end:
                break
        bad("a handshake a byte at a time was not cut off")
    elif CASE == "flood":  # rows 8-9: many silent connections
        import select
        socks = [s]
        for _ in range(ARG - 1):
            try:
                socks.append(socket.create_connection(("127.0.0.1", PORT),
                                                      timeout=LIMIT_S))
            except OSError:
                pass
        end = time.time() + LIMIT_S
        left = set(socks)
        while left and time.time() < end:
            r, _, _ = select.select(list(left), [], [], 0.5)
            for x in r:
                try:
                    got = x.recv(1)
                except ConnectionResetError:
                    got = b""
                if got:
                    bad("a silent connection was sent something")
                left.discard(x)
        if left:
            bad("%d silent connections still open after %d s" %
                (len(left), LIMIT_S))
        sys.exit(0)
    else:
        bad("unknown case")
    finish(s)


for CASE in CASES:
    s = None
    try:
        attack()
    except (ConnectionResetError, BrokenPipeError, ConnectionError):
        # The node hung up while we were still sending or in the handshake:
        # the refusal we expect.
        pass
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    finally:
        if s is not None:
            s.close()
sys.exit(0)
