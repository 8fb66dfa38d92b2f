"""door.py - a stranger at a job's door, without the job's secret, for the
tests of docs/security.md's "Strangers at the door" (door_*.sh).

  door.py hold N PORT...   keep N silent connections open to every PORT,
                           opening a new one whenever a node closes one (or
                           refuses: a port may not listen yet); prints
                           "holding" once N are open on every port, then the
                           count of reopened connections as it grows (10
                           times a second at most); runs until killed.
  door.py flood RATE PORT...
                           RATE handshakes a second with a wrong secret,
                           spread over the ports: HELLO, read the
                           CHALLENGE, send a PROOF that does not check out;
                           prints how many were answered each second; runs
                           until killed.
  door.py dummy N          a dummy acceptor, the control of a flood: listens
                           on N ports of its own (printed as "listening on
                           PORT..."), answers every HELLO with a made-up
                           72-byte challenge and closes once the proof comes.
                           It does the network side of a node's handshake
                           and none of its work, so a flood aimed at it
                           costs a job beside it only what the stranger's
                           own traffic costs.

It speaks the handshake as dtpeer.py does (written from docs/protocol.md).
"""
import os
import selectors
import signal
import socket
import struct
import sys
import time

import dtpeer

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def opener(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return None
    return s


def hold(n, ports):
    sel = selectors.DefaultSelector()
    count = {p: 0 for p in ports}
    reopened = said = 0
    ready = False
    last = time.time()
    while True:
        for p in ports:
            while count[p] < n:
                s = opener(p)
                if s is None:
                    break
                sel.register(s, selectors.EVENT_READ, p)
                count[p] += 1
        if not ready and all(count[p] >= n for p in ports):
            ready = True
            print("holding %d connections on each of %s" %
                  (n, " ".join(map(str, ports))), flush=True)
        for key, _ in sel.select(timeout=0.05):
            try:
                got = key.fileobj.recv(1)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                got = b""
            if got:
                continue  # (a silent stranger is sent nothing: not ours)
            sel.unregister(key.fileobj)
            key.fileobj.close()
            count[key.data] -= 1
            reopened += 1
        if reopened != said and time.time() - last >= 0.1:
            last, said = time.time(), reopened
            print("reopened %d so far" % reopened, flush=True)
        if not all(count[p] >= n for p in ports):
            time.sleep(0.005)  # (a refusing port: do not spin)


def flood(rate, ports):
    wrong = dtpeer.job_key(b"not this job's secret at all")
    sel = selectors.DefaultSelector()
    inflight = {}
    answered = started = 0
    t0 = last = time.time()
    i = 0
    while True:
        now = time.time()
        # Start the handshakes due by now (at most 256 in flight).
        while started < (now - t0) * rate and len(inflight) < 256:
            s = opener(ports[i % len(ports)])
            i += 1
            started += 1
            if s is None:
                continue
            hello = b"DTH1" + struct.pack("<I", 0) + os.urandom(32)
            inflight[s] = (hello, now)
            sel.register(s, selectors.EVENT_WRITE)
        for key, ev in sel.select(timeout=0.002):
            s = key.fileobj
            hello, _ = inflight[s]
            try:
                if ev & selectors.EVENT_WRITE:
                    s.send(hello)
                    sel.modify(s, selectors.EVENT_READ)
                    continue
                chal = s.recv(72)
                if len(chal) == 72:
                    answered += 1
                    s.send(b"DTP1" + dtpeer.mac(wrong, b"cli", hello,
                                                 chal))
            except OSError:
                pass
            sel.unregister(s)
            s.close()
            del inflight[s]
        for s, (_, at) in list(inflight.items()):
            if now - at > 2:
                sel.unregister(s)
                s.close()
                del inflight[s]
        if now - last >= 1:
            print("%d handshakes answered in %.1f s" % (answered, now - t0),
                  flush=True)
            last = now


def dummy(n):
    sel = selectors.DefaultSelector()
    ports = []
    for _ in range(n):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind(("127.0.0.1", 0))
        ls.listen(1024)
        ls.setblocking(False)
        sel.register(ls, selectors.EVENT_READ, "listen")
        ports.append(ls.getsockname()[1])
    print("listening on %s" % " ".join(map(str, ports)), flush=True)
    while True:
        for key, _ in sel.select(timeout=1):
            if key.data == "listen":
                try:
                    c, _ = key.fileobj.accept()
                except OSError:
                    continue
                c.setblocking(False)
                sel.register(c, selectors.EVENT_READ, "hello")
                continue
            c = key.fileobj
            try:
                got = c.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                got = b""
            if got and key.data == "hello":
                try:
                    c.send(b"DTC1" + os.urandom(68))
                    sel.modify(c, selectors.EVENT_READ, "proof")
                    continue
                except OSError:
                    pass
            sel.unregister(c)
            c.close()


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold(int(sys.argv[2]), [int(p) for p in sys.argv[3:]])
    elif sys.argv[1] == "flood":
        flood(float(sys.argv[2]), [int(p) for p in sys.argv[3:]])
    elif sys.argv[1] == "dummy":
        dummy(int(sys.argv[2]))
    else:
        sys.exit("usage: door.py hold N PORT... | flood RATE PORT... | dummy N")
