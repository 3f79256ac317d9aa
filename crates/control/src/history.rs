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
//!
//! A config may hold secrets (BGP passwords, addresses an operator does not publish): the
//! history is its owner's only, directories 0700 and files 0600, whatever the umask.

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
    /// Opens (creating if needed, mode 0700) the history under `dir`. A `history`
    /// directory or a `running.toml` that group or others may read (an older version made
    /// them so) is made the owner's only.
    pub fn open(dir: &Path) -> io::Result<History> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let hist = dir.join("history");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&hist)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", hist.display())))?;
        for (path, mode) in [(hist, 0o700), (dir.join("running.toml"), 0o600)] {
            let loose = match fs::metadata(&path) {
                Ok(m) => m.permissions().mode() & 0o077 != 0,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("reading the mode of {}: {e}", path.display()),
                    ))
                }
            };
            if loose {
                fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("setting the mode of {} to {mode:04o}: {e}", path.display()),
                    )
                })?;
                tracing::info!("{}: mode set to {mode:04o} (owner only)", path.display());
            }
        }
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
        write_private(&self.entry_path(id, "json"), &meta)?;
        write_private(&self.entry_path(id, "toml"), text.as_bytes())?;
        write_private(&self.dir.join("running.toml"), text.as_bytes())?;
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
/// and the directory fsynced. An existing file keeps its mode and, where the daemon may set
/// it, its owner and group (an operator's `chmod 600` survives `config apply`); a new file
/// is 0600.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let keep = match fs::metadata(path) {
        Ok(m) => Some((m.permissions().mode() & 0o7777, m.uid(), m.gid())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("writing {}: reading its mode: {e}", path.display()),
            ))
        }
    };
    write_with(
        path,
        bytes,
        keep.map_or(0o600, |k| k.0),
        keep.map(|k| (k.1, k.2)),
    )
}

/// Writes `bytes` to `path` atomically (as [`write_atomic`]) with mode 0600, whatever the
/// file's mode was.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, bytes, 0o600, None)
}

fn write_with(path: &Path, bytes: &[u8], mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
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
        // Created for the owner only, then given the final mode: never readable by others
        // in between, whatever the umask.
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        if let Some((uid, gid)) = owner {
            let m = f.metadata()?;
            if (m.uid(), m.gid()) != (uid, gid) {
                if let Err(e) = std::os::unix::fs::fchown(&f, Some(uid), Some(gid)) {
                    tracing::warn!(
                        "{}: keeping its owner {uid}:{gid} failed ({e}); it is now owned by {}:{}",
                        path.display(),
                        m.uid(),
                        m.gid()
                    );
                }
            }
        }
        f.set_permissions(fs::Permissions::from_mode(mode))?;
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
    fn history_is_the_owners_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("state");
        let h = History::open(&dir).unwrap();
        h.record("a = 1\n", Some("first")).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("history")), 0o700);
        for f in ["running.toml", "history/000001.toml", "history/000001.json"] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        // What an older version left readable is tightened at open and at the next write.
        fs::set_permissions(dir.join("history"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(dir.join("running.toml"), fs::Permissions::from_mode(0o644)).unwrap();
        drop(h);
        let h = History::open(&dir).unwrap();
        assert_eq!(mode(&dir.join("history")), 0o700);
        assert_eq!(mode(&dir.join("running.toml")), 0o600);
        fs::set_permissions(dir.join("running.toml"), fs::Permissions::from_mode(0o644)).unwrap();
        h.record("a = 2\n", None).unwrap();
        assert_eq!(mode(&dir.join("running.toml")), 0o600);
    }

    #[test]
    fn a_rewritten_file_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ferrouter.toml");
        // A new file is the owner's only.
        write_atomic(&p, b"a = 1\n").unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o600
        );
        for m in [0o640, 0o600, 0o644] {
            fs::set_permissions(&p, fs::Permissions::from_mode(m)).unwrap();
            write_atomic(&p, format!("a = {m}\n").as_bytes()).unwrap();
            let md = fs::metadata(&p).unwrap();
            assert_eq!(md.permissions().mode() & 0o7777, m);
            assert_eq!(fs::read_to_string(&p).unwrap(), format!("a = {m}\n"));
        }
        // Writing into a directory that does not exist names the file and the cause.
        let e = write_atomic(&dir.path().join("nosuch/x.toml"), b"").unwrap_err();
        assert!(
            e.to_string().contains("nosuch/x.toml") && e.to_string().contains("No such file"),
            "{e}"
        );
    }

    #[test]
    fn a_rewritten_file_keeps_its_owner() {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        // Never a silent pass: a run that cannot do the test fails, saying why.
        assert!(
            root,
            "this test needs root (chown): run scripts/test.sh as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ferrouter.toml");
        fs::write(&p, "a = 1\n").unwrap();
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        write_atomic(&p, b"a = 2\n").unwrap();
        let md = fs::metadata(&p).unwrap();
        assert_eq!((md.uid(), md.gid()), (65534, 65534));
        assert_eq!(fs::read_to_string(&p).unwrap(), "a = 2\n");
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
