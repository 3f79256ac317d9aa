//! Records the commit the binary is built from, for `ferrouter --version`: the short hash,
//! with `-dirty` when tracked files differ from it, or `unknown` outside a git checkout
//! (a source tarball) or without git.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    // No optional locks: `git status` would otherwise refresh the index, which this script
    // watches, and every build would rerun it.
    let out = Command::new("git")
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=FERROUTER_COMMIT={commit}");
    // Rebuild the version string when the checkout moves or its files change.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "index", "refs", "packed-refs"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
