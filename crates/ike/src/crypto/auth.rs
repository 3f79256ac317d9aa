//! The AUTH payload's input (RFC 7296 §2.15): the octets each side signs or MACs, and the
//! AUTH value of a pre-shared key.

use zeroize::Zeroizing;

use super::prf;
use crate::transform::Prf;

/// The pad of §2.15's shared-key AUTH.
const KEY_PAD: &[u8] = b"Key Pad for IKEv2";

/// AUTH with a shared key (auth method 2, §2.15):
/// prf(prf(psk, "Key Pad for IKEv2"), signed_octets).
pub fn psk_auth(p: Prf, psk: &[u8], signed_octets: &[u8]) -> Zeroizing<Vec<u8>> {
    let key = prf(p, psk, &[KEY_PAD]);
    prf(p, &key, &[signed_octets])
}

/// The octets a side's AUTH covers (§2.15): its first message (the IKE_SA_INIT request
/// or response, exactly as sent), the peer's nonce (Nonce Data only), then
/// prf(SK_px, IDx'), where SK_px is the side's own SK_pi or SK_pr and IDx' its ID
/// payload's body (ID Type, the 3 reserved bytes, the identification data).
pub fn signed_octets(
    p: Prf,
    first_message: &[u8],
    peer_nonce: &[u8],
    sk_p: &[u8],
    id_body: &[u8],
) -> Vec<u8> {
    let mac = prf(p, sk_p, &[id_body]);
    let mut out = Vec::with_capacity(first_message.len() + peer_nonce.len() + mac.len());
    out.extend_from_slice(first_message);
    out.extend_from_slice(peer_nonce);
    out.extend_from_slice(&mac);
    out
}
