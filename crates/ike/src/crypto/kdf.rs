//! The PRF, prf+ and the keys of IKE and child SAs (RFC 7296 §2.13, §2.14, §2.17, §2.18).

use aws_lc_rs::hmac;
use zeroize::Zeroizing;

use super::CryptoError;
use crate::transform::{Dh, Encr, Integ, Prf};

fn hmac_alg(p: Prf) -> hmac::Algorithm {
    match p {
        Prf::HmacSha256 => hmac::HMAC_SHA256,
        Prf::HmacSha384 => hmac::HMAC_SHA384,
        Prf::HmacSha512 => hmac::HMAC_SHA512,
    }
}

/// prf(key, data): the PRF over the concatenation of `data`'s parts. HMAC takes keys of
/// any length (RFC 2104), so this cannot fail.
pub fn prf(p: Prf, key: &[u8], data: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    let key = hmac::Key::new(hmac_alg(p), key);
    let mut ctx = hmac::Context::with_key(&key);
    for part in data {
        ctx.update(part);
    }
    Zeroizing::new(ctx.sign().as_ref().to_vec())
}

/// prf+(key, seed) of §2.13, `len` bytes: T1 | T2 | ..., where
/// T1 = prf(K, S | 0x01) and Tn = prf(K, Tn-1 | S | n). `seed` is S in parts. At most
/// 255 blocks.
pub fn prf_plus(
    p: Prf,
    key: &[u8],
    seed: &[&[u8]],
    len: usize,
) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
    let block = p.out_len();
    let max = 255 * block;
    if len > max {
        return Err(CryptoError::PrfPlusTooLong { prf: p, len, max });
    }
    let key = hmac::Key::new(hmac_alg(p), key);
    let mut out = Zeroizing::new(Vec::with_capacity(len.div_ceil(block) * block));
    let mut n = 1u8;
    while out.len() < len {
        let mut ctx = hmac::Context::with_key(&key);
        if let Some(prev) = out.len().checked_sub(block) {
            ctx.update(&out[prev..]);
        }
        for part in seed {
            ctx.update(part);
        }
        ctx.update(&[n]);
        out.extend_from_slice(ctx.sign().as_ref());
        n = n.wrapping_add(1);
    }
    out.truncate(len);
    Ok(out)
}

/// The transforms an IKE SA negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IkeSuite {
    /// Encryption of the SK payload.
    pub encr: Encr,
    /// Its integrity transform: `None` with an AEAD, required with AES-CBC.
    pub integ: Option<Integ>,
    /// The PRF.
    pub prf: Prf,
    /// The key-exchange group (not used to derive keys, carried for the caller).
    pub dh: Dh,
}

impl IkeSuite {
    /// Refuses an AEAD with an integrity transform, AES-CBC without one, and key lengths
    /// the ciphers do not have.
    pub fn check(&self) -> Result<(), CryptoError> {
        check_encr(self.encr, self.integ)
    }
}

/// Checks an encryption transform's key length and its pairing with integrity.
pub(super) fn check_encr(encr: Encr, integ: Option<Integ>) -> Result<(), CryptoError> {
    match encr {
        Encr::AesCbc {
            key_bits: 128 | 192 | 256,
        }
        | Encr::AesGcm16 {
            key_bits: 128 | 256,
        }
        | Encr::ChaCha20Poly1305 => {}
        _ => return Err(CryptoError::UnsupportedEncr(encr)),
    }
    if encr.is_aead() == integ.is_some() {
        return Err(CryptoError::IntegMismatch { encr, integ });
    }
    Ok(())
}

/// The seven secrets of an IKE SA (§2.14). SK_ai and SK_ar are empty with an AEAD;
/// SK_ei and SK_er carry the AEAD's 4-byte salt after the key (RFC 5282 §7.1).
pub struct IkeKeys {
    /// Derives child SA keys and the next IKE SA's SKEYSEED.
    pub sk_d: Zeroizing<Vec<u8>>,
    /// Integrity, initiator to responder.
    pub sk_ai: Zeroizing<Vec<u8>>,
    /// Integrity, responder to initiator.
    pub sk_ar: Zeroizing<Vec<u8>>,
    /// Encryption, initiator to responder.
    pub sk_ei: Zeroizing<Vec<u8>>,
    /// Encryption, responder to initiator.
    pub sk_er: Zeroizing<Vec<u8>>,
    /// The initiator's AUTH payload ([`super::signed_octets`]).
    pub sk_pi: Zeroizing<Vec<u8>>,
    /// The responder's AUTH payload.
    pub sk_pr: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for IkeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IkeKeys { .. }")
    }
}

impl IkeKeys {
    /// The keys of a new IKE SA (§2.14): SKEYSEED = prf(Ni | Nr, g^ir) (for the HMAC PRFs
    /// the key is the whole Ni | Nr), then
    /// {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr | SPIi | SPIr).
    pub fn derive(
        s: &IkeSuite,
        g_ir: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<IkeKeys, CryptoError> {
        s.check()?;
        let skeyseed = prf(s.prf, &[ni, nr].concat(), &[g_ir]);
        Self::expand(s, &skeyseed, ni, nr, spi_i, spi_r)
    }

    /// The keys of the IKE SA that rekeys one (§2.18): SKEYSEED = prf(SK_d (old), g^ir (new)
    /// | Ni | Nr) with the old SA's PRF, then prf+ as in [`IkeKeys::derive`] with the new
    /// suite's PRF, nonces and SPIs.
    #[allow(clippy::too_many_arguments)]
    pub fn rekey(
        s: &IkeSuite,
        old_prf: Prf,
        old_sk_d: &[u8],
        g_ir: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<IkeKeys, CryptoError> {
        s.check()?;
        let skeyseed = prf(old_prf, old_sk_d, &[g_ir, ni, nr]);
        Self::expand(s, &skeyseed, ni, nr, spi_i, spi_r)
    }

    fn expand(
        s: &IkeSuite,
        skeyseed: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<IkeKeys, CryptoError> {
        let d = s.prf.out_len();
        let a = s.integ.map_or(0, Integ::key_len);
        let e = s.encr.keymat_len();
        let (spi_i, spi_r) = (spi_i.to_be_bytes(), spi_r.to_be_bytes());
        let km = prf_plus(
            s.prf,
            skeyseed,
            &[ni, nr, &spi_i, &spi_r],
            3 * d + 2 * a + 2 * e,
        )?;
        let mut rest: &[u8] = &km;
        let mut take = |n: usize| {
            let (k, r) = rest.split_at(n);
            rest = r;
            Zeroizing::new(k.to_vec())
        };
        Ok(IkeKeys {
            sk_d: take(d),
            sk_ai: take(a),
            sk_ar: take(a),
            sk_ei: take(e),
            sk_er: take(e),
            sk_pi: take(d),
            sk_pr: take(d),
        })
    }
}

/// The keys of a child SA pair (§2.17). The encryption keys carry the AEAD's 4-byte salt
/// after the key (RFC 4106 §8.1, RFC 7634 §2); the integrity keys are empty with an AEAD
/// (or with `integ` `None`).
pub struct ChildKeys {
    /// Encryption, initiator to responder (the initiator's outbound SA).
    pub encr_i: Zeroizing<Vec<u8>>,
    /// Integrity, initiator to responder.
    pub integ_i: Zeroizing<Vec<u8>>,
    /// Encryption, responder to initiator.
    pub encr_r: Zeroizing<Vec<u8>>,
    /// Integrity, responder to initiator.
    pub integ_r: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for ChildKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChildKeys { .. }")
    }
}

/// Child SA KEYMAT (§2.17): prf+(SK_d, [g^ir (new) |] Ni | Nr), taken in the order
/// initiator-to-responder encryption key, its integrity key, then responder-to-initiator
/// encryption key and integrity key. `g_ir` is the new shared secret of a
/// CREATE_CHILD_SA with PFS (`None` without).
pub fn child_keys(
    prf: Prf,
    sk_d: &[u8],
    g_ir: Option<&[u8]>,
    ni: &[u8],
    nr: &[u8],
    encr: Encr,
    integ: Option<Integ>,
) -> Result<ChildKeys, CryptoError> {
    let e = encr.keymat_len();
    let a = integ.map_or(0, Integ::key_len);
    let km = match g_ir {
        Some(g) => prf_plus(prf, sk_d, &[g, ni, nr], 2 * (e + a))?,
        None => prf_plus(prf, sk_d, &[ni, nr], 2 * (e + a))?,
    };
    let (i, r) = km.split_at(e + a);
    let (encr_i, integ_i) = i.split_at(e);
    let (encr_r, integ_r) = r.split_at(e);
    Ok(ChildKeys {
        encr_i: Zeroizing::new(encr_i.to_vec()),
        integ_i: Zeroizing::new(integ_i.to_vec()),
        encr_r: Zeroizing::new(encr_r.to_vec()),
        integ_r: Zeroizing::new(integ_r.to_vec()),
    })
}

#[cfg(test)]
mod tests;
