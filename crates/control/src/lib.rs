//! Ferrouter's control side: the configuration file, the mirror of the kernel's forwarding
//! state into the FIB, the daemon loop and its control API.

pub mod api;
pub mod capture;
pub mod config;
pub mod daemon;
pub mod sync;
pub mod trace;
