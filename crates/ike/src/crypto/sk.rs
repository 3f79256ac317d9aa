//! The Encrypted payload (SK, RFC 7296 §3.14) and the Encrypted Fragment payload (SKF,
//! RFC 7383 §2.5), sealed and opened in the message.
//!
//! - AES-GCM-16 and ChaCha20-Poly1305 (RFC 5282, RFC 7634): an 8-byte explicit IV, the
//!   nonce salt | IV, the AAD the message from the IKE header through the payload's own
//!   header, and a 16-byte tag. The content is padded with no padding (a stream cipher),
//!   so the plaintext is the inner payloads and a Pad Length byte of 0.
//! - AES-CBC with HMAC (RFC 3602, §3.14): a random 16-byte IV, zero padding to the block,
//!   the Pad Length byte, and the HMAC of the message from the IKE header through the
//!   ciphertext, truncated, as ICV (checked, in constant time, before decrypting).

use aws_lc_rs::aead::{
    self, Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
};
use aws_lc_rs::cipher::{
    DecryptingKey, DecryptionContext, EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128,
    AES_192, AES_256,
};
use aws_lc_rs::{constant_time, hmac, iv::FixedLength};
use zeroize::Zeroizing;

use super::kdf::check_encr;
use super::{random_bytes, CryptoError};
use crate::transform::{Encr, Integ};

/// The IKE header's length; its Length field is at offset 24.
const IKE_HDR: usize = 28;
const LENGTH_AT: usize = 24;
const AEAD_IV: usize = 8;
const AEAD_TAG: usize = 16;
const AES_BLOCK: usize = 16;

/// One direction's SK payload cipher: SK_ei with SK_ai, or SK_er with SK_ar.
///
/// It keeps the keys as bytes (56 bytes with an AEAD; AES-CBC's SK_a, up to 64 bytes,
/// on the heap) and schedules them for each message: an IKE SA is held for hours by the
/// million, and sends a message in minutes.
/// One `SkCipher` seals with a given key: the AEAD IV is its counter, so two sealing
/// `SkCipher`s of the same key would reuse IVs.
pub struct SkCipher {
    encr: Encr,
    /// SK_e: the key, then the AEAD's 4-byte salt.
    sk_e: Zeroizing<[u8; 36]>,
    /// AES-CBC's integrity transform and SK_a; boxed, so that the AEADs (the usual
    /// suites) do not carry its room (issue 27: two of these in every IKE SA).
    cbc: Option<Box<CbcMac>>,
    /// The next AEAD IV.
    next_iv: u64,
}

/// The integrity half of an AES-CBC [`SkCipher`].
struct CbcMac {
    integ: Integ,
    /// SK_a, `integ.key_len()` bytes used.
    sk_a: Zeroizing<[u8; 64]>,
}

impl std::fmt::Debug for SkCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkCipher")
            .field("encr", &self.encr)
            .field("integ", &self.integ())
            .finish_non_exhaustive()
    }
}

impl SkCipher {
    /// A cipher of `encr` keyed with `sk_e` (the key and, for an AEAD, its salt:
    /// `encr.keymat_len()` bytes) and, for AES-CBC, `integ` keyed with `sk_a`
    /// (`integ.key_len()` bytes; empty with an AEAD).
    pub fn new(
        encr: Encr,
        integ: Option<Integ>,
        sk_e: &[u8],
        sk_a: &[u8],
    ) -> Result<SkCipher, CryptoError> {
        check_encr(encr, integ)?;
        let key_len = |what, got, expected, alg: String| {
            if got == expected {
                Ok(())
            } else {
                Err(CryptoError::KeyLength {
                    what,
                    got,
                    expected,
                    alg,
                })
            }
        };
        key_len("SK_e", sk_e.len(), encr.keymat_len(), format!("{encr:?}"))?;
        let a_len = integ.map_or(0, Integ::key_len);
        key_len("SK_a", sk_a.len(), a_len, format!("{integ:?}"))?;
        let mut c = SkCipher {
            encr,
            sk_e: Zeroizing::new([0; 36]),
            cbc: None,
            next_iv: 0,
        };
        c.sk_e[..sk_e.len()].copy_from_slice(sk_e);
        if let Some(integ) = integ {
            let mut mac = Box::new(CbcMac {
                integ,
                sk_a: Zeroizing::new([0; 64]),
            });
            mac.sk_a[..sk_a.len()].copy_from_slice(sk_a);
            c.cbc = Some(mac);
        }
        Ok(c)
    }

    /// The integrity transform (AES-CBC), `None` with an AEAD.
    fn integ(&self) -> Option<Integ> {
        self.cbc.as_ref().map(|m| m.integ)
    }

    /// What sealing adds to `plain_len` bytes of inner payloads: IV, padding, the Pad
    /// Length byte and the ICV (to size fragments, RFC 7383 §2.5.1).
    pub fn overhead(&self, plain_len: usize) -> usize {
        match self.integ() {
            None => AEAD_IV + 1 + AEAD_TAG,
            Some(integ) => AES_BLOCK + cbc_pad(plain_len) + 1 + integ.icv_len(),
        }
    }

    fn iv_len(&self) -> usize {
        if self.integ().is_some() {
            AES_BLOCK
        } else {
            AEAD_IV
        }
    }

    fn icv_len(&self) -> usize {
        self.integ().map_or(AEAD_TAG, Integ::icv_len)
    }

    /// Encrypts in place. `msg` is the IKE message: the 28-byte header, payloads, at `at`
    /// the SK (`hdr_len` 4) or SKF (`hdr_len` 8) payload's header with its Next Payload
    /// (and SKF's fragment numbers) set, then the plaintext inner payloads up to
    /// `msg.len()`. Inserts the IV, pads, encrypts, appends the ICV, and sets the
    /// payload's Payload Length and the IKE header's Length (both covered by the ICV).
    pub fn seal(
        &mut self,
        msg: &mut Vec<u8>,
        at: usize,
        hdr_len: usize,
    ) -> Result<(), CryptoError> {
        let start = check_offset(msg.len(), at, hdr_len)?;
        let plain_len = msg.len() - start;
        let overhead = self.overhead(plain_len);
        let sk_len = hdr_len + plain_len + overhead;
        let total = msg.len() + overhead;
        let sk_len16 = u16::try_from(sk_len).map_err(|_| CryptoError::SkTooLong { len: sk_len })?;
        // A message of one payload of at most 64 KiB after the header: fits 32 bits unless
        // `at` is absurd.
        let total32 = u32::try_from(total).map_err(|_| CryptoError::SkTooLong { len: total })?;
        let mut iv = [0u8; AES_BLOCK];
        let iv = match self.integ() {
            None => {
                let n = self.next_iv;
                self.next_iv = n.checked_add(1).ok_or(CryptoError::IvExhausted)?;
                iv[..AEAD_IV].copy_from_slice(&n.to_be_bytes());
                &iv[..AEAD_IV]
            }
            Some(_) => {
                random_bytes(&mut iv)?;
                &iv[..]
            }
        };
        msg.reserve(overhead);
        msg.splice(start..start, iv.iter().copied());
        let pad = if self.integ().is_some() {
            cbc_pad(plain_len)
        } else {
            0
        };
        msg.resize(msg.len() + pad, 0);
        // pad < 16.
        msg.push(pad as u8);
        msg[at + 2..at + 4].copy_from_slice(&sk_len16.to_be_bytes());
        msg[LENGTH_AT..IKE_HDR].copy_from_slice(&total32.to_be_bytes());
        let data_at = start + iv.len();
        match self.integ() {
            None => {
                let (head, data) = msg.split_at_mut(data_at);
                let (aad, iv) = head.split_at(start);
                let tag = self
                    .aead_key()?
                    .seal_in_place_separate_tag(self.nonce(iv), Aad::from(aad), data)
                    .map_err(|_| CryptoError::Internal("AEAD seal"))?;
                msg.extend_from_slice(tag.as_ref());
            }
            Some(integ) => {
                let mut block = [0u8; AES_BLOCK];
                block.copy_from_slice(&msg[start..data_at]);
                EncryptingKey::cbc(self.cbc_key()?)
                    .map_err(|_| CryptoError::Internal("AES-CBC key"))?
                    .less_safe_encrypt(
                        &mut msg[data_at..],
                        EncryptionContext::Iv128(FixedLength::from(block)),
                    )
                    .map_err(|_| CryptoError::Internal("AES-CBC encrypt"))?;
                let icv = self.mac(integ, msg);
                msg.extend_from_slice(icv.as_ref().get(..integ.icv_len()).unwrap_or_default());
            }
        }
        debug_assert_eq!(msg.len(), total);
        Ok(())
    }

    /// Checks the ICV and decrypts the SK (`hdr_len` 4) or SKF (`hdr_len` 8) payload at
    /// `at` of the IKE message `msg`, which it must end (its Payload Length is checked
    /// against that). Returns the inner payloads, padding removed.
    pub fn open(
        &self,
        msg: &[u8],
        at: usize,
        hdr_len: usize,
    ) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
        let start = check_offset(msg.len(), at, hdr_len)?;
        let field = usize::from(u16::from_be_bytes([msg[at + 2], msg[at + 3]]));
        let actual = msg.len() - at;
        if field != actual {
            return Err(CryptoError::SkLength { field, actual });
        }
        let (iv_len, icv_len) = (self.iv_len(), self.icv_len());
        let min_data = if self.integ().is_some() { AES_BLOCK } else { 1 };
        let min = hdr_len + iv_len + min_data + icv_len;
        if actual < min {
            return Err(CryptoError::SkTooShort { len: actual, min });
        }
        let data_at = start + iv_len;
        let icv_at = msg.len() - icv_len;
        let iv = &msg[start..data_at];
        let mut data = Zeroizing::new(msg[data_at..icv_at].to_vec());
        match self.integ() {
            None => {
                let tag = &msg[icv_at..];
                self.aead_key()?
                    .open_separate_gather(
                        self.nonce(iv),
                        Aad::from(&msg[..start]),
                        &msg[data_at..icv_at],
                        tag,
                        &mut data,
                    )
                    .map_err(|_| CryptoError::Integrity)?;
            }
            Some(integ) => {
                let icv = self.mac(integ, &msg[..icv_at]);
                let ours = icv.as_ref().get(..icv_len).ok_or(CryptoError::Integrity)?;
                constant_time::verify_slices_are_equal(ours, &msg[icv_at..])
                    .map_err(|_| CryptoError::Integrity)?;
                if !data.len().is_multiple_of(AES_BLOCK) {
                    return Err(CryptoError::SkBlock { len: data.len() });
                }
                let mut block = [0u8; AES_BLOCK];
                block.copy_from_slice(iv);
                DecryptingKey::cbc(self.cbc_key()?)
                    .map_err(|_| CryptoError::Internal("AES-CBC key"))?
                    .decrypt(
                        &mut data,
                        DecryptionContext::Iv128(FixedLength::from(block)),
                    )
                    .map_err(|_| CryptoError::Internal("AES-CBC decrypt"))?;
            }
        }
        let len = data.len();
        let pad_len = data.last().copied().unwrap_or(0);
        if usize::from(pad_len) + 1 > len {
            return Err(CryptoError::BadPadding { pad_len, len });
        }
        data.truncate(len - usize::from(pad_len) - 1);
        Ok(data)
    }

    /// The AEAD key, scheduled for this message.
    fn aead_key(&self) -> Result<LessSafeKey, CryptoError> {
        let (alg, len): (&'static aead::Algorithm, usize) = match self.encr {
            Encr::AesGcm16 { key_bits: 128 } => (&AES_128_GCM, 16),
            Encr::AesGcm16 { .. } => (&AES_256_GCM, 32),
            _ => (&CHACHA20_POLY1305, 32),
        };
        let key = UnboundKey::new(alg, &self.sk_e[..len])
            .map_err(|_| CryptoError::Internal("AEAD key"))?;
        Ok(LessSafeKey::new(key))
    }

    /// salt | IV.
    fn nonce(&self, iv: &[u8]) -> Nonce {
        let key_len = self.encr.keymat_len() - 4;
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&self.sk_e[key_len..key_len + 4]);
        n[4..].copy_from_slice(iv);
        Nonce::assume_unique_for_key(n)
    }

    /// The AES key of AES-CBC.
    fn cbc_key(&self) -> Result<UnboundCipherKey, CryptoError> {
        let (alg, len) = match self.encr {
            Encr::AesCbc { key_bits: 128 } => (&AES_128, 16),
            Encr::AesCbc { key_bits: 192 } => (&AES_192, 24),
            _ => (&AES_256, 32),
        };
        UnboundCipherKey::new(alg, &self.sk_e[..len]).map_err(|_| CryptoError::Internal("AES key"))
    }

    /// The full HMAC of `data` (truncated by the caller).
    fn mac(&self, integ: Integ, data: &[u8]) -> hmac::Tag {
        let alg = match integ {
            Integ::HmacSha1_96 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Integ::HmacSha256_128 => hmac::HMAC_SHA256,
            Integ::HmacSha384_192 => hmac::HMAC_SHA384,
            Integ::HmacSha512_256 => hmac::HMAC_SHA512,
        };
        let key = self
            .cbc
            .as_ref()
            .map_or(&[][..], |m| &m.sk_a[..integ.key_len()]);
        hmac::sign(&hmac::Key::new(alg, key), data)
    }
}

/// CBC padding so that content and Pad Length byte fill whole blocks.
fn cbc_pad(plain_len: usize) -> usize {
    (AES_BLOCK - (plain_len + 1) % AES_BLOCK) % AES_BLOCK
}

/// Checks that the payload header at `at` fits after the IKE header; returns where the
/// payload's content starts.
fn check_offset(len: usize, at: usize, hdr_len: usize) -> Result<usize, CryptoError> {
    let bad = CryptoError::SkOffset { at, hdr_len, len };
    if at < IKE_HDR || hdr_len < 4 {
        return Err(bad);
    }
    at.checked_add(hdr_len).filter(|&s| s <= len).ok_or(bad)
}

#[cfg(test)]
mod tests;
