//! The IKEv2 message codec (being built).
