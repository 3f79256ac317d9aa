//! Certificate authentication (RFC 7296 §2.15, §3.8): signing the AUTH payload with a
//! private key, and verifying the peer's AUTH against its certificate chain.
//!
//! - Signing: RFC 7427's Digital Signature method (14) only, the one RFC 8247 recommends:
//!   ECDSA P-256 with SHA-256 and P-384 with SHA-384 (DER signatures), Ed25519
//!   (RFC 8420), RSA (2048 bits or more) with SHA-256, PKCS#1 v1.5 or PSS.
//! - Verifying: method 14 with those and SHA-384/512 variants, and the older methods 1
//!   (RSA PKCS#1 v1.5 with SHA-1), 9 and 10 (ECDSA P-256/SHA-256 and P-384/SHA-384,
//!   RFC 4754, r | s).
//! - The certificate chain is validated by rustls-webpki: up to one of the trusted CAs,
//!   every signature, the validity periods at `now`, basic and name constraints, and
//!   the CRLs given to [`verify_chain`]. An
//!   end-entity certificate without EKU is accepted (as strongSwan's `pki` makes them);
//!   one with an EKU extension must allow IKE: id-kp-ipsecIKE, anyExtendedKeyUsage,
//!   serverAuth, clientAuth or iKEIntermediate (RFC 4945 §5.1.3.12, widened to the
//!   TLS purposes that strongSwan's and Windows' certificates carry).
//!
//! - Identities: [`certificate_matches_id`] checks the peer's ID against its certificate
//!   (IP addresses, FQDNs and email addresses by subjectAltName, DNs by subject).
//!
//! No X.509 or ASN.1 is parsed here: webpki parses the certificates, aws-lc-rs the keys,
//! RustCrypto's x509-cert the subjectAltName's email addresses (which webpki does not
//! expose); the AlgorithmIdentifiers of RFC 7427 are compared byte for byte with the
//! encodings this module knows (RFC 7427 Appendix A, RFC 8420 §2).

use std::path::Path;
use std::time::{Duration, SystemTime};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, RsaKeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{alg_id, CertificateDer, DnsName, PrivateKeyDer, ServerName, UnixTime};
use webpki::{EndEntityCert, ExtendedKeyUsageValidator, KeyPurposeId, KeyPurposeIdIter};
use x509_cert::der::Decode;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;

use super::CryptoError;

/// Auth method 1: RSA Digital Signature (PKCS#1 v1.5 with SHA-1), verified only.
pub const AUTH_RSA: u8 = 1;
/// Auth method 2: Shared Key Message Integrity Code ([`super::psk_auth`]).
pub const AUTH_PSK: u8 = 2;
/// Auth method 9: ECDSA with SHA-256 on P-256 (RFC 4754), verified only.
pub const AUTH_ECDSA_256: u8 = 9;
/// Auth method 10: ECDSA with SHA-384 on P-384 (RFC 4754), verified only.
pub const AUTH_ECDSA_384: u8 = 10;
/// Auth method 14: Digital Signature (RFC 7427), what [`sign`] makes.
pub const AUTH_DIGITAL_SIGNATURE: u8 = 14;

/// The smallest RSA key accepted, bits (RFC 8247 §3.2).
const RSA_MIN_BITS: usize = 2048;

/// A private key to sign AUTH payloads with.
pub struct PrivateKey {
    kind: KeyKind,
    rsa_pss: bool,
}

enum KeyKind {
    EcdsaP256(EcdsaKeyPair),
    EcdsaP384(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
    Rsa(RsaKeyPair),
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            KeyKind::EcdsaP256(_) => "ECDSA P-256",
            KeyKind::EcdsaP384(_) => "ECDSA P-384",
            KeyKind::Ed25519(_) => "Ed25519",
            KeyKind::Rsa(_) => "RSA",
        };
        write!(f, "PrivateKey({kind})")
    }
}

impl PrivateKey {
    /// Reads a key file: PEM ("PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY") or
    /// DER (PKCS#8, SEC 1 or PKCS#1), as `pki --gen` or `openssl genpkey` write them.
    pub fn from_file(path: &Path) -> Result<PrivateKey, CryptoError> {
        let file_err = |reason: String| CryptoError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| file_err(e.to_string()))?;
        Self::from_bytes(&bytes).map_err(|e| file_err(e.to_string()))
    }

    /// A key from PEM or DER bytes (see [`PrivateKey::from_file`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<PrivateKey, CryptoError> {
        if bytes.trim_ascii_start().starts_with(b"-----") {
            let der = PrivateKeyDer::from_pem_slice(bytes)
                .map_err(|e| CryptoError::KeyFormat(format!("no private key in the PEM: {e}")))?;
            return Self::from_der(&der);
        }
        // DER: the three encodings, tried in turn.
        let der = bytes.to_vec();
        Self::from_der(&PrivateKeyDer::Pkcs8(der.clone().into()))
            .or_else(|_| Self::from_der(&PrivateKeyDer::Sec1(der.clone().into())))
            .or_else(|_| Self::from_der(&PrivateKeyDer::Pkcs1(der.into())))
            .map_err(|_| {
                CryptoError::KeyFormat(
                    "not a PEM file, nor a PKCS#8, SEC 1 or PKCS#1 DER key of a supported type"
                        .into(),
                )
            })
    }

    /// A key from its DER, tagged with its encoding.
    fn from_der(der: &PrivateKeyDer<'_>) -> Result<PrivateKey, CryptoError> {
        let unsupported = |what: &str| {
            CryptoError::KeyFormat(format!(
                "{what}: not an ECDSA P-256/P-384, Ed25519 or RSA key that can be read"
            ))
        };
        let kind = match der {
            PrivateKeyDer::Pkcs8(k) => {
                let k = k.secret_pkcs8_der();
                if let Ok(p) = EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_ASN1_SIGNING, k) {
                    KeyKind::EcdsaP256(p)
                } else if let Ok(p) =
                    EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P384_SHA384_ASN1_SIGNING, k)
                {
                    KeyKind::EcdsaP384(p)
                } else if let Ok(p) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(k) {
                    KeyKind::Ed25519(p)
                } else {
                    KeyKind::Rsa(RsaKeyPair::from_pkcs8(k).map_err(|e| rsa_rejected(e, "PKCS#8"))?)
                }
            }
            PrivateKeyDer::Sec1(k) => {
                let k = k.secret_sec1_der();
                if let Ok(p) =
                    EcdsaKeyPair::from_private_key_der(&sig::ECDSA_P256_SHA256_ASN1_SIGNING, k)
                {
                    KeyKind::EcdsaP256(p)
                } else {
                    KeyKind::EcdsaP384(
                        EcdsaKeyPair::from_private_key_der(&sig::ECDSA_P384_SHA384_ASN1_SIGNING, k)
                            .map_err(|_| unsupported("SEC 1 EC key"))?,
                    )
                }
            }
            PrivateKeyDer::Pkcs1(k) => KeyKind::Rsa(
                RsaKeyPair::from_der(k.secret_pkcs1_der())
                    .map_err(|e| rsa_rejected(e, "PKCS#1 RSA key"))?,
            ),
            _ => return Err(unsupported("this key encoding")),
        };
        if let KeyKind::Rsa(k) = &kind {
            let bits = k.public_modulus_len() * 8;
            if bits < RSA_MIN_BITS {
                return Err(CryptoError::KeyTooSmall { bits });
            }
        }
        Ok(PrivateKey {
            kind,
            rsa_pss: false,
        })
    }

    /// RSA keys sign with PSS (SHA-256, MGF1 with SHA-256, 32-byte salt) instead of
    /// PKCS#1 v1.5; no effect on other keys.
    pub fn with_rsa_pss(mut self, pss: bool) -> PrivateKey {
        self.rsa_pss = pss;
        self
    }

    /// Checks that `cert_der` is this key's certificate (its public key is this key's):
    /// signs a test message and verifies it with the certificate's key.
    pub fn check_certificate(&self, cert_der: &[u8]) -> Result<(), CryptoError> {
        let (key, spki) = cert_key(cert_der)?;
        let msg = b"ferrouter: does this key match its certificate?";
        let (alg, signature) = sign(self, msg)?;
        let alg = SigAlg::from_der(&alg).ok_or(CryptoError::SignFailed)?;
        sig::UnparsedPublicKey::new(alg.verifier(key)?, &spki)
            .verify(msg, &signature)
            .map_err(|_| CryptoError::KeyMismatch {
                key: key.name(),
                auth: "this private key".into(),
            })
    }
}

/// Why AWS-LC refused an RSA key (it takes 2048 to 8192 bits).
fn rsa_rejected(e: aws_lc_rs::error::KeyRejected, what: &str) -> CryptoError {
    CryptoError::KeyFormat(match e.description_() {
        "TooSmall" => format!("{what}: the RSA key is too small, at least 2048 bits are needed"),
        "TooLarge" => format!("{what}: the RSA key is too large, at most 8192 bits are taken"),
        d => format!("{what}: not an ECDSA P-256/P-384, Ed25519 or RSA key that can be read ({d})"),
    })
}

/// Signs `signed_octets` ([`super::signed_octets`]) for RFC 7427's Digital Signature
/// method: returns the signature's AlgorithmIdentifier (DER, with its SEQUENCE header)
/// and the signature. [`digital_signature_auth`] puts them together as AUTH data.
pub fn sign(key: &PrivateKey, signed_octets: &[u8]) -> Result<(Vec<u8>, Vec<u8>), CryptoError> {
    let rng = SystemRandom::new();
    let failed = |_| CryptoError::SignFailed;
    Ok(match &key.kind {
        KeyKind::EcdsaP256(k) => (
            SigAlg::EcdsaSha256.der(),
            k.sign(&rng, signed_octets)
                .map_err(failed)?
                .as_ref()
                .to_vec(),
        ),
        KeyKind::EcdsaP384(k) => (
            SigAlg::EcdsaSha384.der(),
            k.sign(&rng, signed_octets)
                .map_err(failed)?
                .as_ref()
                .to_vec(),
        ),
        KeyKind::Ed25519(k) => (
            SigAlg::Ed25519.der(),
            k.sign(signed_octets).as_ref().to_vec(),
        ),
        KeyKind::Rsa(k) => {
            let mut s = vec![0; k.public_modulus_len()];
            let (alg, enc): (_, &'static dyn sig::RsaEncoding) = if key.rsa_pss {
                (SigAlg::RsaPss(Hash::Sha256), &sig::RSA_PSS_SHA256)
            } else {
                (SigAlg::RsaPkcs1(Hash::Sha256), &sig::RSA_PKCS1_SHA256)
            };
            k.sign(enc, &rng, signed_octets, &mut s).map_err(failed)?;
            (alg.der(), s)
        }
    })
}

/// The AUTH payload's Authentication Data for method 14 (RFC 7427 §3): the length of the
/// AlgorithmIdentifier (one byte), the AlgorithmIdentifier, the signature.
pub fn digital_signature_auth(
    key: &PrivateKey,
    signed_octets: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let (alg, s) = sign(key, signed_octets)?;
    let mut out = Vec::with_capacity(1 + alg.len() + s.len());
    // The AlgorithmIdentifiers this module makes are all shorter than 256 bytes.
    out.push(alg.len() as u8);
    out.extend_from_slice(&alg);
    out.extend_from_slice(&s);
    Ok(out)
}

/// Reads a file of certificates: PEM (one or more "CERTIFICATE"s) or one DER
/// certificate. Returns each certificate's DER.
pub fn read_certificates(path: &Path) -> Result<Vec<Vec<u8>>, CryptoError> {
    let file_err = |reason: String| CryptoError::KeyFile {
        path: path.display().to_string(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| file_err(e.to_string()))?;
    if !bytes.trim_ascii_start().starts_with(b"-----") {
        return Ok(vec![bytes]);
    }
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_err("no CERTIFICATE in the PEM file".into()));
    }
    Ok(certs)
}

/// Verifies a peer's AUTH payload made with a certificate's key: the chain
/// (`cert_chain_der[0]` the peer's certificate, then intermediates in any order) must
/// lead to one of `trusted_cas` and be valid at `now` ([`verify_chain`]); then the
/// signature in `auth_data` (the AUTH payload's Authentication Data, `auth_method` its
/// method) must be the certificate key's over `signed_octets` ([`verify_auth`]).
///
/// The error names the check that failed: an untrusted issuer, an expired or not yet
/// valid certificate, a certificate's EKU, a key too small, an unsupported algorithm, a
/// bad signature.
pub fn verify(
    cert_chain_der: &[Vec<u8>],
    trusted_cas: &[Vec<u8>],
    now: SystemTime,
    auth_method: u8,
    auth_data: &[u8],
    signed_octets: &[u8],
) -> Result<(), CryptoError> {
    verify_chain(cert_chain_der, trusted_cas, &[], now)?;
    verify_auth(&cert_chain_der[0], auth_method, auth_data, signed_octets)
}

/// Validates a certificate chain (`cert_chain_der[0]` the peer's certificate, then
/// intermediates in any order) up to one of `trusted_cas` at `now`: the half of
/// [`verify`] whose result a responder may cache per chain (it costs the CA signature
/// checks, some hundred microseconds with ECDSA P-384 CAs).
///
/// `crls`: certificate revocation lists (DER, as `pki --signcrl` writes them), checked
/// for every certificate of the chain; a certificate whose issuer has no CRL in the list
/// passes (CRLs are optional), a CRL past its nextUpdate is still used.
pub fn verify_chain(
    cert_chain_der: &[Vec<u8>],
    trusted_cas: &[Vec<u8>],
    crls: &[Vec<u8>],
    now: SystemTime,
) -> Result<(), CryptoError> {
    let (ee_der, intermediates) = cert_chain_der
        .split_first()
        .ok_or(CryptoError::NoCertificate)?;
    let ee_der = CertificateDer::from(ee_der.as_slice());
    let cas: Vec<CertificateDer<'_>> = trusted_cas
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let anchors = cas
        .iter()
        .enumerate()
        .map(|(i, c)| {
            webpki::anchor_from_trusted_cert(c).map_err(|e| CryptoError::CaParse {
                index: i,
                reason: format!("{e:?}"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let intermediates: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let ee = EndEntityCert::try_from(&ee_der).map_err(|e| CryptoError::CertParse {
        index: 0,
        reason: format!("{e:?}"),
    })?;
    let crls = crls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            webpki::BorrowedCertRevocationList::from_der(c)
                .map(webpki::CertRevocationList::from)
                .map_err(|e| CryptoError::CrlParse {
                    index: i,
                    reason: format!("{e:?}"),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let crl_refs: Vec<&webpki::CertRevocationList<'_>> = crls.iter().collect();
    let revocation = webpki::RevocationOptionsBuilder::new(&crl_refs)
        .ok()
        .map(|b| {
            b.with_depth(webpki::RevocationCheckDepth::Chain)
                .with_status_policy(webpki::UnknownStatusPolicy::Allow)
                .with_expiration_policy(webpki::ExpirationPolicy::Ignore)
                .build()
        });
    let since_epoch = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &anchors,
        &intermediates,
        UnixTime::since_unix_epoch(since_epoch),
        IkeEku,
        revocation,
        None,
    )
    .map_err(chain_error)?;
    Ok(())
}

/// Verifies the AUTH payload's signature (`auth_method`, `auth_data`) over
/// `signed_octets` with the key of `cert_der`, a certificate [`verify_chain`] accepted:
/// the half of [`verify`] done for every AUTH. RSA keys below 2048 bits are refused.
pub fn verify_auth(
    cert_der: &[u8],
    auth_method: u8,
    auth_data: &[u8],
    signed_octets: &[u8],
) -> Result<(), CryptoError> {
    let (key, spki) = cert_key(cert_der)?;
    let (alg, signature): (&'static dyn sig::VerificationAlgorithm, &[u8]) = match auth_method {
        AUTH_RSA if key == KeyType::Rsa => (
            &sig::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
            auth_data,
        ),
        AUTH_ECDSA_256 if key == KeyType::P256 => (&sig::ECDSA_P256_SHA256_FIXED, auth_data),
        AUTH_ECDSA_384 if key == KeyType::P384 => (&sig::ECDSA_P384_SHA384_FIXED, auth_data),
        AUTH_RSA | AUTH_ECDSA_256 | AUTH_ECDSA_384 => {
            return Err(CryptoError::KeyMismatch {
                key: key.name(),
                auth: format!("auth method {auth_method}"),
            })
        }
        AUTH_DIGITAL_SIGNATURE => {
            let (&len, rest) = auth_data.split_first().ok_or(CryptoError::AuthTooShort)?;
            let len = usize::from(len);
            if rest.len() < len {
                return Err(CryptoError::AuthTooShort);
            }
            let (alg_der, signature) = rest.split_at(len);
            let alg = SigAlg::from_der(alg_der)
                .ok_or_else(|| CryptoError::UnsupportedSignature(to_hex(alg_der)))?;
            (alg.verifier(key)?, signature)
        }
        m => return Err(CryptoError::UnsupportedAuth { method: m }),
    };
    sig::UnparsedPublicKey::new(alg, &spki)
        .verify(signed_octets, signature)
        .map_err(|_| CryptoError::BadSignature)
}

/// A certificate's key: its type (RSA keys of fewer than 2048 bits refused) and its
/// SubjectPublicKeyInfo (DER), through webpki's parser.
fn cert_key(cert_der: &[u8]) -> Result<(KeyType, Vec<u8>), CryptoError> {
    let parse_err = |reason: String| CryptoError::CertParse { index: 0, reason };
    let der = CertificateDer::from(cert_der);
    let anchor = webpki::anchor_from_trusted_cert(&der).map_err(|e| parse_err(format!("{e:?}")))?;
    let key = KeyType::of(&anchor.subject_public_key_info)?;
    let spki = webpki::spki_for_anchor(&anchor).as_ref().to_vec();
    if key == KeyType::Rsa {
        let public = aws_lc_rs::rsa::PublicKey::from_der(&spki)
            .map_err(|_| parse_err("its RSA public key cannot be read".into()))?;
        let n = public.modulus();
        let n = n.big_endian_without_leading_zero();
        let bits = n.len() * 8 - n.first().map_or(0, |b| b.leading_zeros() as usize);
        if bits < RSA_MIN_BITS {
            return Err(CryptoError::KeyTooSmall { bits });
        }
    }
    Ok((key, spki))
}

/// The SHA-1 hash of a certificate's SubjectPublicKeyInfo: how a CERTREQ payload names
/// a trusted CA (RFC 7296 §3.7).
pub fn key_sha1(cert_der: &[u8]) -> Result<[u8; 20], CryptoError> {
    let (_, spki) = cert_key(cert_der)?;
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, &spki);
    let mut out = [0u8; 20];
    out.copy_from_slice(d.as_ref());
    Ok(out)
}

/// Lower-case hex, for messages.
fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// ID types (RFC 7296 §3.5) that [`certificate_matches_id`] matches.
const ID_IPV4_ADDR: u8 = 1;
const ID_FQDN: u8 = 2;
const ID_RFC822_ADDR: u8 = 3;
const ID_IPV6_ADDR: u8 = 5;
const ID_DER_ASN1_DN: u8 = 9;

/// The certificate's subject: a DER Name with its SEQUENCE header, the ID data
/// (type ID_DER_ASN1_DN, 9) a side authenticating with it sends by default.
pub fn certificate_subject(cert_der: &[u8]) -> Result<Vec<u8>, CryptoError> {
    let der = CertificateDer::from(cert_der);
    let anchor = webpki::anchor_from_trusted_cert(&der).map_err(|e| CryptoError::CertParse {
        index: 0,
        reason: format!("{e:?}"),
    })?;
    Ok(der_wrap(0x30, &anchor.subject))
}

/// Checks that the certificate is for the peer's identity (RFC 4945 §3.1): an IPv4 or
/// IPv6 address (1, 5) or an FQDN (2) must be one of its subjectAltNames (webpki's
/// matching, wildcards included), an email address (3) one of its rfc822Names
/// ([`email_matches`]), a DN (9) must be its subject, byte for byte. Other types (KEY_ID)
/// are refused as not matched.
pub fn certificate_matches_id(
    cert_der: &[u8],
    id_type: u8,
    id_data: &[u8],
) -> Result<(), CryptoError> {
    let der = CertificateDer::from(cert_der);
    let ee = EndEntityCert::try_from(&der).map_err(|e| CryptoError::CertParse {
        index: 0,
        reason: format!("{e:?}"),
    })?;
    let mismatch = |id: String| CryptoError::IdMismatch { id };
    let ip = |a: std::net::IpAddr| {
        ee.verify_is_valid_for_subject_name(&ServerName::IpAddress(a.into()))
            .map_err(|_| mismatch(a.to_string()))
    };
    match (id_type, id_data.len()) {
        (ID_IPV4_ADDR, 4) => {
            let mut a = [0u8; 4];
            a.copy_from_slice(id_data);
            ip(std::net::Ipv4Addr::from(a).into())
        }
        (ID_IPV6_ADDR, 16) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(id_data);
            ip(std::net::Ipv6Addr::from(a).into())
        }
        (ID_FQDN, _) => {
            let text = String::from_utf8_lossy(id_data).into_owned();
            let name = std::str::from_utf8(id_data)
                .ok()
                .and_then(|s| DnsName::try_from(s).ok())
                .ok_or_else(|| mismatch(format!("{text} (not a DNS name)")))?;
            ee.verify_is_valid_for_subject_name(&ServerName::DnsName(name))
                .map_err(|_| mismatch(text))
        }
        (ID_RFC822_ADDR, _) => email_matches(cert_der, id_data),
        (ID_DER_ASN1_DN, _) => {
            if certificate_subject(cert_der)? == id_data {
                Ok(())
            } else {
                Err(mismatch(format!("DN {}", to_hex(id_data))))
            }
        }
        _ => Err(CryptoError::UnsupportedId { id_type }),
    }
}

/// An email address (ID_RFC822_ADDR) against the certificate's subjectAltName (RFC 4945
/// §3.1): one of its rfc822Names must be the same address, the local part compared
/// exactly and the domain (after the last `@`) without regard to ASCII case (RFC 5280
/// §4.2.1.6, §7.5). The certificate (already parsed by webpki) and its extension are
/// decoded by x509-cert; a subjectAltName that does not decode is an error saying so,
/// one without the address a mismatch listing the addresses it has.
fn email_matches(cert_der: &[u8], id_data: &[u8]) -> Result<(), CryptoError> {
    let parse_err = |reason: String| CryptoError::CertParse { index: 0, reason };
    let cert = x509_cert::Certificate::from_der(cert_der)
        .map_err(|e| parse_err(format!("the certificate cannot be decoded: {e}")))?;
    let san = cert
        .tbs_certificate()
        .get_extension::<SubjectAltName>()
        .map_err(|e| parse_err(format!("its subjectAltName extension cannot be read: {e}")))?;
    let emails: Vec<&str> = san
        .as_ref()
        .map(|(_, SubjectAltName(names))| {
            names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::Rfc822Name(s) => Some(s.as_ref()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    if emails.iter().any(|e| same_email(e.as_bytes(), id_data)) {
        return Ok(());
    }
    let has = if emails.is_empty() {
        "it has no email address in its subjectAltName".to_string()
    } else {
        format!("its email addresses: {}", emails.join(", "))
    };
    Err(CryptoError::IdMismatch {
        id: format!("{} ({has})", String::from_utf8_lossy(id_data)),
    })
}

/// Whether two email addresses are the same: local parts byte for byte, domains (after
/// the last `@`) without regard to ASCII case. Something without `@` is no address.
fn same_email(a: &[u8], b: &[u8]) -> bool {
    fn split(x: &[u8]) -> Option<(&[u8], &[u8])> {
        let mut parts = x.rsplitn(2, |&c| c == b'@');
        let domain = parts.next()?;
        Some((parts.next()?, domain))
    }
    match (split(a), split(b)) {
        (Some((la, da)), Some((lb, db))) => la == lb && da.eq_ignore_ascii_case(db),
        _ => false,
    }
}

/// DER of `tag` and `contents`, with a long-form length where needed.
fn der_wrap(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len();
    let mut v = vec![tag];
    if len < 0x80 {
        v.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        v.push(0x80 | (bytes.len() - skip) as u8);
        v.extend_from_slice(&bytes[skip..]);
    }
    v.extend_from_slice(contents);
    v
}

/// What a chain validation error says, as the check that failed.
fn chain_error(e: webpki::Error) -> CryptoError {
    use webpki::Error as E;
    match e {
        E::UnknownIssuer => CryptoError::UntrustedIssuer,
        E::CertExpired { time, not_after } => CryptoError::CertExpired {
            now: time.as_secs(),
            not_after: not_after.as_secs(),
        },
        E::CertNotValidYet { time, not_before } => CryptoError::CertNotYetValid {
            now: time.as_secs(),
            not_before: not_before.as_secs(),
        },
        E::RequiredEkuNotFoundContext(c) => CryptoError::Eku {
            present: c
                .present
                .iter()
                .map(|oid| {
                    oid.iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(".")
                })
                .collect::<Vec<_>>()
                .join(", "),
        },
        E::CertRevoked => CryptoError::CertRevoked,
        E::InvalidSignatureForPublicKey => {
            CryptoError::CertInvalid("a certificate's signature by its issuer is bad".into())
        }
        e => CryptoError::CertInvalid(format!("{e:?}")),
    }
}

/// The key purposes (EKU) that allow a certificate for IKE.
const IKE_EKUS: [&[u8]; 5] = [
    // id-kp-ipsecIKE 1.3.6.1.5.5.7.3.17
    &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x11],
    // anyExtendedKeyUsage 2.5.29.37.0
    &[0x55, 0x1d, 0x25, 0x00],
    // id-kp-serverAuth 1.3.6.1.5.5.7.3.1
    &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01],
    // id-kp-clientAuth 1.3.6.1.5.5.7.3.2
    &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02],
    // iKEIntermediate 1.3.6.1.5.5.8.2.2
    &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x08, 0x02, 0x02],
];

/// No EKU, or one that allows IKE.
struct IkeEku;

impl ExtendedKeyUsageValidator for IkeEku {
    fn validate(&self, iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let mut present = Vec::new();
        for id in iter {
            let id = id?;
            if IKE_EKUS.iter().any(|oid| KeyPurposeId::new(oid) == id) {
                return Ok(());
            }
            present.push(id.to_decoded_oid());
        }
        if present.is_empty() {
            return Ok(());
        }
        Err(webpki::Error::RequiredEkuNotFoundContext(
            webpki::RequiredEkuNotFoundContext {
                required: webpki::KeyUsage::required(IKE_EKUS[0]),
                present,
            },
        ))
    }
}

/// The type of a certificate's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyType {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl KeyType {
    /// From a SubjectPublicKeyInfo's contents (AlgorithmIdentifier, then the key's BIT
    /// STRING): its AlgorithmIdentifier, compared with the known ones.
    fn of(spki_contents: &[u8]) -> Result<KeyType, CryptoError> {
        let alg = match spki_contents {
            [0x30, len, rest @ ..] if *len < 0x80 => rest.get(..usize::from(*len)),
            _ => None,
        };
        let known = [
            (alg_id::RSA_ENCRYPTION, KeyType::Rsa),
            (alg_id::ECDSA_P256, KeyType::P256),
            (alg_id::ECDSA_P384, KeyType::P384),
            (alg_id::ED25519, KeyType::Ed25519),
        ];
        alg.and_then(|a| {
            known
                .iter()
                .find(|(id, _)| id.as_ref() == a)
                .map(|&(_, k)| k)
        })
        .ok_or(CryptoError::UnsupportedKey)
    }

    fn name(self) -> &'static str {
        match self {
            KeyType::Rsa => "RSA",
            KeyType::P256 => "ECDSA P-256",
            KeyType::P384 => "ECDSA P-384",
            KeyType::Ed25519 => "Ed25519",
        }
    }
}

/// The hashes of RFC 7427's signature algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    /// The last byte of the OIDs that differ by hash: sha*WithRSAEncryption
    /// (1.2.840.113549.1.1.11-13), ecdsa-with-SHA* (1.2.840.10045.4.3.2-4), id-sha*
    /// (2.16.840.1.101.3.4.2.1-3).
    fn index(self) -> u8 {
        match self {
            Hash::Sha256 => 0,
            Hash::Sha384 => 1,
            Hash::Sha512 => 2,
        }
    }

    fn len(self) -> u8 {
        [32, 48, 64][usize::from(self.index())]
    }
}

/// A signature algorithm of RFC 7427's AUTH data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SigAlg {
    RsaPkcs1(Hash),
    /// MGF1 with the same hash, salt of the hash's length.
    RsaPss(Hash),
    EcdsaSha256,
    EcdsaSha384,
    EcdsaSha512,
    Ed25519,
}

const OID_PKCS1: [u8; 8] = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
const OID_ECDSA_SHA2: [u8; 7] = [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];
const OID_SHA2: [u8; 8] = [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02];

/// DER of a SEQUENCE (or other `tag`) of `parts` (short lengths only).
fn tlv(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let body = parts.concat();
    let mut v = vec![tag, body.len() as u8];
    v.extend_from_slice(&body);
    v
}

fn oid(prefix: &[u8], last: u8) -> Vec<u8> {
    tlv(0x06, &[prefix, &[last]])
}

/// AlgorithmIdentifier { id-sha*, NULL or absent }.
fn hash_alg(h: Hash, null: bool) -> Vec<u8> {
    let o = oid(&OID_SHA2, 1 + h.index());
    if null {
        tlv(0x30, &[&o, &[0x05, 0x00]])
    } else {
        tlv(0x30, &[&o])
    }
}

impl SigAlg {
    const ALL: [SigAlg; 9] = [
        SigAlg::RsaPkcs1(Hash::Sha256),
        SigAlg::RsaPkcs1(Hash::Sha384),
        SigAlg::RsaPkcs1(Hash::Sha512),
        SigAlg::RsaPss(Hash::Sha256),
        SigAlg::RsaPss(Hash::Sha384),
        SigAlg::RsaPss(Hash::Sha512),
        SigAlg::EcdsaSha256,
        SigAlg::EcdsaSha384,
        SigAlg::EcdsaSha512,
    ];

    /// The AlgorithmIdentifier this module sends (RFC 7427 Appendix A: NULL parameters
    /// for RSA and the hashes in PSS's, none for ECDSA and Ed25519).
    fn der(self) -> Vec<u8> {
        self.encodings(true)
    }

    /// The encoding with or without the NULL parameters that some implementations omit.
    fn encodings(self, null: bool) -> Vec<u8> {
        match self {
            SigAlg::RsaPkcs1(h) => {
                let o = oid(&OID_PKCS1, 11 + h.index());
                if null {
                    tlv(0x30, &[&o, &[0x05, 0x00]])
                } else {
                    tlv(0x30, &[&o])
                }
            }
            SigAlg::RsaPss(h) => {
                // RSASSA-PSS-params { [0] hash, [1] MGF1(hash), [2] saltLength }.
                let hash = hash_alg(h, null);
                let mgf = tlv(0x30, &[&oid(&OID_PKCS1, 8), &hash]);
                let params = tlv(
                    0x30,
                    &[
                        &tlv(0xa0, &[&hash]),
                        &tlv(0xa1, &[&mgf]),
                        &tlv(0xa2, &[&[0x02, 0x01, h.len()]]),
                    ],
                );
                tlv(0x30, &[&oid(&OID_PKCS1, 10), &params])
            }
            SigAlg::EcdsaSha256 => tlv(0x30, &[&oid(&OID_ECDSA_SHA2, 2)]),
            SigAlg::EcdsaSha384 => tlv(0x30, &[&oid(&OID_ECDSA_SHA2, 3)]),
            SigAlg::EcdsaSha512 => tlv(0x30, &[&oid(&OID_ECDSA_SHA2, 4)]),
            // id-Ed25519 1.3.101.112 (RFC 8420 §2)
            SigAlg::Ed25519 => tlv(0x30, &[&[0x06, 0x03, 0x2b, 0x65, 0x70]]),
        }
    }

    /// The algorithm whose encoding `der` is.
    fn from_der(der: &[u8]) -> Option<SigAlg> {
        SigAlg::ALL
            .into_iter()
            .chain([SigAlg::Ed25519])
            .find(|a| a.encodings(true) == der || a.encodings(false) == der)
    }

    /// aws-lc-rs's verification algorithm of this signature with a key of type `key`.
    fn verifier(
        self,
        key: KeyType,
    ) -> Result<&'static dyn sig::VerificationAlgorithm, CryptoError> {
        Ok(match (self, key) {
            (SigAlg::RsaPkcs1(Hash::Sha256), KeyType::Rsa) => &sig::RSA_PKCS1_2048_8192_SHA256,
            (SigAlg::RsaPkcs1(Hash::Sha384), KeyType::Rsa) => &sig::RSA_PKCS1_2048_8192_SHA384,
            (SigAlg::RsaPkcs1(Hash::Sha512), KeyType::Rsa) => &sig::RSA_PKCS1_2048_8192_SHA512,
            (SigAlg::RsaPss(Hash::Sha256), KeyType::Rsa) => &sig::RSA_PSS_2048_8192_SHA256,
            (SigAlg::RsaPss(Hash::Sha384), KeyType::Rsa) => &sig::RSA_PSS_2048_8192_SHA384,
            (SigAlg::RsaPss(Hash::Sha512), KeyType::Rsa) => &sig::RSA_PSS_2048_8192_SHA512,
            (SigAlg::EcdsaSha256, KeyType::P256) => &sig::ECDSA_P256_SHA256_ASN1,
            (SigAlg::EcdsaSha384, KeyType::P256) => &sig::ECDSA_P256_SHA384_ASN1,
            (SigAlg::EcdsaSha512, KeyType::P256) => &sig::ECDSA_P256_SHA512_ASN1,
            (SigAlg::EcdsaSha256, KeyType::P384) => &sig::ECDSA_P384_SHA256_ASN1,
            (SigAlg::EcdsaSha384, KeyType::P384) => &sig::ECDSA_P384_SHA384_ASN1,
            (SigAlg::EcdsaSha512, KeyType::P384) => &sig::ECDSA_P384_SHA512_ASN1,
            (SigAlg::Ed25519, KeyType::Ed25519) => &sig::ED25519,
            (alg, key) => {
                return Err(CryptoError::KeyMismatch {
                    key: key.name(),
                    auth: format!("{alg:?}"),
                })
            }
        })
    }
}

#[cfg(test)]
mod tests;
