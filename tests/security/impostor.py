#!/usr/bin/env python3
"""impostor.py PORT TOKEN - a member of the job (it holds the job's secret,
DTRAIN_SECRET, and id, DTRAIN_JOB_ID) that asks the running job's scheduler
for server 0's place: an ADD_NODE for the server of rank 0
(docs/protocol.md), with the place token TOKEN ("-" for none).

It prints "asked" once its ADD_NODE is sent, then reads what the scheduler
answers (heartbeats aside) for up to 60 s and prints one line:
  refused: <the ABORT's text>    exit 0
  admitted                       exit 1 (a NODE_TABLE came: it took the place)
  <anything else>                exit 2
"""
import os
import socket
import struct
import sys

import dtpeer

CMD_ADD_NODE, CMD_NODE_TABLE, CMD_ABORT, CMD_HEARTBEAT = 1, 2, 9, 10


def s(text):
    b = text.encode()
    return struct.pack('<I', len(b)) + b


def add_node(port, token):
    """ADD_NODE as a server asking for rank 0, in a job of 2 and 2."""
    meta = (struct.pack('<BI', 1, 0) + s('127.0.0.1') +
            struct.pack('<IIII', port, os.getpid(), 2, 2) + s('') + s(''))
    if token != '-':
        meta += s(token)
    return dtpeer.hdr(CMD_ADD_NODE, recver=0, flags=1,
                      meta_len=len(meta)) + meta


def frames(sock):
    """Yield (cmd, meta) until the scheduler hangs up."""
    buf = b''
    while True:
        while len(buf) >= dtpeer.HDR.size:
            h = dtpeer.HDR.unpack(buf[:dtpeer.HDR.size])
            total = dtpeer.HDR.size + h[11] + h[12]
            if len(buf) < total:
                break
            meta = buf[dtpeer.HDR.size:dtpeer.HDR.size + h[11]]
            buf = buf[total:]
            yield h[2], meta
        got = sock.recv(65536)
        if not got:
            return
        buf += got


def main():
    port, token = int(sys.argv[1]), sys.argv[2]
    secret = os.environ['DTRAIN_SECRET'].encode()
    job_id = os.environ.get('DTRAIN_JOB_ID', '').encode()
    # A port of its own that it listens on, as a real server would.
    lsock = socket.socket()
    lsock.bind(('127.0.0.1', 0))
    lsock.listen(1)
    sock = dtpeer.connect(port, secret, job_id=job_id, timeout=60)
    sock.sendall(add_node(lsock.getsockname()[1], token))
    print('asked', flush=True)
    try:
        for cmd, meta in frames(sock):
            if cmd == CMD_HEARTBEAT:
                continue
            if cmd == CMD_ABORT:
                print('refused: ' + meta.rstrip(b'\0').decode(errors='replace'))
                return 0
            if cmd == CMD_NODE_TABLE:
                print('admitted')
                return 1
            print('unexpected command %d' % cmd)
            return 2
    except socket.timeout:
        print('no answer within 60 s')
        return 2
    except ConnectionResetError:
        pass
    print('hung up without a word')
    return 2


if __name__ == '__main__':
    sys.exit(main())
