//! The name the binary was invoked under. Installed as `kubectl-guard` (by krew or by hand, on
//! `PATH`), it is a kubectl plugin that kubectl runs for `kubectl guard …`: its help and usage
//! then say `kubectl guard`, so what they show is what the user types. Any other name is
//! `disruption-guard`.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use clap::{CommandFactory, FromArgMatches};

use super::Cli;

/// The file name kubectl looks for on `PATH` to run `kubectl guard`.
pub const PLUGIN_FILE: &str = "kubectl-guard";

/// How the binary is called in help and usage, from `argv[0]` (a path, as kubectl passes it).
pub fn display_name(argv0: Option<&OsStr>) -> &'static str {
    let stem = argv0.and_then(|a| Path::new(a).file_stem());
    if stem == Some(OsStr::new(PLUGIN_FILE)) {
        "kubectl guard"
    } else {
        "disruption-guard"
    }
}

/// The command line, its help and usage under the name of [`display_name`].
pub fn command(argv0: Option<&OsStr>) -> clap::Command {
    Cli::command().bin_name(display_name(argv0))
}

/// Parses `args` (`argv[0]` first); prints help, the version or a usage error and exits as
/// clap does.
pub fn parse_from(args: Vec<OsString>) -> Cli {
    let matches = command(args.first().map(OsString::as_os_str)).get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Parses the process's own arguments.
pub fn parse() -> Cli {
    parse_from(std::env::args_os().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(argv0: &str, args: &[&str]) -> String {
        let mut all = vec![argv0];
        all.extend(args);
        command(Some(OsStr::new(argv0)))
            .try_get_matches_from(all)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn invoked_as_the_plugin_file_the_usage_says_kubectl_guard() {
        assert_eq!(
            display_name(Some(OsStr::new("/usr/local/bin/kubectl-guard"))),
            "kubectl guard"
        );
        assert_eq!(
            display_name(Some(OsStr::new("kubectl-guard.exe"))),
            "kubectl guard"
        );
        let top = help("/home/ci/.krew/bin/kubectl-guard", &["--help"]);
        assert!(
            top.contains("Usage: kubectl guard [OPTIONS] <COMMAND>"),
            "{top}"
        );
        let open = help("/home/ci/.krew/bin/kubectl-guard", &["open", "--help"]);
        assert!(
            open.contains("Usage: kubectl guard open [OPTIONS]"),
            "{open}"
        );
        let wrong = help("kubectl-guard", &["close"]);
        assert!(wrong.contains("Usage: kubectl guard close"), "{wrong}");
    }

    #[test]
    fn under_any_other_name_it_is_disruption_guard() {
        for argv0 in [
            "disruption-guard",
            "/usr/bin/disruption-guard",
            "guard",
            "kubectl-guardx",
        ] {
            assert_eq!(display_name(Some(OsStr::new(argv0))), "disruption-guard");
            let open = help(argv0, &["open", "--help"]);
            assert!(
                open.contains("Usage: disruption-guard open [OPTIONS]"),
                "{open}"
            );
        }
        assert_eq!(display_name(None), "disruption-guard");
    }

    #[test]
    fn the_plugin_parses_as_the_binary_does() {
        let cli = parse_from(
            ["kubectl-guard", "-n", "shop", "list", "-l", "app=web"]
                .map(OsString::from)
                .to_vec(),
        );
        assert_eq!(cli.connection.namespace.as_deref(), Some("shop"));
    }
}
