//! The man pages and shell completions: in, the daemon's clap `Command` (what the binary parses),
//! its `RUNQLAT_*` variables and deploy/debian/latency-daemon.8.in (the prose clap cannot know);
//! out, a tree of `man/man8/*.8` and `completions/*` ([`files`] lists it), which the .deb installs
//! where [`files`] says, and which is laid out to go into a tarball as it is. Options, defaults, allowed values and commands come from the `Command`, so
//! the pages cannot drift from the binary.
//!
//! The main page, latency-daemon(8), is the template with each `.\" @part` line replaced by that
//! part; one page per command (latency-daemon-run(8), …) is generated whole, as git and systemd
//! do it for their commands.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap_complete::Shell;
// The main page's own parts (commands, environment) in clap_mangen's escaping.
use clap_mangen::roff::{Roff, bold, roman};

use super::Release;

/// The template of the main page, in the repository.
pub const TEMPLATE: &str = "deploy/debian/latency-daemon.8.in";
/// The program's name: the main page's, the completions' and each command page's prefix.
const NAME: &str = "latency-daemon";
const SECTION: &str = "8";

/// Each completion: the shell, its file in the tree, and where the .deb installs it.
pub const COMPLETIONS: [(Shell, &str, &str); 3] = [
    (Shell::Bash, "completions/latency-daemon.bash", "/usr/share/bash-completion/completions/latency-daemon"),
    (Shell::Zsh, "completions/_latency-daemon", "/usr/share/zsh/vendor-completions/_latency-daemon"),
    (Shell::Fish, "completions/latency-daemon.fish", "/usr/share/fish/vendor_completions.d/latency-daemon.fish"),
];

/// Where the pages go in the tree (`man/man8/<page>.8`, uncompressed) and as installed
/// (`/usr/share/man/man8/<page>.8.gz`).
pub const MAN_DIR: (&str, &str) = ("man/man8", "/usr/share/man/man8");

/// Every file of the tree, relative to it, and where the .deb installs it (a page gzipped).
pub fn files(dir: &Path) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut pages: Vec<String> = std::fs::read_dir(dir.join(MAN_DIR.0))
        .with_context(|| format!("reading {}", dir.join(MAN_DIR.0).display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(&format!(".{SECTION}")))
        .collect();
    pages.sort();
    if !pages.iter().any(|p| *p == format!("{NAME}.{SECTION}")) {
        bail!("{} has no {NAME}.{SECTION}: not a tree `manual::write` made", dir.display());
    }
    let mut files: Vec<(PathBuf, String)> =
        pages.into_iter().map(|p| (Path::new(MAN_DIR.0).join(&p), format!("{}/{p}.gz", MAN_DIR.1))).collect();
    files.extend(COMPLETIONS.iter().map(|(_, tree, installed)| (PathBuf::from(tree), (*installed).to_owned())));
    Ok(files)
}

/// Writes the pages and completions of `command` into `dir` (emptied first). `variables` are the
/// `RUNQLAT_*` variables `run` reads with their flags; the pages' date is the release's.
pub fn write(
    command: clap::Command,
    variables: &[(String, String)],
    release: &Release,
    root: &Path,
    dir: &Path,
) -> anyhow::Result<()> {
    let template = std::fs::read_to_string(root.join(TEMPLATE)).with_context(|| format!("reading {TEMPLATE}"))?;
    let mut command = command.subcommand_help_heading("COMMANDS").subcommand_value_name("COMMAND");
    // clap_complete names the program itself, which a built command (its commands' names fixed
    // as `latency-daemon run`) would not take.
    let unbuilt = command.clone();
    command.build();
    let date = &super::rfc3339(release.epoch)[..10];
    let source = format!("{NAME} {}", release.version);

    let _ = std::fs::remove_dir_all(dir);
    let man = dir.join(MAN_DIR.0);
    std::fs::create_dir_all(&man).with_context(|| format!("creating {}", man.display()))?;
    let put =
        |path: PathBuf, text: &str| std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()));
    put(man.join(format!("{NAME}.{SECTION}")), &main_page(&command, variables, &template, date, &source)?)?;
    for sub in commands(&command) {
        let name = sub.get_display_name().unwrap_or(sub.get_name()).to_owned();
        put(man.join(format!("{name}.{SECTION}")), &command_page(sub, date, &source)?)?;
    }
    for (shell, path, _) in COMPLETIONS {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().context("a completion's folder")?)?;
        std::fs::write(&path, completion(shell, &unbuilt)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `shell`'s completion script. clap_complete's bash script spells its states two ways for a name
/// with a dash (clap-rs/clap#6421: `latency__daemon__subcmd__run` in the loop,
/// `latency__subcmd__daemon__subcmd__run` in the arms), so nothing after a command completes; it
/// is generated for `latency_daemon`, whose spellings agree, and registered for `latency-daemon`.
fn completion(shell: Shell, command: &clap::Command) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    if shell != Shell::Bash {
        clap_complete::generate(shell, &mut command.clone(), NAME, &mut bytes);
        return Ok(String::from_utf8(bytes)?);
    }
    let stand_in = NAME.replace('-', "_");
    clap_complete::generate(shell, &mut command.clone(), &stand_in, &mut bytes);
    let script = String::from_utf8(bytes)?;
    let mut registered = 0;
    let lines: Vec<String> = script
        .lines()
        .map(|line| match line.strip_suffix(&format!(" {stand_in}")) {
            Some(rest) if line.trim_start().starts_with("complete ") => {
                registered += 1;
                format!("{rest} {NAME}")
            }
            _ => line.to_owned(),
        })
        .collect();
    if registered == 0 {
        bail!("clap_complete's bash script has no `complete … {stand_in}` line to register for {NAME}");
    }
    Ok(lines.join("\n") + "\n")
}

/// The commands a user can type (clap's own `help` left out).
fn commands(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// The template with each part filled in; its `.\"` comments left out.
fn main_page(
    command: &clap::Command,
    variables: &[(String, String)],
    template: &str,
    date: &str,
    source: &str,
) -> anyhow::Result<String> {
    let man = man(command.clone(), date, source);
    let mut page = String::new();
    let mut seen = Vec::new();
    for line in template.lines() {
        let Some(comment) = line.strip_prefix(".\\\"") else {
            page.push_str(line);
            page.push('\n');
            continue;
        };
        let Some(part) = comment.trim().strip_prefix('@') else { continue };
        let mut out = Vec::new();
        match part {
            "header" => man.render_title(&mut out)?,
            "name" => man.render_name_section(&mut out)?,
            "synopsis" => man.render_synopsis_section(&mut out)?,
            "options" => man.render_options_section(&mut out)?,
            "commands" => out.extend(command_list(command).to_roff().bytes()),
            "environment" => out.extend(environment(variables).to_roff().bytes()),
            "see-also" => out.extend(see_also(command).to_roff().bytes()),
            other => bail!(
                "{TEMPLATE}: no part `@{other}` (header, name, synopsis, options, commands, environment, see-also)"
            ),
        }
        seen.push(part.to_owned());
        page.push_str(&String::from_utf8(out)?);
    }
    for part in ["header", "name", "synopsis", "options", "commands", "environment", "see-also"] {
        if !seen.iter().any(|s| s == part) {
            bail!("{TEMPLATE} has no `.\\\" @{part}` line");
        }
    }
    Ok(one_preamble(&page))
}

/// A command's page: what clap knows of it (its `after_help` as the description's last paragraph),
/// then a pointer to the main page.
fn command_page(command: &clap::Command, date: &str, source: &str) -> anyhow::Result<String> {
    let man = man(command.clone(), date, source);
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    let mut roff = Roff::new();
    if let Some(after) = command.get_after_long_help().or(command.get_after_help()) {
        roff.control("PP", []).text([roman(after.to_string())]);
    }
    roff.control("PP", []).text([
        roman("The environment, files, signals and exit status of every command are in "),
        bold(NAME),
        roman(format!("({SECTION}).")),
    ]);
    out.extend(roff.to_roff().bytes());
    man.render_options_section(&mut out)?;
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]).text([bold(NAME), roman(format!("({SECTION})"))]);
    out.extend(roff.to_roff().bytes());
    Ok(one_preamble(&String::from_utf8(out)?))
}

/// clap_mangen's page of `command`, in section 8, with each option's visible aliases in its text
/// (clap_mangen shows only the long name; `run --help` shows both).
fn man(command: clap::Command, date: &str, source: &str) -> clap_mangen::Man {
    let mut command = command;
    let ids: Vec<(String, Vec<String>)> = command
        .get_arguments()
        .filter_map(|a| {
            let aliases: Vec<String> = a.get_visible_aliases()?.into_iter().map(|s| format!("--{s}")).collect();
            Some((a.get_id().to_string(), aliases))
        })
        .collect();
    for (id, aliases) in ids {
        command = command.mut_arg(id, |a| {
            let help = a.get_help().map(ToString::to_string).unwrap_or_default();
            a.help(format!("{help} [aliases: {}]", aliases.join(", ")))
        });
    }
    let title = command.get_display_name().unwrap_or(command.get_name()).to_uppercase();
    clap_mangen::Man::new(command)
        .title(title)
        .section(SECTION)
        .date(date)
        .source(source)
        .manual("System Administration")
}

/// COMMANDS: each command, what it does, and its page.
fn command_list(command: &clap::Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for sub in commands(command) {
        let page = sub.get_display_name().unwrap_or(sub.get_name());
        let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
        // clap drops a summary's final period.
        let stop = if about.ends_with('.') { "" } else { "." };
        roff.control("TP", [])
            .text([bold(sub.get_name())])
            .text([roman(format!("{about}{stop} See "))])
            .text([bold(page), roman(format!("({SECTION})."))]);
    }
    roff
}

/// Each variable of `run` and the flag it stands for, one line each (a variable longer than the
/// column has its flag on the next line, so the list fits 80 columns).
fn environment(variables: &[(String, String)]) -> Roff {
    let mut roff = Roff::new();
    roff.control("PP", []).control("PD", ["0"]);
    for (variable, flag) in variables {
        roff.control("TP", ["32n"]).text([bold(variable)]).text([bold(flag)]);
    }
    roff.control("PD", []);
    roff
}

/// The command pages, comma-separated (the template adds the others after them).
fn see_also(command: &clap::Command) -> Roff {
    let mut roff = Roff::new();
    for sub in commands(command) {
        let page = sub.get_display_name().unwrap_or(sub.get_name());
        roff.control("BR", [page, &format!("({SECTION}),")]);
    }
    roff
}

/// The text with roff's apostrophe preamble (every clap_mangen part starts with it) only at its top.
fn one_preamble(page: &str) -> String {
    const PREAMBLE: [&str; 2] = [".ie \\n(.g .ds Aq \\(aq", ".el .ds Aq '"];
    let body: String = page.lines().filter(|l| !PREAMBLE.contains(l)).flat_map(|l| [l, "\n"]).collect();
    format!("{}\n{}\n{body}", PREAMBLE[0], PREAMBLE[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preamble_is_written_once() {
        let page = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH X 8\n.ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.SH NAME\n";
        assert_eq!(one_preamble(page), ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH X 8\n.SH NAME\n");
    }

    #[test]
    fn aliases_reach_the_option_text() {
        let command = clap::Command::new("x")
            .arg(clap::Arg::new("listen").long("listen").visible_alias("web.listen-address").help("Where"));
        let mut out = Vec::new();
        man(command, "2026-01-01", "x 1").render_options_section(&mut out).unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("[aliases: \\-\\-web.listen\\-address]"), "{text}");
    }
}
