//! The fast path's features as the daemon runs them: every feature crate's features in one
//! [`Registry`], and which interfaces have which, taken from the running config and
//! published to the workers (RCU: they pick the new state up between vectors).
//!
//! Today: uRPF (`[[interface]] urpf = "strict" | "loose"`, the `urpf` crate).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use dataplane::feature::{FeatureState, Registry, RegistryError};
use dataplane::worker::WorkerShared;
use serde::Serialize;

use crate::config::{Config, UrpfMode};

/// Every feature the daemon knows.
pub fn registry() -> Result<Registry, RegistryError> {
    Registry::new(urpf::Urpf::all())
}

/// The features the config gives interface `name`, by feature name.
pub fn wanted(cfg: &Config, name: &str) -> Vec<&'static str> {
    let Some(f) = cfg.interfaces.iter().find(|f| f.name == name) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    if let Some(m) = f.urpf {
        let mode = match m {
            UrpfMode::Strict => urpf::Mode::Strict,
            UrpfMode::Loose => urpf::Mode::Loose,
        };
        v.push(urpf::Urpf::name(false, mode));
        v.push(urpf::Urpf::name(true, mode));
    }
    v
}

/// The daemon's features: the registry, and the state the workers follow.
pub struct Features {
    /// Every feature, with its counter slots.
    pub registry: Arc<Registry>,
    state: Arc<ArcSwap<FeatureState>>,
    /// Bumped on every publish (shared with the interface table: workers reload both).
    version: Arc<AtomicU64>,
    /// The fast path's interfaces by index: ports, then VLAN sub-interfaces.
    names: Vec<String>,
}

/// One feature's counters, summed over the workers.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FeatureCounts {
    /// Feature name.
    pub feature: &'static str,
    /// Its arc.
    pub arc: &'static str,
    /// Packets it saw.
    pub packets: u64,
    /// Its drops, by reason: (reason, description, count).
    pub drops: Vec<(&'static str, &'static str, u64)>,
}

impl Features {
    /// Features over `registry` for the interfaces `names` (by index), none enabled;
    /// `version` is bumped on each publish.
    pub fn new(registry: Arc<Registry>, names: Vec<String>, version: Arc<AtomicU64>) -> Features {
        Features {
            registry,
            state: Arc::new(ArcSwap::from_pointee(FeatureState::default())),
            version,
            names,
        }
    }

    /// What the workers load their state from.
    pub fn state(&self) -> Arc<ArcSwap<FeatureState>> {
        self.state.clone()
    }

    /// Enable what `cfg` says on each interface, and nothing else; the workers follow
    /// before their next vector.
    pub fn publish(&self, cfg: &Config) -> Result<(), String> {
        let s = self
            .registry
            .state(self.names.len(), |i| wanted(cfg, &self.names[i]))?;
        self.state.store(Arc::new(s));
        self.version.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// The features enabled on interface `iface`, in execution order.
    pub fn enabled(&self, iface: u16) -> Vec<&'static str> {
        self.state
            .load()
            .enabled(iface)
            .into_iter()
            .filter_map(|id| self.registry.get(id).map(|e| e.spec.name))
            .collect()
    }

    /// Every feature's counters, summed over `workers`.
    pub fn counters(&self, workers: &[Arc<WorkerShared>]) -> Vec<FeatureCounts> {
        let sum = |slot: usize| workers.iter().map(|w| w.counters.feature(slot)).sum();
        self.registry
            .entries()
            .iter()
            .map(|e| FeatureCounts {
                feature: e.spec.name,
                arc: e.spec.arc.name(),
                packets: sum(e.counter_base),
                drops: e
                    .spec
                    .drops
                    .iter()
                    .enumerate()
                    .map(|(r, (name, desc))| (*name, *desc, sum(e.counter_base + 1 + r)))
                    .collect(),
            })
            .collect()
    }
}
