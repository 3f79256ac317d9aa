//! The key exchange: a private key and its public value, and the shared secret g^ir with
//! the peer's public value (RFC 7296 §1.2, §3.4).
//!
//! - Groups 19 and 20 (RFC 5903): the KE data is x || y, each coordinate at the field's
//!   length, without SEC 1's 0x04 prefix; the shared secret is the x coordinate (§7).
//!   AWS-LC checks that the peer's point is on the curve (RFC 6989 §2.3).
//! - Group 31 (RFC 8031): X25519; an all-zero shared secret (a low-order peer point) is
//!   refused (RFC 8031 §2.3).
//! - Group 14 (RFC 3526): 2048-bit MODP, through AWS-LC's DH (aws-lc-rs has no
//!   finite-field DH); the peer's value must satisfy 1 < y < p-1 (RFC 6989 §2.2; p is a
//!   safe prime, so no subgroup check is needed), and the shared secret is padded to
//!   256 bytes (§3.4).

use std::ptr::NonNull;

use aws_lc_rs::agreement::{self, UnparsedPublicKey, ECDH_P256, ECDH_P384, X25519};
use aws_lc_sys::{
    BN_bin2bn, BN_bn2bin_padded, BN_free, BN_get_rfc3526_prime_2048, BN_new, BN_set_word,
    DH_check_pub_key, DH_compute_key_padded, DH_free, DH_generate_key, DH_get0_pub_key, DH_new,
    DH_set0_pqg, DH_set_length, ERR_clear_error, BIGNUM, DH, DH_CHECK_PUBKEY_TOO_LARGE,
    DH_CHECK_PUBKEY_TOO_SMALL,
};
use zeroize::Zeroizing;

use super::CryptoError;
use crate::transform::Dh;

/// The bytes of a 2048-bit MODP value.
const MODP2048_LEN: usize = 256;
/// The private exponent's length for group 14: the upper "exponent size" RFC 3526 §8
/// estimates for its 2048-bit group (220 to 320 bits). A full-size exponent would make
/// every exponentiation some six times slower for no strength the group has.
const MODP2048_EXP_BITS: u32 = 320;

/// A key share of one group: the private key, owned (wiped by AWS-LC when dropped), and
/// the public value as the KE payload carries it.
pub struct KeyShare {
    group: Dh,
    public: Vec<u8>,
    private: Private,
}

enum Private {
    Ecdh(agreement::PrivateKey),
    Modp(ModpKey),
}

impl std::fmt::Debug for KeyShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyShare")
            .field("group", &self.group)
            .field("public", &self.public.len())
            .finish_non_exhaustive()
    }
}

impl KeyShare {
    /// A fresh key share of `group`, from AWS-LC's random generator.
    pub fn generate(group: Dh) -> Result<KeyShare, CryptoError> {
        let failed = CryptoError::KeyGeneration { group: group.id() };
        let private = match ecdh_alg(group) {
            Some(alg) => Private::Ecdh(agreement::PrivateKey::generate(alg).map_err(|_| failed)?),
            None => Private::Modp(ModpKey::generate(None).ok_or(failed)?),
        };
        Self::with(group, private)
    }

    /// A key share from a known private key (big-endian scalar for ECP, RFC 7748 bytes for
    /// X25519, the exponent for MODP): the known-answer tests.
    #[cfg(test)]
    pub(crate) fn from_private(group: Dh, private: &[u8]) -> Result<KeyShare, CryptoError> {
        let failed = CryptoError::KeyGeneration { group: group.id() };
        let private = match ecdh_alg(group) {
            Some(alg) => Private::Ecdh(
                agreement::PrivateKey::from_private_key(alg, private).map_err(|_| failed)?,
            ),
            None => Private::Modp(ModpKey::generate(Some(private)).ok_or(failed)?),
        };
        Self::with(group, private)
    }

    fn with(group: Dh, private: Private) -> Result<KeyShare, CryptoError> {
        let failed = CryptoError::KeyGeneration { group: group.id() };
        let public = match &private {
            Private::Ecdh(key) => {
                let public = key.compute_public_key().map_err(|_| failed.clone())?;
                let public = public.as_ref();
                match group {
                    // SEC 1 uncompressed: 0x04 || x || y; IKE sends x || y.
                    Dh::Ecp256 | Dh::Ecp384 => public.get(1..).unwrap_or_default().to_vec(),
                    _ => public.to_vec(),
                }
            }
            Private::Modp(key) => key.public().ok_or(failed.clone())?,
        };
        if public.len() != group.public_len() {
            return Err(failed);
        }
        Ok(KeyShare {
            group,
            public,
            private,
        })
    }

    /// The group.
    pub fn group(&self) -> Dh {
        self.group
    }

    /// The public value, as the KE payload's Key Exchange Data carries it: exactly
    /// `self.group().public_len()` bytes.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret g^ir with the peer's KE data, after RFC 6989's checks of it.
    pub fn agree(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
        let group = self.group.id();
        if peer.len() != self.group.public_len() {
            return Err(CryptoError::KeLength {
                group,
                got: peer.len(),
                expected: self.group.public_len(),
            });
        }
        let invalid = |reason| CryptoError::KeInvalid { group, reason };
        match &self.private {
            Private::Ecdh(key) => {
                let alg = key.algorithm();
                let secret = if alg == &X25519 {
                    agreement::agree(key, UnparsedPublicKey::new(alg, peer), (), |s| {
                        Ok(Zeroizing::new(s.to_vec()))
                    })
                    // AWS-LC's X25519 fails exactly when the result is all zeros.
                    .map_err(|_| invalid("the shared secret is all zeros (a low-order point)"))?
                } else {
                    let mut point = Vec::with_capacity(1 + peer.len());
                    point.push(0x04);
                    point.extend_from_slice(peer);
                    agreement::agree(key, UnparsedPublicKey::new(alg, &point), (), |s| {
                        Ok(Zeroizing::new(s.to_vec()))
                    })
                    .map_err(|_| invalid("the point is not on the curve"))?
                };
                if secret.iter().all(|&b| b == 0) {
                    return Err(invalid(
                        "the shared secret is all zeros (a low-order point)",
                    ));
                }
                Ok(secret)
            }
            Private::Modp(key) => key.agree(peer).map_err(invalid),
        }
    }
}

/// aws-lc-rs's algorithm of an elliptic-curve group; `None` for MODP.
fn ecdh_alg(group: Dh) -> Option<&'static agreement::Algorithm> {
    match group {
        Dh::Ecp256 => Some(&ECDH_P256),
        Dh::Ecp384 => Some(&ECDH_P384),
        Dh::Curve25519 => Some(&X25519),
        Dh::Modp2048 => None,
    }
}

/// A group 14 key: AWS-LC's `DH` with p, g = 2 and the key pair.
struct ModpKey(NonNull<DH>);

// SAFETY: a `DH` has no thread affinity; it is freed once, by `Drop`.
unsafe impl Send for ModpKey {}
// SAFETY: `&self` uses are `DH_get0_pub_key` (a read) and `DH_compute_key_padded`, which
// only reads the key and sets up the Montgomery context under the DH's own lock
// (`BN_MONT_CTX_set_locked`); it is already set by `DH_generate_key` anyway.
unsafe impl Sync for ModpKey {}

impl Drop for ModpKey {
    fn drop(&mut self) {
        // SAFETY: the pointer came from DH_new and is freed only here. DH_free clears the
        // private key (BN_clear_free).
        unsafe { DH_free(self.0.as_ptr()) }
    }
}

/// A BIGNUM freed when dropped (public values only: not cleared).
struct Bn(NonNull<BIGNUM>);

impl Drop for Bn {
    fn drop(&mut self) {
        // SAFETY: an owned BIGNUM from BN_new/BN_bin2bn/BN_get_rfc3526_prime_2048.
        unsafe { BN_free(self.0.as_ptr()) }
    }
}

impl Bn {
    /// Gives the BIGNUM to a function that takes ownership.
    fn into_raw(self) -> *mut BIGNUM {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl ModpKey {
    /// A key pair with a random private exponent, or the given one (tests).
    fn generate(private: Option<&[u8]>) -> Option<ModpKey> {
        // SAFETY: DH_new returns an owned DH or null.
        let key = ModpKey(NonNull::new(unsafe { DH_new() })?);
        // SAFETY: BN_get_rfc3526_prime_2048(null) and BN_new return owned BIGNUMs or null.
        let p = Bn(NonNull::new(unsafe {
            BN_get_rfc3526_prime_2048(std::ptr::null_mut())
        })?);
        // SAFETY: as above.
        let g = Bn(NonNull::new(unsafe { BN_new() })?);
        // SAFETY: g is a valid BIGNUM.
        if unsafe { BN_set_word(g.0.as_ptr(), 2) } != 1 {
            return None;
        }
        // SAFETY: the DH is valid; on success it takes ownership of p and g (q stays null:
        // p is a safe prime).
        let (p, g) = (p.into_raw(), g.into_raw());
        if unsafe { DH_set0_pqg(key.0.as_ptr(), p, std::ptr::null_mut(), g) } != 1 {
            // SAFETY: not taken on failure: ours to free.
            unsafe {
                BN_free(p);
                BN_free(g);
            }
            return None;
        }
        match private {
            None => {
                // SAFETY: a valid DH.
                unsafe { DH_set_length(key.0.as_ptr(), MODP2048_EXP_BITS) };
            }
            Some(x) => {
                // SAFETY: x is valid for x.len() bytes; the result is an owned BIGNUM.
                let x = Bn(NonNull::new(unsafe {
                    BN_bin2bn(x.as_ptr(), x.len(), std::ptr::null_mut())
                })?);
                // SAFETY: the DH takes ownership of x (DH_set0_key always succeeds).
                unsafe {
                    aws_lc_sys::DH_set0_key(key.0.as_ptr(), std::ptr::null_mut(), x.into_raw())
                };
            }
        }
        // SAFETY: a DH with p and g (and maybe the private key, whose public value it then
        // computes).
        if unsafe { DH_generate_key(key.0.as_ptr()) } != 1 {
            // SAFETY: clears this thread's AWS-LC error queue.
            unsafe { ERR_clear_error() };
            return None;
        }
        Some(key)
    }

    /// The public value, padded to 256 bytes.
    fn public(&self) -> Option<Vec<u8>> {
        // SAFETY: a valid DH; the returned pointer is borrowed from it.
        let y = unsafe { DH_get0_pub_key(self.0.as_ptr()) };
        if y.is_null() {
            return None;
        }
        let mut out = vec![0; MODP2048_LEN];
        // SAFETY: out is valid for its length; y is a valid BIGNUM.
        (unsafe { BN_bn2bin_padded(out.as_mut_ptr(), out.len(), y) } == 1).then_some(out)
    }

    /// g^ir with the peer's 256-byte value, padded to 256 bytes.
    fn agree(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, &'static str> {
        // SAFETY: peer is valid for its length; the result is an owned BIGNUM or null.
        let y =
            Bn(
                NonNull::new(unsafe { BN_bin2bn(peer.as_ptr(), peer.len(), std::ptr::null_mut()) })
                    .ok_or("AWS-LC could not read it (out of memory)")?,
            );
        let mut flags = 0;
        // SAFETY: a valid DH and BIGNUM; flags is a valid int.
        if unsafe { DH_check_pub_key(self.0.as_ptr(), y.0.as_ptr(), &mut flags) } != 1 {
            // SAFETY: clears this thread's AWS-LC error queue.
            unsafe { ERR_clear_error() };
            return Err("AWS-LC could not check it");
        }
        if flags & DH_CHECK_PUBKEY_TOO_SMALL != 0 {
            return Err("it is 0 or 1 (RFC 6989: 1 < y < p-1)");
        }
        if flags & DH_CHECK_PUBKEY_TOO_LARGE != 0 {
            return Err("it is p-1 or more (RFC 6989: 1 < y < p-1)");
        }
        let mut secret = Zeroizing::new(vec![0; MODP2048_LEN]);
        // SAFETY: secret has DH_size (256) bytes; the DH has its private key.
        let n =
            unsafe { DH_compute_key_padded(secret.as_mut_ptr(), y.0.as_ptr(), self.0.as_ptr()) };
        if n != MODP2048_LEN as i32 {
            // SAFETY: clears this thread's AWS-LC error queue.
            unsafe { ERR_clear_error() };
            return Err("the shared secret is degenerate (1 or p-1)");
        }
        Ok(secret)
    }
}

#[cfg(test)]
mod tests;
