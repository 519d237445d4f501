//! The operator as the last landed version built it: the binary an upgrade starts from.
//!
//! Built from the repository's own history (`git archive` of [`PREVIOUS`]) into a target
//! directory of its own under this build's, seeded with hard links to this build's compiled
//! dependencies (the same Cargo.lock): only the crate itself is compiled, in about half a
//! minute. Built once; later runs reuse it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The last landed version: the commit whose operator wrote one field manager per window.
pub const PREVIOUS: &str = "cb66ad3ff35cc72b01aae964c54534b335b3cd4c";

/// This build's target directory.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo_root().join("target"))
}

fn run(what: &str, cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(status.success(), "{what} failed: {status}");
}

/// Hard links of every file under `from` in `to` (directories made), but never Cargo's lock
/// files: a lock shared through a link would lock both builds.
fn link_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let (path, dest) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            link_tree(&path, &dest);
        } else if kind.is_file() && entry.file_name() != ".cargo-lock" && !dest.exists() {
            // A file that cannot be linked is simply rebuilt.
            let _ = std::fs::hard_link(&path, &dest);
        }
    }
}

/// The previous version's operator binary, built on first use.
pub fn binary() -> PathBuf {
    let root = target_dir().join("previous").join(&PREVIOUS[..12]);
    let binary = root.join("debug/disruption-guard");
    if binary.exists() {
        return binary;
    }
    let source = root.join("source");
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source).expect("mkdir");
    let tar = source.join("previous.tar");
    run(
        "git archive (the repository's history is needed)",
        Command::new("git")
            .current_dir(super::repo_root())
            .args(["archive", "--format=tar", "-o"])
            .arg(&tar)
            .arg(PREVIOUS),
    );
    run(
        "unpacking the previous version",
        Command::new("tar")
            .arg("-xf")
            .arg(&tar)
            .arg("-C")
            .arg(&source),
    );
    for part in ["deps", "build", ".fingerprint"] {
        let from = target_dir().join("debug").join(part);
        if from.exists() {
            link_tree(&from, &root.join("debug").join(part));
        }
    }
    run(
        "building the previous version",
        Command::new(env!("CARGO"))
            .current_dir(&source)
            .env("CARGO_TARGET_DIR", &root)
            .args(["build", "--quiet", "--bin", "disruption-guard"]),
    );
    assert!(binary.exists(), "no binary at {}", binary.display());
    binary
}
