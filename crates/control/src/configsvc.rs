//! The config service the API calls: check, apply, diff, rollback and history over the
//! running config. One caller at a time (wrap it in a `Mutex`); every kernel change happens
//! in the network namespace of the calling thread.
//!
//! Persistence: the daemon runs as `ferrouter run --config FILE`. A successful
//! [`ConfigService::apply`] (or [`ConfigService::rollback`]) writes the new text atomically
//! to FILE, so that a restart comes back with it, and records it in the [`History`] under
//! the config's `state_dir` (`running.toml`, `history/NNNNNN.toml`). [`ConfigService::start`]
//! applies FILE's interfaces, routes and neighbours at daemon start (steps already in the
//! kernel change nothing) and records FILE as running when it differs from the last recorded
//! text.
//!
//! Settings the daemon reads only at start (`[[port]]`, `workers`, `control_socket`,
//! `netlink_rcvbuf`, `state_dir`, `[api]`, `[bgp]`) are refused by apply with a message
//! asking for a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::apply::{self, ApplyError, Plan, PlanError, Report};
use crate::config::{check_system, Config, ConfigError, Problems};
use crate::history::{self, Entry, History};

/// Why a service call failed. Nothing in the kernel was changed unless said otherwise.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config file could not be read.
    #[error(transparent)]
    Load(#[from] ConfigError),
    /// The candidate config is invalid.
    #[error("{0}")]
    Problems(#[from] Problems),
    /// The change needs a restart.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Applying failed (and was rolled back).
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The change was applied, but could not be persisted.
    #[error("the config was applied but not saved: {0}")]
    Persist(std::io::Error),
    /// The history could not be read.
    #[error("config history: {0}")]
    History(std::io::Error),
    /// `rollback N` beyond the history.
    #[error("cannot roll back {0}: the history holds only {1} earlier config(s)")]
    NoSuchEntry(usize, usize),
}

/// What an apply or rollback did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The steps planned.
    pub plan: Plan,
    /// Which changed the kernel.
    pub report: Report,
    /// The history entry recorded (None when nothing differed from the running text).
    pub id: Option<u64>,
}

/// The running config and its history.
pub struct ConfigService {
    path: PathBuf,
    history: History,
    running: Config,
    running_text: String,
    held_down: Arc<ArcSwap<Vec<String>>>,
}

/// The interfaces `cfg` holds down (`enabled = false`).
fn held_down(cfg: &Config) -> Vec<String> {
    cfg.interfaces
        .iter()
        .filter(|f| !f.enabled)
        .map(|f| f.name.clone())
        .collect()
}

impl ConfigService {
    /// Loads `path`, applies its interfaces, routes and neighbours to the kernel (the full
    /// plan from nothing) and records it as running.
    pub fn start(path: &Path) -> Result<(ConfigService, Applied), Error> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let cfg = Config::parse(&text, path)?;
        check_system(&cfg, &text, path)?;
        let history = History::open(&cfg.state_dir).map_err(Error::History)?;
        let empty = Config {
            interfaces: Vec::new(),
            routes: Vec::new(),
            neighbors: Vec::new(),
            ..cfg.clone()
        };
        let plan = apply::plan(&empty, &cfg)?;
        let held = Arc::new(ArcSwap::from_pointee(held_down(&cfg)));
        let report = apply::apply(&plan)?;
        let id = if history.running().map_err(Error::History)?.as_deref() != Some(&text) {
            Some(
                history
                    .record(&text, Some("daemon start"))
                    .map_err(Error::Persist)?,
            )
        } else {
            None
        };
        let svc = ConfigService {
            path: path.into(),
            history,
            running: cfg,
            running_text: text,
            held_down: held,
        };
        Ok((svc, Applied { plan, report, id }))
    }

    /// The interfaces the config holds administratively down (`enabled = false`), as the
    /// logs and `show interfaces` tell why a link is down. Updated before an apply changes
    /// any link, so the link's notification already finds the reason.
    pub fn held_down(&self) -> Arc<ArcSwap<Vec<String>>> {
        self.held_down.clone()
    }

    /// The running config.
    pub fn running(&self) -> &Config {
        &self.running
    }

    /// Its text.
    pub fn running_text(&self) -> &str {
        &self.running_text
    }

    /// Validates a candidate (syntax, schema, semantics, and the interfaces it names).
    pub fn check(&self, text: &str) -> Result<Config, Problems> {
        self.check_as(text, "candidate")
    }

    /// [`ConfigService::check`], with problems reported against `label` (the file name the
    /// operator knows).
    pub fn check_as(&self, text: &str, label: &str) -> Result<Config, Problems> {
        let label = Path::new(label);
        let cfg = Config::parse(text, label)?;
        check_system(&cfg, text, label)?;
        Ok(cfg)
    }

    /// The steps that applying `text` would take.
    pub fn plan(&self, text: &str) -> Result<Plan, Error> {
        let cfg = self.check(text)?;
        Ok(apply::plan(&self.running, &cfg)?)
    }

    /// Applies `text` as one transaction; on success it becomes the running config, is
    /// written to the daemon's config file and recorded in the history.
    pub fn apply(&mut self, text: &str, comment: Option<&str>) -> Result<Applied, Error> {
        self.apply_as(text, "candidate", comment)
    }

    /// [`ConfigService::apply`], with problems reported against `label`.
    pub fn apply_as(
        &mut self,
        text: &str,
        label: &str,
        comment: Option<&str>,
    ) -> Result<Applied, Error> {
        let cfg = self.check_as(text, label)?;
        let plan = apply::plan(&self.running, &cfg)?;
        let (before, after) = (held_down(&self.running), held_down(&cfg));
        let mut either = before.clone();
        either.extend(after.iter().filter(|n| !before.contains(n)).cloned());
        self.held_down.store(Arc::new(either));
        let report = match apply::apply(&plan) {
            Ok(r) => r,
            Err(e) => {
                self.held_down.store(Arc::new(before));
                return Err(e.into());
            }
        };
        self.held_down.store(Arc::new(after));
        self.running = cfg;
        let changed = self.running_text != text;
        self.running_text = text.to_string();
        let id = if changed {
            history::write_atomic(&self.path, text.as_bytes()).map_err(Error::Persist)?;
            Some(self.history.record(text, comment).map_err(Error::Persist)?)
        } else {
            None
        };
        Ok(Applied { plan, report, id })
    }

    /// Unified diff from the running config to `candidate`, or, without one, from the
    /// previous config in the history to the running one.
    pub fn diff(&self, candidate: Option<&str>) -> Result<String, Error> {
        Ok(match candidate {
            Some(c) => history::diff(&self.running_text, c, "running", "candidate"),
            None => {
                let prev = match self.history.back(1).map_err(Error::History)? {
                    Some(e) => self.history.get(e.id).map_err(Error::History)?,
                    None => String::new(),
                };
                history::diff(&prev, &self.running_text, "previous", "running")
            }
        })
    }

    /// Re-applies the config `n` back in the history (1 = the one before the running one)
    /// as a new transaction, itself recorded.
    pub fn rollback(&mut self, n: usize) -> Result<Applied, Error> {
        let n = n.max(1);
        let entries = self.history.list().map_err(Error::History)?;
        let Some(e) = self.history.back(n).map_err(Error::History)? else {
            return Err(Error::NoSuchEntry(n, entries.len().saturating_sub(1)));
        };
        let text = self.history.get(e.id).map_err(Error::History)?;
        self.apply(&text, Some(&format!("rollback {n} (to entry {})", e.id)))
    }

    /// The kept history, oldest first.
    pub fn history(&self) -> Result<Vec<Entry>, Error> {
        self.history.list().map_err(Error::History)
    }

    /// The text of history entry `id`.
    pub fn entry(&self, id: u64) -> Result<String, Error> {
        self.history.get(id).map_err(Error::History)
    }
}
