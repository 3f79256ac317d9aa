"""The IKEv2 SK payload (RFC 7296 §3.14, RFC 5282, RFC 7634) written straight from the
RFCs with python3-cryptography, for tests/sk_python.rs.

stdin, one per line (hex for bytes, `-` for none):
  OPEN <encr> <integ> <sk_e> <sk_a> <at> <hdr_len> <msg>
      check and decrypt the SK payload at <at>; print `OK <inner payloads>` or `ERR <why>`
  SEAL <encr> <integ> <sk_e> <sk_a> <at> <hdr_len> <iv> <msg>
      <msg> ends with the SK header and the inner payloads: seal it with <iv>, print `OK <msg>`
<encr>: aes-gcm-16, chacha20-poly1305 or aes-cbc; <integ>: none, sha1, sha256, sha384, sha512.
Sealing pads with 0xAA bytes (3 with an AEAD): RFC 7296 lets the padding be anything.
"""
import hashlib
import hmac
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

INTEG = {
    "sha1": (hashlib.sha1, 12),
    "sha256": (hashlib.sha256, 16),
    "sha384": (hashlib.sha384, 24),
    "sha512": (hashlib.sha512, 32),
}


def aead(encr, sk_e):
    key, salt = sk_e[:-4], sk_e[-4:]
    return (AESGCM(key) if encr == "aes-gcm-16" else ChaCha20Poly1305(key)), salt


def open_sk(encr, integ, sk_e, sk_a, at, hl, msg):
    if int.from_bytes(msg[24:28], "big") != len(msg):
        raise ValueError("IKE Length is not the message's")
    if int.from_bytes(msg[at + 2 : at + 4], "big") != len(msg) - at:
        raise ValueError("SK Payload Length is not to the end")
    s = at + hl
    if integ == "none":
        c, salt = aead(encr, sk_e)
        iv = msg[s : s + 8]
        if len(iv) != 8:
            raise ValueError("short")
        content = c.decrypt(salt + iv, msg[s + 8 :], msg[:s])
    else:
        h, n = INTEG[integ]
        if not hmac.compare_digest(hmac.new(sk_a, msg[:-n], h).digest()[:n], msg[-n:]):
            raise ValueError("ICV")
        iv = msg[s : s + 16]
        d = Cipher(algorithms.AES(sk_e), modes.CBC(iv)).decryptor()
        content = d.update(msg[s + 16 : -n]) + d.finalize()
    pad = content[-1]
    if pad + 1 > len(content):
        raise ValueError("pad length")
    return content[: len(content) - pad - 1]


def seal_sk(encr, integ, sk_e, sk_a, at, hl, iv, msg):
    s = at + hl
    plain = msg[s:]
    if integ == "none":
        content = plain + b"\xaa" * 3 + bytes([3])
        icv_len = 16
    else:
        h, icv_len = INTEG[integ]
        pad = (16 - (len(plain) + 1) % 16) % 16
        content = plain + b"\xaa" * pad + bytes([pad])
    total = s + len(iv) + len(content) + icv_len
    head = bytearray(msg[:s])
    head[24:28] = total.to_bytes(4, "big")
    head[at + 2 : at + 4] = (total - at).to_bytes(2, "big")
    head = bytes(head)
    if integ == "none":
        c, salt = aead(encr, sk_e)
        return head + iv + c.encrypt(salt + iv, content, head)
    e = Cipher(algorithms.AES(sk_e), modes.CBC(iv)).encryptor()
    body = head + iv + e.update(content) + e.finalize()
    return body + hmac.new(sk_a, body, h).digest()[:icv_len]


for line in sys.stdin:
    f = line.split()
    try:
        encr, integ = f[1], f[2]
        sk_e, sk_a = bytes.fromhex(f[3]), bytes.fromhex(f[4].strip("-"))
        at, hl = int(f[5]), int(f[6])
        if f[0] == "OPEN":
            out = open_sk(encr, integ, sk_e, sk_a, at, hl, bytes.fromhex(f[7]))
        else:
            out = seal_sk(encr, integ, sk_e, sk_a, at, hl, bytes.fromhex(f[7]), bytes.fromhex(f[8]))
        print("OK", out.hex())
    except Exception as e:  # noqa: BLE001 - reported to the test
        print("ERR", type(e).__name__, str(e).replace("\n", " "))
