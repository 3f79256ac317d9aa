"""scapy's ESP (scapy.layers.ipsec.SecurityAssociation) for tests/scapy.rs.

stdin: lines `SA <json>` (the SA of the lines that follow), then `DEC <hex>` (an ESP
packet from ferrouter: decrypt it, print `OK <hex of the inner packet>` or `ERR <why>`) or
`ENC <seq> <hex>` (an IP packet: encrypt it with sequence number <seq>, print `OK <hex>`).
"""
import json
import sys

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.packet import raw


def make_sa(c):
    tunnel = None
    if c["mode"] == "tunnel4":
        tunnel = IP(src=c["src"], dst=c["dst"])
    elif c["mode"] == "tunnel6":
        tunnel = IPv6(src=c["src"], dst=c["dst"])
    natt = UDP(sport=4500, dport=4500) if c["natt"] else None
    return SecurityAssociation(
        ESP,
        spi=c["spi"],
        crypt_algo=c["crypt"],
        crypt_key=bytes.fromhex(c["ekey"]) or None,
        auth_algo=c["auth"],
        auth_key=bytes.fromhex(c["akey"]) or None,
        tunnel_header=tunnel,
        nat_t_header=natt,
        esn_en=c["esn"],
        esn=c["esn_hi"],
    )


def parse(b):
    return IPv6(b) if b[0] >> 4 == 6 else IP(b)


def main():
    sa = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "SA":
                sa = make_sa(json.loads(line[3:]))
                continue
            if words[0] == "DEC":
                out = raw(sa.decrypt(parse(bytes.fromhex(words[1]))))
            else:
                out = raw(sa.encrypt(parse(bytes.fromhex(words[2])), seq_num=int(words[1])))
                if sa.nat_t_header is not None and out[0] >> 4 == 4:
                    # scapy 2.5.0 writes the NAT-T UDP header's length as 8 (it fixes the
                    # header before the ESP payload is added): repair the length field only.
                    ihl = (out[0] & 15) * 4
                    out = out[: ihl + 4] + (len(out) - ihl).to_bytes(2, "big") + out[ihl + 6 :]
            print("OK", out.hex(), flush=True)
        except Exception as e:  # reported to the Rust side, which fails the case
            print("ERR", type(e).__name__, str(e).replace("\n", " "), flush=True)


if __name__ == "__main__":
    main()
