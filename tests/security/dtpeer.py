"""dtpeer - a dtrain peer in a few lines of Python, for the tests that play
a stranger or a misbehaving node (tests/security, tests/integration).

It speaks the handshake of src/net/auth.h (BLAKE2b from hashlib, which is
libsodium's crypto_generichash) and builds frame headers (docs/protocol.md).
It is written from the documents, not from the C code, so a test that uses
it checks the two agree.
"""
import hashlib
import os
import socket
import struct

WIRE_MAGIC = 0x4E525444  # "DTRN"
WIRE_VERSION = 8
HDR = struct.Struct('<IBBHIIQQQQIIQ')  # 64 bytes


def hdr(cmd, sender=0, recver=1, meta_len=0, payload_len=0, flags=0, key=0,
        arg0=0, seq=0, magic=WIRE_MAGIC, ver=WIRE_VERSION):
    """A frame header (docs/protocol.md)."""
    return HDR.pack(magic, ver, cmd, flags, sender, recver, seq, key, arg0,
                    0, 0, meta_len, payload_len)


def job_key(secret, job_id=b''):
    """K: BLAKE2b-256 keyed with BLAKE2b-256(secret), over the label and
    the job id."""
    k0 = hashlib.blake2b(secret, digest_size=32).digest()
    return hashlib.blake2b(b'dtrain-v1 job\0' + job_id, key=k0,
                           digest_size=32).digest()


def mac(key, label, *parts):
    h = hashlib.blake2b(key=key, digest_size=32)
    h.update(label + b'\0')
    for p in parts:
        h.update(p)
    return h.digest()


def recv_exact(s, n):
    b = b''
    while len(b) < n:
        got = s.recv(n - len(b))
        if not got:
            raise ConnectionError('closed during the handshake')
        b += got
    return b


class AuthError(Exception):
    pass


def handshake(s, secret, job_id=b'', flags=0, proof_key=None):
    """The connector's side: HELLO, check the CHALLENGE, PROOF. Returns the
    challenge. proof_key signs the proof instead of K (to send a wrong
    one)."""
    key = job_key(secret, job_id)
    hello = b'DTH1' + struct.pack('<I', flags) + os.urandom(32)
    s.sendall(hello)
    chal = recv_exact(s, 72)
    if chal[:4] != b'DTC1':
        raise AuthError('not a challenge')
    if mac(key, b'srv', hello, chal[:40]) != chal[40:]:
        raise AuthError('the node does not hold this key')
    pk = proof_key if proof_key is not None else key
    s.sendall(b'DTP1' + mac(pk, b'cli', hello, chal))
    return chal


def connect(port, secret=None, host='127.0.0.1', timeout=10, **kw):
    s = socket.create_connection((host, port), timeout=timeout)
    if secret is not None:
        handshake(s, secret, **kw)
    return s


def drain(s, limit=1 << 20):
    """Read until the peer hangs up: returns (bytes received, 1 if it hung
    up, 0 if the timeout came first)."""
    got = b''
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return got, 1
            if len(got) < limit:
                got += b
    except ConnectionResetError:
        return got, 1
    except socket.timeout:
        return got, 0
