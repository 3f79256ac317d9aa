"""Signatures with python3-cryptography (OpenSSL), for tests/sig_python.rs.

stdin, one per line (hex for bytes):
  SIGN <key file> <scheme> <message>             print `OK <signature>`
  VERIFY <DER certificate file> <scheme> <message> <signature>   print `OK` or `ERR <why>`
<scheme>: ecdsa-sha256, ecdsa-sha384 (DER signatures), ecdsa-fixed-sha256,
ecdsa-fixed-sha384 (r | s, RFC 4754), ed25519, rsa-pkcs1-sha256, rsa-pkcs1-sha1,
rsa-pss-sha256 (MGF1 SHA-256, 32-byte salt).
"""
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

HASH = {"sha1": hashes.SHA1, "sha256": hashes.SHA256, "sha384": hashes.SHA384}


def parts(scheme):
    kind, _, h = scheme.rpartition("-")
    return kind, (HASH[h]() if h in HASH else None)


def sign(key, scheme, msg):
    kind, h = parts(scheme)
    if kind == "ecdsa":
        return key.sign(msg, ec.ECDSA(h))
    if kind == "ecdsa-fixed":
        r, s = decode_dss_signature(key.sign(msg, ec.ECDSA(h)))
        n = (key.curve.key_size + 7) // 8
        return r.to_bytes(n, "big") + s.to_bytes(n, "big")
    if scheme == "ed25519":
        return key.sign(msg)
    if kind == "rsa-pkcs1":
        return key.sign(msg, padding.PKCS1v15(), h)
    if kind == "rsa-pss":
        return key.sign(msg, padding.PSS(padding.MGF1(h), h.digest_size), h)
    raise ValueError(scheme)


def verify(pub, scheme, msg, sig):
    kind, h = parts(scheme)
    if kind == "ecdsa":
        pub.verify(sig, msg, ec.ECDSA(h))
    elif kind == "ecdsa-fixed":
        n = len(sig) // 2
        r, s = int.from_bytes(sig[:n], "big"), int.from_bytes(sig[n:], "big")
        pub.verify(encode_dss_signature(r, s), msg, ec.ECDSA(h))
    elif scheme == "ed25519":
        pub.verify(sig, msg)
    elif kind == "rsa-pkcs1":
        pub.verify(sig, msg, padding.PKCS1v15(), h)
    elif kind == "rsa-pss":
        pub.verify(sig, msg, padding.PSS(padding.MGF1(h), h.digest_size), h)
    else:
        raise ValueError(scheme)


for line in sys.stdin:
    f = line.split()
    try:
        if f[0] == "SIGN":
            with open(f[1], "rb") as k:
                key = serialization.load_pem_private_key(k.read(), None)
            print("OK", sign(key, f[2], bytes.fromhex(f[3])).hex())
        else:
            with open(f[1], "rb") as c:
                pub = x509.load_der_x509_certificate(c.read()).public_key()
            verify(pub, f[2], bytes.fromhex(f[3]), bytes.fromhex(f[4]))
            print("OK")
    except Exception as e:  # noqa: BLE001 - reported to the test
        print("ERR", type(e).__name__, str(e).replace("\n", " "))
