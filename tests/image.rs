//! The container image, as far as it can be checked without a container engine: the Dockerfile
//! passes hadolint (which rejects a bad one), the binary built exactly as the Dockerfile builds
//! it is static (no ELF interpreter, no dynamic section) and runs, and the chart's default image
//! is the one the Dockerfile documents.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::repo_root;

fn hadolint() -> PathBuf {
    let out = Command::new(repo_root().join("tests/image/hadolint"))
        .output()
        .expect("tests/image/hadolint");
    assert!(
        out.status.success(),
        "installing hadolint failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn lint(dockerfile: &Path) -> Output {
    Command::new(hadolint())
        .args(["--no-color", "--failure-threshold", "info"])
        .arg(dockerfile)
        .output()
        .expect("running hadolint")
}

#[test]
fn the_dockerfile_passes_hadolint() {
    let out = lint(&repo_root().join("Dockerfile"));
    assert!(
        out.status.success(),
        "hadolint:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn hadolint_rejects_a_dockerfile_with_an_unpinned_base_and_a_root_user() {
    let bad = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("Dockerfile.bad");
    std::fs::write(&bad, "FROM debian:latest\nRUN cd /tmp && make\nUSER root\n").unwrap();
    let out = lint(&bad);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "hadolint must reject it:\n{text}");
    for rule in ["DL3007", "DL3003", "DL3002"] {
        assert!(text.contains(rule), "{rule} reported:\n{text}");
    }
}

/// What a 64-bit little-endian ELF file asks of the system at start: whether it names a
/// dynamic loader (`PT_INTERP`), and how many shared libraries its dynamic section needs
/// (`DT_NEEDED`). A static-pie binary has a dynamic section (to relocate itself) but neither.
struct Needs {
    interpreter: bool,
    libraries: usize,
}

fn needs(elf: &[u8]) -> Needs {
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    const DT_NEEDED: u64 = 1;
    assert_eq!(&elf[..4], b"\x7fELF", "an ELF file");
    assert_eq!(elf[4], 2, "64-bit");
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let phoff = u64_at(0x20) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    let mut out = Needs {
        interpreter: false,
        libraries: 0,
    };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32_at(ph) {
            PT_INTERP => out.interpreter = true,
            PT_DYNAMIC => {
                let (offset, size) = (u64_at(ph + 0x08) as usize, u64_at(ph + 0x20) as usize);
                out.libraries += (offset..offset + size)
                    .step_by(16)
                    .filter(|&d| u64_at(d) == DT_NEEDED)
                    .count();
            }
            _ => {}
        }
    }
    out
}

#[test]
fn the_binary_built_as_the_dockerfile_builds_it_is_static_and_runs() {
    // The Dockerfile's build step, in a target directory of its own.
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("ENV RUSTFLAGS=\"-C target-feature=+crt-static\""));
    assert!(
        dockerfile.contains("cargo build --release --locked --target x86_64-unknown-linux-gnu")
    );
    let target_dir = repo_root().join("target/image");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--bin",
            "disruption-guard",
        ])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_TARGET_DIR", &target_dir)
        .current_dir(repo_root())
        .status()
        .expect("cargo build");
    assert!(status.success(), "the Dockerfile's cargo build failed");
    let binary = target_dir.join("x86_64-unknown-linux-gnu/release/disruption-guard");

    let image = needs(&std::fs::read(&binary).unwrap());
    assert!(!image.interpreter, "no dynamic loader needed");
    assert_eq!(image.libraries, 0, "no shared library needed");
    // The dynamically linked build of the same crate needs both: the check tells them apart.
    let dynamic = needs(&std::fs::read(env!("CARGO_BIN_EXE_disruption-guard")).unwrap());
    assert!(dynamic.interpreter && dynamic.libraries > 0);

    let out = Command::new(&binary).arg("crd").output().unwrap();
    assert!(out.status.success(), "the static binary runs");
    assert!(String::from_utf8_lossy(&out.stdout).contains("testwindows.disruption-guard.io"));
    let size = std::fs::metadata(&binary).unwrap().len();
    println!(
        "static release binary: {:.1} MiB",
        size as f64 / 1024.0 / 1024.0
    );
}

#[test]
fn the_charts_default_image_is_the_one_the_dockerfile_documents() {
    let values: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("charts/disruption-guard/values.yaml")).unwrap(),
    )
    .unwrap();
    let chart: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("charts/disruption-guard/Chart.yaml")).unwrap(),
    )
    .unwrap();
    let repository = values["image"]["repository"].as_str().unwrap();
    let tag = values["image"]["tag"]
        .as_str()
        .filter(|t| !t.is_empty())
        .or(chart["appVersion"].as_str())
        .unwrap();
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("docker build -t {repository}:{tag} .")),
        "the Dockerfile documents building {repository}:{tag}"
    );
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "the chart's appVersion is the crate's version"
    );
}
