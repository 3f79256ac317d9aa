#!/bin/sh
# Makes the certificates and keys of the signature tests (src/crypto/sig/tests.rs) with
# strongSwan's `pki` (Debian strongswan-pki), as an operator would: end-entity
# certificates without EKU unless said. The files are committed, so the tests need no
# `pki`; they verify at a fixed time (2030-01-01) inside the 20-year lifetimes.
# Run from this directory: sh make.sh
set -eu
q() { "$@" 2>/dev/null; }
key() { q pki --gen --type "$1" ${2:+--size "$2"} --outform pem > "$3.key.pem"; }
issue() { # name type ca dn [extra pki --issue options]
    n=$1 t=$2 ca=$3 dn=$4; shift 4
    q pki --issue --in "$n.key.pem" --type "$t" --cacert "$ca.der" --cakey "$ca.key.pem" \
        --dn "$dn" --lifetime 7300 --outform der "$@" > "$n.der"
}
key ecdsa 384 root
q pki --self --ca --in root.key.pem --type ecdsa --dn "C=CH, O=ferrouter test, CN=Root CA" \
    --lifetime 7300 --outform der > root.der
key rsa 2048 sub
issue sub rsa root "C=CH, O=ferrouter test, CN=Intermediate CA" --ca
key ecdsa 256 other
q pki --self --ca --in other.key.pem --type ecdsa --dn "C=CH, O=elsewhere, CN=Other CA" \
    --lifetime 7300 --outform der > other.der

key ecdsa 256 p256
issue p256 ecdsa sub "C=CH, O=ferrouter test, CN=p256.example" --san p256.example
key ecdsa 384 p384
issue p384 ecdsa root "C=CH, O=ferrouter test, CN=p384.example" --san p384.example
key ed25519 "" ed25519
issue ed25519 ed25519 root "C=CH, O=ferrouter test, CN=ed25519.example" --san ed25519.example
key rsa 2048 rsa2048
issue rsa2048 rsa sub "C=CH, O=ferrouter test, CN=rsa2048.example" --san rsa2048.example \
    --rsa-padding pss
key rsa 1024 rsa1024
issue rsa1024 rsa root "C=CH, O=ferrouter test, CN=rsa1024.example"
# With EKUs: serverAuth (accepted), OCSP signing only (refused for IKE).
issue p256 ecdsa root "C=CH, O=ferrouter test, CN=server.example" --flag serverAuth
mv p256.der server.der
issue p256 ecdsa root "C=CH, O=ferrouter test, CN=ocsp.example" --flag ocspSigning
mv p256.der ocsp.der
issue p256 ecdsa sub "C=CH, O=ferrouter test, CN=p256.example" --san p256.example
# Expired in 2021.
q pki --issue --in p256.key.pem --type ecdsa --cacert root.der --cakey root.key.pem \
    --dn "C=CH, O=ferrouter test, CN=expired.example" --not-before "01.01.20 00:00:00" \
    --not-after "01.01.21 00:00:00" --outform der > expired.der
# Signed by the untrusted CA.
issue p384 ecdsa other "C=CH, O=elsewhere, CN=p384.example"
mv p384.der untrusted.der
issue p384 ecdsa root "C=CH, O=ferrouter test, CN=p384.example" --san p384.example
# The same in other encodings, for the file readers.
openssl x509 -inform der -in root.der -out root.pem
openssl x509 -inform der -in sub.der -out sub.pem
cat sub.pem root.pem > chain.pem
# Certificate files as an operator writes them (the IKE tests): the end-entity
# certificate, then its intermediate.
for n in p256 rsa2048 p384 ed25519; do openssl x509 -inform der -in $n.der -out $n.pem; done
cat p256.pem sub.pem > p256-chain.pem
cat rsa2048.pem sub.pem > rsa2048-chain.pem
rm p256.pem rsa2048.pem
openssl ec -in p256.key.pem -outform der -out p256.key.der 2>/dev/null
openssl pkey -in ed25519.key.pem -outform der -out ed25519.key.der
# With IP addresses as subjectAltNames.
q pki --issue --in p256.key.pem --type ecdsa --cacert root.der --cakey root.key.pem \
    --dn "C=CH, O=ferrouter test, CN=gw.example" --san 192.0.2.1 --san 2001:db8::1 \
    --san gw.example --lifetime 7300 --outform der > ip.der
# With email addresses (rfc822Name) as subjectAltNames.
q pki --issue --in p256.key.pem --type ecdsa --cacert root.der --cakey root.key.pem \
    --dn "C=CH, O=ferrouter test, CN=user@example.org" --san user@example.org \
    --san Second.User@Example.ORG --lifetime 7300 --outform der > email.der
# The root CA's CRL, revoking p384.der.
q pki --signcrl --cacert root.der --cakey root.key.pem --cert p384.der --reason key-compromise \
    --lifetime 7300 --outform der > root.crl
