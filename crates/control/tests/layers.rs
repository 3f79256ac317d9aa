//! The crate's files import each other without a circle (issue 24): each file's `crate::`
//! uses, outside comments and test modules, form a graph this test checks for cycles.
//! The same check runs over `dataplane` (its engine must not know its nodes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `module -> modules it uses`, from the `.rs` files directly in `dir` and the modules
/// that are directories (`name/mod.rs` and the files beside it count as module `name`).
fn imports(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let (name, code) = if p.is_dir() && p.join("mod.rs").is_file() {
            let mut code = String::new();
            for f in std::fs::read_dir(&p).unwrap() {
                let f = f.unwrap().path();
                if f.extension().is_some_and(|x| x == "rs")
                    && f.file_stem().is_some_and(|s| s != "tests")
                {
                    let text = std::fs::read_to_string(&f).unwrap();
                    code.push_str(text.split("#[cfg(test)]").next().unwrap_or(""));
                    code.push('\n');
                }
            }
            (p.file_name().unwrap().to_string_lossy().to_string(), code)
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            // Test modules may use anything.
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
            (p.file_stem().unwrap().to_string_lossy().to_string(), code)
        } else {
            continue;
        };
        let mut uses = BTreeSet::new();
        for line in code.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            let mut rest = line;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + 7..];
                if let Some(group) = rest.strip_prefix('{') {
                    for m in group.split('}').next().unwrap_or("").split(',') {
                        let m: String = m
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !m.is_empty() {
                            uses.insert(m);
                        }
                    }
                } else {
                    let m: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !m.is_empty() {
                        uses.insert(m);
                    }
                }
            }
        }
        uses.remove(&name);
        g.insert(name, uses);
    }
    g
}

/// A cycle in `g`, if any, as the modules along it.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if g.contains_key(m) {
                if let Some(c) = visit(g, m, path, done) {
                    return Some(c);
                }
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(g, n, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

fn check(krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let g = imports(&dir);
    assert!(
        g.len() > 5,
        "{krate}: read {} files from {}",
        g.len(),
        dir.display()
    );
    if let Some(c) = cycle(&g) {
        panic!(
            "{krate}: files import each other in a circle: {}",
            c.join(" -> ")
        );
    }
    g
}

#[test]
fn control_files_import_without_a_circle() {
    let g = check("control");
    // The sync is a directory module (mirror, program, views): read as one module.
    assert!(g.contains_key("sync") && g.contains_key("daemon"), "{g:?}");
}

#[test]
fn dataplane_files_import_without_a_circle() {
    check("dataplane");
}

#[test]
fn the_check_finds_a_circle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    g.get_mut("c").unwrap().clear();
    assert_eq!(cycle(&g), None);
}
