//! A security association: what the configuration or the IKE daemon gives
//! ([`SaConfig`]), and what the data plane uses ([`Sa`]): the cipher contexts prepared
//! once, the sequence number or replay window, and the counters.
//!
//! An SA is unidirectional and owned by one worker at a time (`&mut Sa` per packet or
//! batch): its sequence number and replay window need no atomics.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use zeroize::Zeroizing;

use crate::arena::SharedStats;
use crate::error::{EspError, SaError};
use crate::replay::Replay;
use crate::suite::Transform;

/// Which way an SA carries packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// We encrypt.
    Outbound,
    /// We decrypt.
    Inbound,
}

/// Tunnel or transport mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The IP packet's payload is protected; its header stays in front (RFC 4303 §3.1.1).
    Transport,
    /// The whole IP packet is protected inside a new outer header between the endpoints:
    /// `src` is the sender's (ours for an outbound SA). Both of one family; the inner
    /// packet may be of either (4in4, 6in6, 4in6, 6in4).
    Tunnel {
        /// Outer source address.
        src: IpAddr,
        /// Outer destination address.
        dst: IpAddr,
    },
}

/// The outer IPv4 header's DF bit in tunnel mode (RFC 4301 §8.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Df {
    /// Copied from an inner IPv4 packet; set for an inner IPv6 packet (which routers never
    /// fragment either).
    #[default]
    Copy,
    /// Always set.
    Set,
    /// Always clear (the outer packet may be fragmented on the way).
    Clear,
}

/// UDP encapsulation for NAT traversal (RFC 3948).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatT {
    /// UDP source port (4500, or what the NAT mapped).
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

impl Default for NatT {
    fn default() -> NatT {
        NatT {
            src_port: crate::esp::NATT_PORT,
            dst_port: crate::esp::NATT_PORT,
        }
    }
}

/// Encryption algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encryption {
    /// AES-128-GCM, 16-byte ICV (RFC 4106): 16-byte key + 4-byte salt.
    AesGcm128,
    /// AES-256-GCM, 16-byte ICV (RFC 4106): 32-byte key + 4-byte salt.
    AesGcm256,
    /// ChaCha20-Poly1305 (RFC 7634): 32-byte key + 4-byte salt.
    ChaCha20Poly1305,
    /// AES-128-CBC (RFC 3602), with an integrity algorithm.
    AesCbc128,
    /// AES-256-CBC (RFC 3602), with an integrity algorithm.
    AesCbc256,
    /// NULL encryption (RFC 2410): with an integrity algorithm, or with none for tests.
    Null,
}

impl Encryption {
    /// Name as in IKEv2's registry and the config.
    pub fn name(self) -> &'static str {
        match self {
            Encryption::AesGcm128 => "aes-128-gcm",
            Encryption::AesGcm256 => "aes-256-gcm",
            Encryption::ChaCha20Poly1305 => "chacha20-poly1305",
            Encryption::AesCbc128 => "aes-128-cbc",
            Encryption::AesCbc256 => "aes-256-cbc",
            Encryption::Null => "null",
        }
    }

    /// Whether it is an AEAD (no separate integrity algorithm).
    pub fn is_aead(self) -> bool {
        matches!(
            self,
            Encryption::AesGcm128 | Encryption::AesGcm256 | Encryption::ChaCha20Poly1305
        )
    }

    /// Bytes of keying material: the key, and for the AEADs the 4-byte salt after it.
    pub fn key_len(self) -> usize {
        match self {
            Encryption::AesGcm128 => 20,
            Encryption::AesGcm256 | Encryption::ChaCha20Poly1305 => 36,
            Encryption::AesCbc128 => 16,
            Encryption::AesCbc256 => 32,
            Encryption::Null => 0,
        }
    }
}

/// Integrity algorithm of a non-AEAD SA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Integrity {
    /// None: with an AEAD, or with NULL encryption for tests.
    None,
    /// HMAC-SHA1-96 (RFC 2404): 20-byte key, 12-byte ICV.
    HmacSha1_96,
    /// HMAC-SHA2-256-128 (RFC 4868): 32-byte key, 16-byte ICV.
    HmacSha256_128,
    /// HMAC-SHA2-512-256 (RFC 4868): 64-byte key, 32-byte ICV.
    HmacSha512_256,
}

impl Integrity {
    /// Name as in IKEv2's registry and the config.
    pub fn name(self) -> &'static str {
        match self {
            Integrity::None => "none",
            Integrity::HmacSha1_96 => "hmac-sha1-96",
            Integrity::HmacSha256_128 => "hmac-sha2-256-128",
            Integrity::HmacSha512_256 => "hmac-sha2-512-256",
        }
    }

    /// Bytes of key.
    pub fn key_len(self) -> usize {
        match self {
            Integrity::None => 0,
            Integrity::HmacSha1_96 => 20,
            Integrity::HmacSha256_128 => 32,
            Integrity::HmacSha512_256 => 64,
        }
    }
}

/// Everything an SA is made from. Keys are zeroized when it is dropped.
#[derive(Clone)]
pub struct SaConfig {
    /// Security Parameters Index (256 and above).
    pub spi: u32,
    /// Outbound or inbound.
    pub direction: Direction,
    /// Tunnel (with its endpoints) or transport.
    pub mode: Mode,
    /// Encryption algorithm.
    pub encryption: Encryption,
    /// Integrity algorithm ([`Integrity::None`] with an AEAD).
    pub integrity: Integrity,
    /// Encryption keying material ([`Encryption::key_len`] bytes).
    pub enc_key: Zeroizing<Vec<u8>>,
    /// Integrity key ([`Integrity::key_len`] bytes).
    pub auth_key: Zeroizing<Vec<u8>>,
    /// Extended (64-bit) sequence numbers.
    pub esn: bool,
    /// Anti-replay window in packets (inbound): a multiple of 64, 64 to 65536.
    pub replay_window: u32,
    /// UDP encapsulation (RFC 3948).
    pub natt: Option<NatT>,
    /// Outer DF bit (tunnel mode, IPv4 outer).
    pub df: Df,
}

impl SaConfig {
    /// The default replay window.
    pub const DEFAULT_WINDOW: u32 = 1024;

    /// A transport-mode SA without ESN or NAT-T, with the default window.
    pub fn new(
        spi: u32,
        direction: Direction,
        encryption: Encryption,
        enc_key: &[u8],
        integrity: Integrity,
        auth_key: &[u8],
    ) -> SaConfig {
        SaConfig {
            spi,
            direction,
            mode: Mode::Transport,
            encryption,
            integrity,
            enc_key: Zeroizing::new(enc_key.to_vec()),
            auth_key: Zeroizing::new(auth_key.to_vec()),
            esn: false,
            replay_window: Self::DEFAULT_WINDOW,
            natt: None,
            df: Df::Copy,
        }
    }
}

impl fmt::Debug for SaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaConfig")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("direction", &self.direction)
            .field("mode", &self.mode)
            .field("encryption", &self.encryption)
            .field("integrity", &self.integrity)
            .field("esn", &self.esn)
            .field("replay_window", &self.replay_window)
            .field("natt", &self.natt)
            .field("df", &self.df)
            .finish_non_exhaustive()
    }
}

/// Tunnel endpoints, as bytes ready to copy into the outer header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoints {
    V4 { src: [u8; 4], dst: [u8; 4] },
    V6 { src: [u8; 16], dst: [u8; 16] },
}

/// Per-direction state.
pub(crate) enum State {
    Out {
        /// The last sequence number sent (0: none yet).
        seq: u64,
        /// The next outer IPv4 identification.
        ip_id: u16,
    },
    In {
        replay: Replay,
    },
}

/// An SA's counters. Bytes are those of the inner packets (before encryption, after
/// decryption). Per SA, the refusals RFC 4303 asks about are counted each (replay,
/// integrity, sequence overflow) and the rest together ([`Counters::other`]): every reason
/// is also counted by the ESP nodes, per worker ([`EspError::reason`]). Silent drops
/// (dummy packets, NAT-T keepalives) are not refusals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets encrypted or decrypted.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Replayed, or too old for the window.
    pub replayed: u64,
    /// Their ICV did not verify.
    pub integrity_failed: u64,
    /// Refused as the sequence number would wrap.
    pub sequence_overflow: u64,
    /// Refused for any other reason (truncated, bad padding, too big, ...).
    pub other: u64,
}

impl Counters {
    /// Replay drops.
    pub fn replayed(&self) -> u64 {
        self.replayed
    }

    /// Integrity failures.
    pub fn integrity_failed(&self) -> u64 {
        self.integrity_failed
    }

    /// Sequence-number overflow drops.
    pub fn sequence_overflow(&self) -> u64 {
        self.sequence_overflow
    }

    /// Packets refused for another reason.
    pub fn other(&self) -> u64 {
        self.other
    }

    /// The refusals by name (`replayed`, `integrity_failed`, `sequence_overflow`,
    /// `other`), the non-zero ones.
    pub fn errors(&self) -> Vec<(&'static str, u64)> {
        [
            (EspError::Replayed.name(), self.replayed),
            (EspError::IntegrityFailed.name(), self.integrity_failed),
            (EspError::SequenceOverflow.name(), self.sequence_overflow),
            ("other", self.other),
        ]
        .into_iter()
        .filter(|e| e.1 > 0)
        .collect()
    }
}

/// An SA's counters as the control thread reads them. The owning worker publishes the
/// packet and byte counts and the sequence number after each vector that used the SA
/// ([`Sa::publish`]), and counts refusals here as they happen (they are rare, and kept out
/// of the SA so that it stays a line shorter: issue 27, memory per tunnel). 56 bytes.
#[derive(Debug, Default)]
pub struct SaStats {
    packets: AtomicU64,
    bytes: AtomicU64,
    /// The last sequence number sent (outbound) or the highest received (inbound).
    sequence: AtomicU64,
    replayed: AtomicU64,
    integrity_failed: AtomicU64,
    sequence_overflow: AtomicU64,
    other: AtomicU64,
}

impl SaStats {
    /// Copy the packet and byte counts and `sequence` in (the owning worker only).
    #[inline]
    pub fn publish(&self, packets: u64, bytes: u64, sequence: u64) {
        self.packets.store(packets, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.sequence.store(sequence, Ordering::Relaxed);
    }

    /// Count a packet refused for `e` (nothing for a silent drop: [`EspError::is_silent`]).
    #[inline]
    pub fn count(&self, e: EspError) {
        let c = match e {
            EspError::Replayed => &self.replayed,
            EspError::IntegrityFailed => &self.integrity_failed,
            EspError::SequenceOverflow => &self.sequence_overflow,
            e if e.is_silent() => return,
            _ => &self.other,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters last published, with the refusals counted so far.
    pub fn counters(&self) -> Counters {
        Counters {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            integrity_failed: self.integrity_failed.load(Ordering::Relaxed),
            sequence_overflow: self.sequence_overflow.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }

    /// The sequence number last published.
    pub fn sequence(&self) -> u64 {
        self.sequence.load(Ordering::Relaxed)
    }
}

/// A security association, ready for packets.
///
/// Laid out for the cache (issue 26: a gateway with 100,000 SAs finds each packet's SA
/// cold): what a packet reads and writes is one contiguous run of lines from the SA's
/// start — the header fields and sequence state, the transform with its AEAD context
/// inline, the packet and byte counters — and what it does not (where the errors are
/// counted, the algorithm names) comes after. [`Sa::prefetch`] brings the run in ahead of
/// a packet. Twelve lines in all (issue 27: two per tunnel, a million tunnels): the error
/// counters are in its [`SaStats`], the transform is not padded to a line.
#[repr(C, align(64))]
pub struct Sa {
    pub(crate) spi: u32,
    pub(crate) esn: bool,
    pub(crate) df: Df,
    pub(crate) natt: Option<NatT>,
    pub(crate) state: State,
    pub(crate) tunnel: Option<Endpoints>,
    pub(crate) transform: Transform,
    /// Packets encrypted or decrypted, and their bytes (inner packets).
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
    /// Where the control thread reads its counters, and where its errors are counted (in
    /// huge-page chunks, as the SAs).
    stats: SharedStats,
    encryption: Encryption,
    integrity: Integrity,
}

/// The bytes of an [`Sa`] a packet uses, from its start: through the packet and byte
/// counters.
const HOT_BYTES: usize = std::mem::offset_of!(Sa, bytes) + 8;

impl fmt::Debug for Sa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sa")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("direction", &self.direction())
            .field("encryption", &self.encryption)
            .field("integrity", &self.integrity)
            .field("esn", &self.esn)
            .field("tunnel", &self.tunnel)
            .field("natt", &self.natt)
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

impl Sa {
    /// Checks the configuration and keys the cipher contexts (the only allocations: CBC's
    /// and HMAC's contexts, the [`SaStats`], in the SA chunks
    /// ([`crate::arena::SharedStats`]), and the replay bitmap, which is in the SA chunks up
    /// to a 1,984-packet window: [`crate::arena::Blocks`]).
    pub fn new(cfg: &SaConfig) -> Result<Sa, SaError> {
        if cfg.spi < 256 {
            return Err(SaError::ReservedSpi(cfg.spi));
        }
        let w = cfg.replay_window;
        if !Replay::WINDOW_RANGE.contains(&w) || !w.is_multiple_of(64) {
            return Err(SaError::ReplayWindow(w));
        }
        let tunnel = match cfg.mode {
            Mode::Transport => None,
            Mode::Tunnel {
                src: IpAddr::V4(s),
                dst: IpAddr::V4(d),
            } => Some(Endpoints::V4 {
                src: s.octets(),
                dst: d.octets(),
            }),
            Mode::Tunnel {
                src: IpAddr::V6(s),
                dst: IpAddr::V6(d),
            } => Some(Endpoints::V6 {
                src: s.octets(),
                dst: d.octets(),
            }),
            Mode::Tunnel { src, dst } => return Err(SaError::MixedFamilies(src, dst)),
        };
        let transform = Transform::new(
            cfg.encryption,
            cfg.integrity,
            &cfg.enc_key,
            &cfg.auth_key,
            cfg.direction,
        )?;
        let state = match cfg.direction {
            Direction::Outbound => State::Out { seq: 0, ip_id: 0 },
            Direction::Inbound => State::In {
                replay: Replay::new(w),
            },
        };
        Ok(Sa {
            spi: cfg.spi,
            esn: cfg.esn,
            tunnel,
            natt: cfg.natt,
            df: cfg.df,
            transform,
            state,
            packets: 0,
            bytes: 0,
            stats: SharedStats::new(),
            encryption: cfg.encryption,
            integrity: cfg.integrity,
        })
    }

    /// The SPI.
    pub fn spi(&self) -> u32 {
        self.spi
    }

    /// Outbound or inbound.
    pub fn direction(&self) -> Direction {
        match self.state {
            State::Out { .. } => Direction::Outbound,
            State::In { .. } => Direction::Inbound,
        }
    }

    /// The counters: packets and bytes as of now, the errors counted so far.
    pub fn counters(&self) -> Counters {
        Counters {
            packets: self.packets,
            bytes: self.bytes,
            ..self.stats.counters()
        }
    }

    /// Where the control thread reads its counters (shared with it before the SA goes to
    /// a worker).
    pub fn stats(&self) -> &SharedStats {
        &self.stats
    }

    /// Count a packet refused for `e`.
    #[inline]
    pub(crate) fn count(&self, e: EspError) {
        self.stats.count(e);
    }

    /// Publish the packet and byte counts and the sequence number to its [`SaStats`].
    #[inline]
    pub fn publish(&self) {
        self.stats
            .publish(self.packets, self.bytes, self.sequence());
    }

    /// Its UDP encapsulation (NAT-T), if any.
    pub fn natt(&self) -> Option<NatT> {
        self.natt
    }

    /// Outbound: the last sequence number sent. Inbound: the highest accepted.
    pub fn sequence(&self) -> u64 {
        match &self.state {
            State::Out { seq, .. } => *seq,
            State::In { replay } => replay.top(),
        }
    }

    /// Outbound: makes the next packet carry `last + 1` (tests of ESN and overflow, and
    /// interop with a peer whose counter is elsewhere). Inbound: nothing.
    pub fn set_sequence(&mut self, last: u64) {
        if let State::Out { seq, .. } = &mut self.state {
            *seq = last;
        }
    }

    /// Hint the CPU to bring in what a packet of this SA will use (its header fields,
    /// sequence state, key context and packet counters: [`Sa::hot_bytes`]), without
    /// waiting for it: call it for the SAs of the next few packets while one is being
    /// processed. Inbound, [`Sa::prefetch_window`] then does the replay bitmap.
    #[inline]
    pub fn prefetch(&self) {
        let p = (self as *const Sa).cast::<u8>();
        for off in (0..HOT_BYTES).step_by(64) {
            // In bounds: HOT_BYTES <= size_of::<Sa>().
            dataplane::buffer::prefetch(p.wrapping_add(off));
        }
    }

    /// Hint the CPU to bring in its [`SaStats`] (published after the vector) and, inbound,
    /// the replay bitmap's block where the next packet in order lands (separate
    /// allocations: call it once [`Sa::prefetch`] has had time to bring the SA in, as it
    /// reads the SA).
    #[inline]
    pub fn prefetch_window(&self) {
        dataplane::buffer::prefetch(self.stats.as_ptr().cast());
        if let State::In { replay } = &self.state {
            replay.prefetch_next();
        }
    }

    /// Bytes of the SA that a packet uses, from its start ([`Sa::prefetch`]).
    pub fn hot_bytes() -> usize {
        HOT_BYTES
    }

    /// The most bytes ESP adds to a packet (outer header, UDP, ESP header, IV, the
    /// longest padding, trailer, ICV): what a tunnel's MTU must leave room for.
    pub fn max_overhead(&self) -> usize {
        let t = &self.transform;
        let outer = match self.tunnel {
            Some(Endpoints::V4 { .. }) => 20,
            Some(Endpoints::V6 { .. }) => 40,
            None => 0,
        };
        let udp = if self.natt.is_some() { 8 } else { 0 };
        outer + udp + crate::suite::ESP_HDR + t.iv_len() + t.align() - 1 + 2 + t.icv_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked() {
        let k16 = [7u8; 16];
        let gcm = |key: &[u8], integ| {
            Sa::new(&SaConfig::new(
                0x1000,
                Direction::Inbound,
                Encryption::AesGcm128,
                key,
                integ,
                &[],
            ))
        };
        assert!(matches!(
            gcm(&k16, Integrity::None),
            Err(SaError::KeyLength {
                expected: 20,
                got: 16,
                ..
            })
        ));
        assert!(gcm(&[7u8; 20], Integrity::None).is_ok());
        assert_eq!(
            gcm(&[7u8; 20], Integrity::HmacSha1_96).unwrap_err(),
            SaError::AeadWithIntegrity("aes-128-gcm")
        );
        let cbc = SaConfig::new(
            0x1000,
            Direction::Outbound,
            Encryption::AesCbc128,
            &k16,
            Integrity::None,
            &[],
        );
        assert_eq!(
            Sa::new(&cbc).unwrap_err(),
            SaError::CbcWithoutIntegrity("aes-128-cbc")
        );
        let mut c = SaConfig::new(
            0x1000,
            Direction::Outbound,
            Encryption::AesCbc128,
            &k16,
            Integrity::HmacSha256_128,
            &[1; 20],
        );
        assert!(Sa::new(&c).unwrap_err().to_string().contains("needs 32"));
        c.auth_key = Zeroizing::new(vec![1; 32]);
        assert!(Sa::new(&c).is_ok());
        c.replay_window = 100;
        assert_eq!(Sa::new(&c).unwrap_err(), SaError::ReplayWindow(100));
        c.replay_window = 65536;
        c.spi = 255;
        assert_eq!(Sa::new(&c).unwrap_err(), SaError::ReservedSpi(255));
        c.spi = 256;
        c.mode = Mode::Tunnel {
            src: "10.0.0.1".parse().unwrap(),
            dst: "::1".parse().unwrap(),
        };
        assert!(matches!(Sa::new(&c), Err(SaError::MixedFamilies(..))));
        // Keys never show in Debug.
        assert!(!format!("{c:?}").contains("[1, 1"));
    }
}
