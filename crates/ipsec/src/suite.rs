//! The cipher and integrity transforms of an SA, keyed once with aws-lc-rs: sealing and
//! opening an ESP packet in place (header, IV, payload with its trailer, ICV).
//!
//! * AES-GCM (RFC 4106) and ChaCha20-Poly1305 (RFC 7634): the nonce is the 4-byte salt
//!   and the 8-byte explicit IV, which is the 64-bit sequence number (unique per SA, as the
//!   SA refuses to wrap it); the AAD is SPI and sequence number, with the high 32 bits in
//!   between when ESN is on (RFC 4106 §5).
//! * AES-CBC with HMAC, encrypt-then-MAC: the ICV is the truncated HMAC of the ESP header,
//!   IV and ciphertext, followed by the high 32 bits of the sequence number with ESN
//!   (RFC 4303 §2.2.1, not sent). The IV is the sequence number encrypted with a second
//!   AES key drawn at random when the SA is created: unpredictable, as CBC needs
//!   (RFC 3602 §2.3), without a random draw per packet.
//! * NULL encryption (RFC 2410), with an HMAC or, for tests, with none.

use aws_lc_rs::cipher::{
    DecryptingKey, DecryptionContext, EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128,
    AES_256,
};
use aws_lc_rs::{constant_time, hmac, iv::FixedLength};
use aws_lc_sys::{
    EVP_AEAD_CTX_cleanup, EVP_AEAD_CTX_init, EVP_AEAD_CTX_open_gather, EVP_AEAD_CTX_seal_scatter,
    EVP_AEAD_CTX_zero, EVP_aead_aes_128_gcm, EVP_aead_aes_256_gcm, EVP_aead_chacha20_poly1305,
    EVP_AEAD, EVP_AEAD_CTX,
};
use zeroize::Zeroize;

use crate::error::{EspError, SaError};
use crate::sa::{Direction, Encryption, Integrity};

/// ESP header: SPI and the low 32 bits of the sequence number.
pub(crate) const ESP_HDR: usize = 8;
/// AEAD explicit IV and ICV.
const AEAD_IV: usize = 8;
const AEAD_ICV: usize = 16;
const CBC_BLOCK: usize = 16;

/// The cipher of an SA.
pub(crate) enum Cipher {
    /// GCM or ChaCha20-Poly1305: keyed in [`Transform`]'s inline context.
    Aead,
    /// AES-CBC, outbound: the data key and the IV key (boxed: an AES key schedule is
    /// about 500 bytes, which AEAD SAs should not pay for).
    CbcOut(Box<CbcOut>),
    /// AES-CBC, inbound.
    CbcIn(Box<DecryptingKey>),
    /// NULL encryption.
    Null,
}

/// The keys of an outbound AES-CBC SA.
pub(crate) struct CbcOut {
    key: EncryptingKey,
    iv_key: EncryptingKey,
}

/// The integrity algorithm of a non-AEAD SA.
pub(crate) struct Mac {
    key: hmac::Key,
    icv: usize,
}

/// An SA's transform: the cipher, the MAC, the AEAD salt and the AEAD context (AWS-LC's
/// `EVP_AEAD_CTX`, whose state holds the key schedule and GHASH table: 568 bytes). The
/// context is inline, not behind a pointer as aws-lc-rs's `LessSafeKey` keeps it: one SA
/// is one contiguous run of lines, which [`crate::Sa::prefetch`] brings in ahead of its
/// packet. Not padded to a line (issue 27: two SAs a tunnel, a million tunnels).
#[repr(C)]
pub(crate) struct Transform {
    pub(crate) cipher: Cipher,
    pub(crate) mac: Option<Box<Mac>>,
    /// The AEADs' salt (RFC 4106 §4, RFC 7634 §2): the nonce's first 4 bytes.
    salt: [u8; 4],
    /// The AEAD context (AES-GCM, ChaCha20-Poly1305), initialised by `EVP_AEAD_CTX_init`;
    /// zeroed (no AEAD: `aead` null) for the other ciphers. Reached only through AWS-LC's
    /// functions, with `&self.ctx` or `&mut self.ctx`: the Rust side never reads its state.
    ctx: EVP_AEAD_CTX,
}

// SAFETY: the context's pointers are AWS-LC's static AEAD description and, for no AEAD
// used here, a heap state (AES-GCM and ChaCha20-Poly1305 keep theirs inline); after
// `EVP_AEAD_CTX_init` AWS-LC only reads the context (seal and open take it `const`), and
// supports that from several threads at once, as aws-lc-rs's `LessSafeKey` (Send + Sync)
// relies on. Changing it (cleanup in Drop) takes `&mut self`.
unsafe impl Send for Transform {}
// SAFETY: as for Send.
unsafe impl Sync for Transform {}

impl Drop for Transform {
    fn drop(&mut self) {
        // The CBC and HMAC key schedules zeroize themselves (aws-lc-rs: SymmetricCipherKey's
        // Drop, HMAC_CTX_cleanup). The AEAD context is ours: cleaned up, then wiped.
        // SAFETY: `ctx` was zeroed or initialised by EVP_AEAD_CTX_init (see `new`) and is
        // cleaned up once, here; cleanup of a zeroed context (null `aead`) does nothing.
        unsafe { EVP_AEAD_CTX_cleanup(&mut self.ctx) };
        // SAFETY: `EVP_AEAD_CTX` is plain data (a pointer, a union of bytes, two bytes),
        // for which all zeroes is a valid value (EVP_AEAD_CTX_zero's); we own it
        // exclusively, and nothing uses it after this.
        unsafe { zeroize::zeroize_flat_type(&mut self.ctx) };
        self.salt.zeroize();
    }
}

fn key_len(what: &'static str, alg: &'static str, key: &[u8], n: usize) -> Result<(), SaError> {
    if key.len() == n {
        Ok(())
    } else {
        Err(SaError::KeyLength {
            what,
            alg,
            expected: n,
            got: key.len(),
        })
    }
}

impl Transform {
    /// Keys the transform. `enc_key` is the keying material as IKEv2 gives it: for the
    /// AEADs the key followed by the 4-byte salt (RFC 4106 §8.1, RFC 7634 §4).
    pub(crate) fn new(
        enc: Encryption,
        integ: Integrity,
        enc_key: &[u8],
        auth_key: &[u8],
        dir: Direction,
    ) -> Result<Transform, SaError> {
        let name = enc.name();
        let mut aead = None;
        let cipher = match enc {
            Encryption::AesGcm128 | Encryption::AesGcm256 | Encryption::ChaCha20Poly1305 => {
                if integ != Integrity::None {
                    return Err(SaError::AeadWithIntegrity(name));
                }
                // SAFETY: these return pointers to AWS-LC's static AEAD descriptions.
                let (alg, n): (*const EVP_AEAD, usize) = unsafe {
                    match enc {
                        Encryption::AesGcm128 => (EVP_aead_aes_128_gcm(), 16),
                        Encryption::AesGcm256 => (EVP_aead_aes_256_gcm(), 32),
                        _ => (EVP_aead_chacha20_poly1305(), 32),
                    }
                };
                key_len("encryption", name, enc_key, n + 4)?;
                let (k, s) = enc_key.split_at(n);
                aead = Some((alg, k, s));
                Cipher::Aead
            }
            Encryption::AesCbc128 | Encryption::AesCbc256 => {
                if integ == Integrity::None {
                    return Err(SaError::CbcWithoutIntegrity(name));
                }
                let (alg, n) = if enc == Encryption::AesCbc128 {
                    (&AES_128, 16)
                } else {
                    (&AES_256, 32)
                };
                key_len("encryption", name, enc_key, n)?;
                let unbound = |k: &[u8]| {
                    UnboundCipherKey::new(alg, k).map_err(|_| SaError::Crypto("AES key"))
                };
                match dir {
                    Direction::Outbound => {
                        let mut r = [0u8; 32];
                        aws_lc_rs::rand::fill(&mut r[..n])
                            .map_err(|_| SaError::Crypto("random IV key"))?;
                        let iv_key = EncryptingKey::ecb(unbound(&r[..n])?);
                        r.zeroize();
                        Cipher::CbcOut(Box::new(CbcOut {
                            key: EncryptingKey::cbc(unbound(enc_key)?)
                                .map_err(|_| SaError::Crypto("AES-CBC key"))?,
                            iv_key: iv_key.map_err(|_| SaError::Crypto("AES key"))?,
                        }))
                    }
                    Direction::Inbound => Cipher::CbcIn(Box::new(
                        DecryptingKey::cbc(unbound(enc_key)?)
                            .map_err(|_| SaError::Crypto("AES-CBC key"))?,
                    )),
                }
            }
            Encryption::Null => {
                key_len("encryption", name, enc_key, 0)?;
                Cipher::Null
            }
        };
        let mac = match integ {
            Integrity::None => {
                key_len("integrity", integ.name(), auth_key, 0)?;
                None
            }
            _ => {
                let (alg, n, icv) = match integ {
                    Integrity::HmacSha1_96 => (hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, 20, 12),
                    Integrity::HmacSha256_128 => (hmac::HMAC_SHA256, 32, 16),
                    _ => (hmac::HMAC_SHA512, 64, 32),
                };
                key_len("integrity", integ.name(), auth_key, n)?;
                Some(Box::new(Mac {
                    key: hmac::Key::new(alg, auth_key),
                    icv,
                }))
            }
        };
        let mut t = Transform {
            cipher,
            mac,
            salt: [0; 4],
            // SAFETY: all zeroes is a valid EVP_AEAD_CTX (a null `aead`, zero bytes).
            ctx: unsafe { std::mem::zeroed() },
        };
        // SAFETY: `t.ctx` is a valid, exclusively borrowed context.
        unsafe { EVP_AEAD_CTX_zero(&mut t.ctx) };
        if let Some((alg, k, s)) = aead {
            t.salt.copy_from_slice(s);
            // SAFETY: `alg` is AWS-LC's static description of an AEAD; `k` is valid for
            // `k.len()` bytes, which AWS-LC checks against the AEAD's key length; the
            // context is zeroed and ours. AES-GCM and ChaCha20-Poly1305 keep their whole
            // state inside the context (AWS-LC copies them with memcpy,
            // `aead_ctx_copy_state_trivial`), so it may move with the Transform.
            let ok = unsafe {
                EVP_AEAD_CTX_init(
                    &mut t.ctx,
                    alg,
                    k.as_ptr(),
                    k.len(),
                    AEAD_ICV,
                    std::ptr::null_mut(),
                )
            };
            if ok != 1 {
                return Err(SaError::Crypto("AEAD key"));
            }
        }
        Ok(t)
    }

    /// Bytes of IV after the ESP header.
    pub(crate) fn iv_len(&self) -> usize {
        match self.cipher {
            Cipher::Aead => AEAD_IV,
            Cipher::CbcOut(_) | Cipher::CbcIn(_) => CBC_BLOCK,
            Cipher::Null => 0,
        }
    }

    /// Bytes of ICV at the end.
    pub(crate) fn icv_len(&self) -> usize {
        match (&self.cipher, &self.mac) {
            (Cipher::Aead, _) => AEAD_ICV,
            (_, Some(m)) => m.icv,
            (_, None) => 0,
        }
    }

    /// What payload plus trailer is padded to: the block size, at least 4 (RFC 4303 §2.4).
    pub(crate) fn align(&self) -> usize {
        match self.cipher {
            Cipher::CbcOut(_) | Cipher::CbcIn(_) => CBC_BLOCK,
            _ => 4,
        }
    }

    /// Encrypts and authenticates `esp` in place: the ESP header is written, the IV and
    /// ICV are written here, the plaintext (payload, padding, pad length, next header)
    /// lies between them. `esp.len()` must be header + IV + plaintext + ICV.
    pub(crate) fn seal(&self, seq: u64, esn: bool, esp: &mut [u8]) -> Result<(), EspError> {
        let iv_len = self.iv_len();
        let icv_len = self.icv_len();
        let icv_at = esp
            .len()
            .checked_sub(icv_len)
            .filter(|&at| at >= ESP_HDR + iv_len)
            .ok_or(EspError::TooBig)?;
        let (body, icv) = esp.split_at_mut(icv_at);
        let (hdr, rest) = body.split_at_mut(ESP_HDR);
        let (iv, data) = rest.split_at_mut(iv_len);
        match &self.cipher {
            Cipher::Aead => {
                iv.copy_from_slice(&seq.to_be_bytes());
                let aad = aad(hdr, seq, esn);
                let nonce = nonce(&self.salt, iv);
                let mut tag_len = 0usize;
                let p = data.as_mut_ptr();
                // SAFETY: the context is initialised (Cipher::Aead); `p` is valid for
                // `data.len()` bytes, read and written in place (AWS-LC allows `out ==
                // in`); `icv` is a disjoint slice of `icv.len()` bytes for the tag, whose
                // length AWS-LC writes to `tag_len`; nonce and AAD are valid for the
                // lengths given. No extra input.
                let ok = unsafe {
                    EVP_AEAD_CTX_seal_scatter(
                        &self.ctx,
                        p,
                        icv.as_mut_ptr(),
                        &mut tag_len,
                        icv.len(),
                        nonce.as_ptr(),
                        nonce.len(),
                        p,
                        data.len(),
                        std::ptr::null(),
                        0,
                        aad.bytes().as_ptr(),
                        aad.bytes().len(),
                    )
                };
                return if ok == 1 && tag_len == icv_len {
                    Ok(())
                } else {
                    Err(EspError::TooBig)
                };
            }
            Cipher::CbcOut(c) => {
                let mut block = [0u8; CBC_BLOCK];
                block[..8].copy_from_slice(&seq.to_be_bytes());
                c.iv_key
                    .less_safe_encrypt(&mut block, EncryptionContext::None)
                    .map_err(|_| EspError::TooBig)?;
                iv.copy_from_slice(&block);
                c.key
                    .less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(block)))
                    .map_err(|_| EspError::BadLength)?;
            }
            Cipher::CbcIn(_) => return Err(EspError::WrongDirection),
            Cipher::Null => {}
        }
        if let Some(mac) = &self.mac {
            let tag = mac.sign(body, seq, esn);
            icv.copy_from_slice(tag.as_ref().get(..icv_len).ok_or(EspError::TooBig)?);
        }
        Ok(())
    }

    /// Checks the ICV of `esp` (header, IV, ciphertext, ICV) and decrypts in place. On an
    /// error the ciphertext may have been overwritten.
    pub(crate) fn open(&self, seq: u64, esn: bool, esp: &mut [u8]) -> Result<(), EspError> {
        let iv_len = self.iv_len();
        let icv_len = self.icv_len();
        let icv_at = esp
            .len()
            .checked_sub(icv_len)
            .filter(|&at| at >= ESP_HDR + iv_len)
            .ok_or(EspError::Truncated)?;
        let (body, icv) = esp.split_at_mut(icv_at);
        if let Some(mac) = &self.mac {
            let tag = mac.sign(body, seq, esn);
            let ours = tag
                .as_ref()
                .get(..icv_len)
                .ok_or(EspError::IntegrityFailed)?;
            constant_time::verify_slices_are_equal(ours, icv)
                .map_err(|_| EspError::IntegrityFailed)?;
        }
        let (hdr, rest) = body.split_at_mut(ESP_HDR);
        let (iv, data) = rest.split_at_mut(iv_len);
        match &self.cipher {
            Cipher::Aead => {
                let aad = aad(hdr, seq, esn);
                let nonce = nonce(&self.salt, iv);
                let p = data.as_mut_ptr();
                // SAFETY: the context is initialised (Cipher::Aead); `p` is valid for
                // `data.len()` bytes, decrypted in place (`out == in`); the tag, nonce and
                // AAD are valid for the lengths given. AWS-LC compares the tag in
                // constant time (CRYPTO_memcmp) before it reports success.
                let ok = unsafe {
                    EVP_AEAD_CTX_open_gather(
                        &self.ctx,
                        p,
                        nonce.as_ptr(),
                        nonce.len(),
                        p,
                        data.len(),
                        icv.as_ptr(),
                        icv.len(),
                        aad.bytes().as_ptr(),
                        aad.bytes().len(),
                    )
                };
                if ok != 1 {
                    return Err(EspError::IntegrityFailed);
                }
            }
            Cipher::CbcIn(key) => {
                if data.len() % CBC_BLOCK != 0 {
                    return Err(EspError::BadLength);
                }
                let mut block = [0u8; CBC_BLOCK];
                block.copy_from_slice(iv);
                key.decrypt(data, DecryptionContext::Iv128(FixedLength::from(block)))
                    .map_err(|_| EspError::BadLength)?;
            }
            Cipher::CbcOut(_) => return Err(EspError::WrongDirection),
            Cipher::Null => {}
        }
        Ok(())
    }
}

impl Mac {
    /// HMAC of the ESP header, IV and ciphertext, then the high half of the sequence
    /// number with ESN.
    fn sign(&self, body: &[u8], seq: u64, esn: bool) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(body);
        if esn {
            ctx.update(&((seq >> 32) as u32).to_be_bytes());
        }
        ctx.sign()
    }
}

/// The AEAD AAD: SPI, [high 32 bits with ESN], low 32 bits.
struct Aad {
    b: [u8; 12],
    len: usize,
}

impl Aad {
    fn bytes(&self) -> &[u8] {
        &self.b[..self.len]
    }
}

fn aad(hdr: &[u8], seq: u64, esn: bool) -> Aad {
    let mut b = [0u8; 12];
    if let (Some(spi), Some(lo)) = (hdr.get(..4), hdr.get(4..8)) {
        b[..4].copy_from_slice(spi);
        if esn {
            b[4..8].copy_from_slice(&((seq >> 32) as u32).to_be_bytes());
            b[8..].copy_from_slice(lo);
        } else {
            b[4..8].copy_from_slice(lo);
        }
    }
    Aad {
        b,
        len: if esn { 12 } else { 8 },
    }
}

/// The AEAD nonce: salt and explicit IV (unique per SA: the sequence number).
fn nonce(salt: &[u8; 4], iv: &[u8]) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(salt);
    if let Some(iv) = iv.get(..8) {
        n[4..].copy_from_slice(iv);
    }
    n
}

#[cfg(test)]
pub(crate) mod tests;
