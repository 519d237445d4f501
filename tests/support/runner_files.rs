//! The runner's file commands as the Actions runner reads them (`GITHUB_OUTPUT`,
//! `GITHUB_STATE`): `name=value` lines, and `name<<DELIMITER` entries whose value runs, over
//! any number of lines, up to the line that is exactly `DELIMITER`.

use std::path::Path;

/// The `(name, value)` entries of a file-command file's text, in order; panics on an entry the
/// runner would refuse (no `=` or `<<`, or a delimiter that never comes).
pub fn entries(text: &str) -> Vec<(String, String)> {
    let mut lines = text.lines();
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        let heredoc = line
            .split_once("<<")
            .filter(|(name, _)| !name.contains('='));
        if let Some((name, delimiter)) = heredoc {
            let mut value = Vec::new();
            loop {
                let next = lines
                    .next()
                    .unwrap_or_else(|| panic!("delimiter {delimiter:?} never came: {text}"));
                if next == delimiter {
                    break;
                }
                value.push(next);
            }
            out.push((name.to_string(), value.join("\n")));
        } else {
            let (name, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("not a file command: {line:?}"));
            out.push((name.to_string(), value.to_string()));
        }
    }
    out
}

/// The entries of the file at `path`.
pub fn read(path: &Path) -> Vec<(String, String)> {
    entries(&std::fs::read_to_string(path).unwrap())
}

/// The last value of `name` in the file at `path` (the runner keeps the last one set).
pub fn value(path: &Path, name: &str) -> Option<String> {
    read(path)
        .into_iter()
        .rev()
        .find_map(|(k, v)| (k == name).then_some(v))
}
