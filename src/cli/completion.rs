//! `disruption-guard completion bash|zsh|fish`: shell completion scripts, generated from the
//! command-line definition by `clap_complete`, so they always match the binary that prints them.
//!
//! ```sh
//! # bash: this shell only, or for every new shell
//! source <(disruption-guard completion bash)
//! disruption-guard completion bash > ~/.local/share/bash-completion/completions/disruption-guard
//! # zsh: a directory on $fpath
//! disruption-guard completion zsh > "${fpath[1]}/_disruption-guard"
//! # fish
//! disruption-guard completion fish > ~/.config/fish/completions/disruption-guard.fish
//! ```

use std::io::Write;

use clap::{Args, ValueEnum};
use clap_complete::Shell as Generator;

/// The shells a completion script can be printed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    fn generator(self) -> Generator {
        match self {
            Shell::Bash => Generator::Bash,
            Shell::Zsh => Generator::Zsh,
            Shell::Fish => Generator::Fish,
        }
    }
}

/// Which shell to print the completion script for.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Load it into the current bash shell: source <(disruption-guard completion bash)\n\
    zsh: disruption-guard completion zsh > \"${fpath[1]}/_disruption-guard\"\n\
    fish: disruption-guard completion fish > ~/.config/fish/completions/disruption-guard.fish"
)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The completion script for `shell` of the command line `command` (`Cli::command()`).
pub fn script(shell: Shell, mut command: clap::Command) -> String {
    let name = command.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(shell.generator(), &mut command, &name, &mut out);
    let text = String::from_utf8(out).expect("clap_complete writes UTF-8");
    match shell {
        Shell::Bash => fix_bash_hyphenated_name(text, &name),
        Shell::Zsh | Shell::Fish => text,
    }
}

/// clap_complete's bash script (through 4.6.12) spells the state of a subcommand of a
/// hyphenated binary two ways: its dispatch loop sets `disruption__guard__subcmd__run`, while
/// the arm that offers `run`'s options is labelled `disruption__subcmd__guard__subcmd__run`, so
/// nothing after a subcommand ever completes (clap-rs/clap#6421). Spell the arms as the loop
/// does; once clap_complete is fixed the mangled label no longer occurs and this changes nothing.
fn fix_bash_hyphenated_name(text: String, name: &str) -> String {
    let mangled = name.replace('-', "__subcmd__");
    if mangled == name {
        return text;
    }
    text.replace(&mangled, &name.replace('-', "__"))
}

/// Prints the completion script for `shell` of `command` to stdout.
pub fn print(shell: Shell, command: clap::Command) -> anyhow::Result<()> {
    std::io::stdout()
        .lock()
        .write_all(script(shell, command).as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory;

    #[test]
    fn every_shell_completes_the_subcommands() {
        for shell in Shell::value_variants() {
            let text = script(*shell, Cli::command());
            assert!(
                text.contains("disruption-guard"),
                "{shell:?}: no binary name"
            );
            for subcommand in [
                "operator",
                "crd",
                "openapi",
                "open",
                "close",
                "renew",
                "get",
                "list",
                "run",
                "completion",
            ] {
                assert!(
                    text.contains(subcommand),
                    "{shell:?}: subcommand {subcommand} missing"
                );
            }
        }
    }

    #[test]
    fn global_flags_and_shell_names_are_completed() {
        for shell in Shell::value_variants() {
            let text = script(*shell, Cli::command());
            for word in ["server", "namespace", "kubeconfig", "bash", "zsh", "fish"] {
                assert!(text.contains(word), "{shell:?}: {word} missing");
            }
        }
    }

    #[test]
    fn each_shell_gets_its_own_syntax() {
        let bash = script(Shell::Bash, Cli::command());
        assert!(bash.contains("complete -F _disruption__guard"), "{bash}");
        assert!(bash.contains(" disruption-guard\n"), "{bash}");
        // Every state the dispatch loop sets has an arm offering that subcommand's options.
        assert!(!bash.contains("disruption__subcmd__guard"), "{bash}");
        for subcommand in ["open", "run", "completion"] {
            let state = format!("disruption__guard__subcmd__{subcommand}");
            assert!(bash.contains(&format!("cmd=\"{state}\"")), "{bash}");
            assert!(bash.contains(&format!("        {state})\n")), "{bash}");
        }
        assert!(script(Shell::Zsh, Cli::command()).starts_with("#compdef disruption-guard"));
        assert!(script(Shell::Fish, Cli::command()).contains("complete -c disruption-guard"));
    }

    #[test]
    fn the_command_line_parses_the_shell() {
        use clap::Parser;
        let cli = Cli::try_parse_from(["disruption-guard", "completion", "zsh"]).unwrap();
        assert!(matches!(
            cli.command,
            crate::cli::Command::Completion(CompletionArgs { shell: Shell::Zsh })
        ));
        assert!(Cli::try_parse_from(["disruption-guard", "completion", "tcsh"]).is_err());
    }
}
