//! The persisted history of applied configs, under the config's `state_dir`:
//!
//! ```text
//! state_dir/running.toml             the text of the config now applied
//! state_dir/history/000042.toml      each applied config, numbered from 1
//! state_dir/history/000042.json      its metadata: {"time": UNIX_SECONDS, "comment": ...}
//! ```
//!
//! Every write goes to a temporary file that is fsynced and renamed over the target, so a
//! crash leaves the old or the new file, never a torn one. The last [`KEEP`] entries are kept.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How many history entries are kept.
pub const KEEP: usize = 100;

/// One applied config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Its number (increasing).
    pub id: u64,
    /// When it was applied, in seconds since the Unix epoch.
    pub time: u64,
    /// Size of its text.
    pub bytes: u64,
    /// Who applied it or why, if given.
    pub comment: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    time: u64,
    comment: Option<String>,
}

/// The history directory.
pub struct History {
    dir: PathBuf,
}

impl History {
    /// Opens (creating if needed) the history under `dir`.
    pub fn open(dir: &Path) -> io::Result<History> {
        fs::create_dir_all(dir.join("history")).map_err(|e| {
            io::Error::new(e.kind(), format!("creating {}/history: {e}", dir.display()))
        })?;
        Ok(History { dir: dir.into() })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry_path(&self, id: u64, ext: &str) -> PathBuf {
        self.dir.join("history").join(format!("{id:06}.{ext}"))
    }

    /// Archives `text` as the newest entry and makes it the running config; returns its id.
    pub fn record(&self, text: &str, comment: Option<&str>) -> io::Result<u64> {
        let id = self.list()?.last().map_or(1, |e| e.id + 1);
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let meta = Meta {
            time,
            comment: comment.map(str::to_string),
        };
        let meta = serde_json::to_vec(&meta).map_err(io::Error::other)?;
        write_atomic(&self.entry_path(id, "json"), &meta)?;
        write_atomic(&self.entry_path(id, "toml"), text.as_bytes())?;
        write_atomic(&self.dir.join("running.toml"), text.as_bytes())?;
        let all = self.list()?;
        for e in all.iter().take(all.len().saturating_sub(KEEP)) {
            let _ = fs::remove_file(self.entry_path(e.id, "toml"));
            let _ = fs::remove_file(self.entry_path(e.id, "json"));
        }
        Ok(id)
    }

    /// Every kept entry, oldest first.
    pub fn list(&self) -> io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        for f in fs::read_dir(self.dir.join("history"))? {
            let f = f?;
            let name = f.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".toml"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let bytes = f.metadata()?.len();
            let meta: Option<Meta> = fs::read(self.entry_path(id, "json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            out.push(Entry {
                id,
                time: meta.as_ref().map_or(0, |m| m.time),
                bytes,
                comment: meta.and_then(|m| m.comment),
            });
        }
        out.sort_by_key(|e| e.id);
        Ok(out)
    }

    /// The text of entry `id`.
    pub fn get(&self, id: u64) -> io::Result<String> {
        fs::read_to_string(self.entry_path(id, "toml"))
    }

    /// The entry `n` back from the newest (0 = the newest, 1 = the one before).
    pub fn back(&self, n: usize) -> io::Result<Option<Entry>> {
        let all = self.list()?;
        Ok(all.len().checked_sub(n + 1).map(|i| all[i].clone()))
    }

    /// The text of the running config, if one was ever recorded.
    pub fn running(&self) -> io::Result<Option<String>> {
        match fs::read_to_string(self.dir.join("running.toml")) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsynced, renamed over it,
/// and the directory fsynced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("config");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
}

/// A unified diff from `a` to `b` (empty when equal), labelled with the two names.
pub fn diff(a: &str, b: &str, a_name: &str, b_name: &str) -> String {
    if a == b {
        return String::new();
    }
    similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(3)
        .header(a_name, b_name)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening_and_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::open(dir.path()).unwrap();
        assert_eq!(h.running().unwrap(), None);
        assert_eq!(h.back(0).unwrap(), None);
        assert_eq!(h.record("a = 1\n", Some("first")).unwrap(), 1);
        assert_eq!(h.record("a = 2\n", None).unwrap(), 2);
        drop(h);
        let h = History::open(dir.path()).unwrap();
        assert_eq!(h.running().unwrap().as_deref(), Some("a = 2\n"));
        let l = h.list().unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].comment.as_deref(), Some("first"));
        assert_eq!(l[1].bytes, 6);
        assert!(l[1].time > 0);
        assert_eq!(h.back(1).unwrap().unwrap().id, 1);
        assert_eq!(h.get(1).unwrap(), "a = 1\n");
        for i in 0..KEEP + 5 {
            h.record(&format!("a = {i}\n"), None).unwrap();
        }
        let l = h.list().unwrap();
        assert_eq!(l.len(), KEEP);
        assert_eq!(l.last().unwrap().id, KEEP as u64 + 7);
        // No temporary files are left behind.
        assert!(fs::read_dir(dir.path().join("history")).unwrap().all(|f| !f
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp")));
    }

    #[test]
    fn unified_diff() {
        let d = diff("a\nb\nc\n", "a\nB\nc\n", "running", "candidate");
        assert_eq!(
            d,
            "--- running\n+++ candidate\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
        assert_eq!(diff("x\n", "x\n", "a", "b"), "");
    }
}
