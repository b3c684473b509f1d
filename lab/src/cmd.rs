//! Running external programs: a command in, its success (or stdout) out, and the command line
//! in every error so a failure says what was run.
use std::process::Command;

use anyhow::{Context as _, bail};

/// The command line as a user would type it, for messages.
pub fn show(cmd: &Command) -> String {
    // PATH is left out: xtask only ever appends $CARGO_HOME/bin to it, and it would drown the rest.
    let envs = cmd
        .get_envs()
        .filter(|(k, _)| *k != "PATH")
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), quoted(&v?.to_string_lossy()))));
    let words = std::iter::once(cmd.get_program()).chain(cmd.get_args());
    envs.chain(words.map(|w| quoted(&w.to_string_lossy()))).collect::<Vec<_>>().join(" ")
}

/// `word` as a shell reads it back: as is when it holds nothing the shell would split or
/// expand, else in single quotes (so a shown command can be pasted).
fn quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Runs with the terminal attached (its output streams as it comes); fails unless it exits 0.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("could not start `{}`", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", show(cmd));
    }
    Ok(())
}

/// Runs quietly and returns stdout; fails unless it exits 0, quoting its stderr.
pub fn stdout(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("could not start `{}`", show(cmd)))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("`{}` failed ({}): {}", show(cmd), out.status, stderr.trim());
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{}` printed non-UTF-8", show(cmd)))
}

#[cfg(test)]
mod tests {
    use super::show;
    use std::process::Command;

    #[test]
    fn shown_commands_paste_back() {
        let mut c = Command::new("sh");
        c.args(["-c", "\"$0\" setup && echo it's", "/usr/bin/x", "--kernels=all", ""]);
        assert_eq!(show(&c), r#"sh -c '"$0" setup && echo it'\''s' /usr/bin/x --kernels=all ''"#);
    }
}
