//! Key exchange, PRF, key derivation and the SK payload (being built).
