//! Running the GitHub Action (`examples/github-action`) as its tests do: with node, as the
//! Actions runner runs it, or with GitHub's `@github/local-action` (pinned, installed into the
//! component cache on first use by `tests/tools/npm-tool`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use super::repo_root;

/// Runs the action's `script` (`main.js`, `post.js`) with node and the environment `env`, as
/// the runner runs a step.
pub fn node_step(script: &str, env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new("node");
    cmd.arg(repo_root().join("examples/github-action").join(script));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("node (Node.js) runs the action")
}

/// The `@github/local-action` release the action is tested with.
const LOCAL_ACTION_VERSION: &str = "7.0.1";

/// The `local-action` command, installed once per test binary.
pub fn local_action() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(repo_root().join("tests/tools/npm-tool"))
            .args(["@github/local-action", LOCAL_ACTION_VERSION, "local-action"])
            .output()
            .expect("running tests/tools/npm-tool");
        assert!(
            out.status.success(),
            "installing @github/local-action failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// Runs the action with `local-action run examples/github-action main.js DOTENV`, adding
/// `--post post.js` when `post`: one node process runs `main`'s `run()` and then `post`'s, with
/// the inputs and environment of the dotenv file. It runs in local-action's install directory,
/// where `npm exec` finds its tsx and `npm ls` finds the `@actions/core` that local-action
/// replaces with its stub; the stub then answers the action's `require('@actions/core')`.
pub fn local_action_run(dotenv: &Path, post: bool) -> Output {
    let bin = local_action();
    // <install directory>/node_modules/.bin/local-action
    let install = bin.ancestors().nth(3).unwrap();
    let action = repo_root().join("examples/github-action");
    let mut cmd = Command::new(bin);
    cmd.arg("run").arg(&action).arg("main.js").arg(dotenv);
    if post {
        // Absolute: local-action 7.0.1 resolves --post before it knows the action's directory.
        cmd.arg("--post").arg(action.join("post.js"));
    }
    cmd.current_dir(install)
        .env("FORCE_COLOR", "0")
        .output()
        .expect("running local-action")
}
