//! Ferrouter's control side: the configuration file, the mirror of the kernel's forwarding
//! state into the FIB, the daemon loop and its control API.

pub mod api;
pub mod apply;
pub mod capture;
pub mod client;
pub mod config;
pub mod configsvc;
pub mod daemon;
pub mod features;
pub mod fwview;
pub mod glean;
pub mod history;
pub mod http;
pub mod ikesvc;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod natview;
pub mod qosview;
pub mod render;
pub mod state;
pub mod sync;
pub mod trace;
