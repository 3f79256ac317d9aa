//! OSPFv2 for Ferrouter's tester: the wire codec ([`wire`]) and an emulated neighbour
//! ([`peer`]) that originates AS-external routes at scale, the OSPF counterpart of the
//! BGP codec peers and MRT-fed GoBGP in the convergence lab.

pub mod peer;
pub mod wire;
