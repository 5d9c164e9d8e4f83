//! The repository's markdown: every relative link resolves (file, and heading when it names
//! one), the front door stays one screen, and prose lines and table cells stay readable; and
//! each crate keeps its integration tests in one binary.
//! It lives here because the webhook crate's tests already read files of the repository
//! (manifests, examples); it reads only the checkout and needs nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Longest prose line (outside code blocks and tables) and longest table cell, in characters.
const MAX_PROSE_LINE: usize = 200;
const MAX_TABLE_CELL: usize = 200;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the webhook crate sits in the workspace root")
        .to_path_buf()
}

/// Every `*.md` under the root, skipping build output and hidden directories.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("read a directory of the checkout") {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(path);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The lines of a file outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a file's headings, duplicates numbered as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Inline link targets `[text](target)` of one line, inline code spans left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut without_code = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            without_code.push_str(part);
        }
    }
    let mut out = Vec::new();
    let mut rest = without_code.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// One problem per string: `file:line: what`.
fn broken_links(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for file in markdown_files(root) {
        let text = fs::read_to_string(&file).expect("markdown is UTF-8");
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty()
                    || target.contains("://")
                    || target.starts_with("mailto:")
                    || target.contains(' ')
                {
                    continue;
                }
                let (path_part, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let dest = if path_part.is_empty() {
                    file.clone()
                } else {
                    normalize(&file.parent().unwrap_or(root).join(path_part))
                };
                if !dest.exists() {
                    problems.push(format!("{rel}:{n}: {target}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if dest.extension().and_then(|e| e.to_str()) != Some("md") {
                    continue;
                }
                let dest_text = fs::read_to_string(&dest).expect("linked markdown is UTF-8");
                if !anchors(&dest_text).contains(anchor) {
                    problems.push(format!("{rel}:{n}: {target}: no heading with that anchor"));
                }
            }
        }
    }
    problems
}

#[test]
fn slug_matches_github() {
    let cases = [
        (
            "Hierarchical memory protection (`src/ancestors/`)",
            "hierarchical-memory-protection-srcancestors",
        ),
        (
            "When the policy changes: running pods follow",
            "when-the-policy-changes-running-pods-follow",
        ),
        ("HTTP/2", "http2"),
        (
            "Memory protection (`make memqos`)",
            "memory-protection-make-memqos",
        ),
        ("1. The annotation", "1-the-annotation"),
    ];
    for (heading, want) in cases {
        assert_eq!(slug(heading), want, "{heading}");
    }
    let text = "# A\n## A\n```\n# not a heading\n```\n### A\n";
    let got: Vec<String> = anchors(text).into_iter().collect();
    assert_eq!(got, ["a", "a-1", "a-2"]);
}

#[test]
fn link_targets_skip_code_spans() {
    assert_eq!(link_targets("see [x](a.md#b) and `[y](c.md)`"), ["a.md#b"]);
    assert_eq!(link_targets("[a](x.md), [b](y.md)"), ["x.md", "y.md"]);
}

#[test]
fn the_checker_finds_a_broken_link() {
    let dir = std::env::temp_dir().join(format!("koord-docs-test-{}", std::process::id()));
    fs::create_dir_all(dir.join("docs")).expect("temporary dir");
    fs::write(
        dir.join("README.md"),
        "[ok](docs/a.md#here) [bad](docs/a.md#gone) [no](b.md)\n",
    )
    .expect("write");
    fs::write(dir.join("docs/a.md"), "# Here\n[up](../README.md)\n").expect("write");
    let problems = broken_links(&dir);
    fs::remove_dir_all(&dir).expect("remove temporary dir");
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].contains("docs/a.md#gone"), "{problems:#?}");
    assert!(problems[1].contains("b.md: no such file"), "{problems:#?}");
}

#[test]
fn every_relative_link_resolves() {
    let root = repo_root();
    assert!(
        root.join("README.md").exists(),
        "no README.md at {}",
        root.display()
    );
    let problems = broken_links(&root);
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn front_doors_stay_short() {
    let root = repo_root();
    for (file, max) in [
        ("README.md", 190),
        ("webhook/README.md", 160),
        ("applier/README.md", 160),
    ] {
        let lines = fs::read_to_string(root.join(file))
            .expect("read")
            .lines()
            .count();
        assert!(lines <= max, "{file} has {lines} lines, at most {max}");
    }
}

#[test]
fn prose_lines_and_table_cells_stay_readable() {
    let root = repo_root();
    let mut problems = Vec::new();
    for file in markdown_files(&root) {
        let text = fs::read_to_string(&file).expect("read");
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (n, line) in prose_lines(&text) {
            if line.trim_start().starts_with('|') {
                for cell in line.split('|') {
                    let len = cell.trim().chars().count();
                    if len > MAX_TABLE_CELL {
                        problems.push(format!("{rel}:{n}: a table cell of {len} characters"));
                    }
                }
            } else if line.chars().count() > MAX_PROSE_LINE {
                problems.push(format!(
                    "{rel}:{n}: a line of {} characters",
                    line.chars().count()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `make X` in the README's code blocks names a target of the Makefile.
#[test]
fn readme_make_targets_exist() {
    let root = repo_root();
    let makefile = fs::read_to_string(root.join("Makefile")).expect("read Makefile");
    let targets: BTreeSet<&str> = makefile
        .lines()
        .filter_map(|l| l.split_once(':').map(|(t, _)| t))
        .filter(|t| !t.is_empty() && !t.starts_with(['.', '\t', '#', ' ']))
        .collect();
    let readme = fs::read_to_string(root.join("README.md")).expect("read README.md");
    let mut fenced = false;
    let mut missing = Vec::new();
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if fenced && words.first() == Some(&"make") {
            for target in words[1..].iter().take_while(|w| !w.starts_with('#')) {
                if !targets.contains(target) {
                    missing.push(target.to_string());
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README names make targets the Makefile lacks: {missing:?}"
    );
}

/// Each crate's integration tests are one binary (`tests/it/`), and its attack tests a second
/// one (`tests/attack/`: a latency bound under attack needs the machine to itself). Every
/// `tests/*.rs` file, and every other `tests/<dir>/main.rs`, would be a binary of its own that
/// links kube, tokio and rustls again (a clean `cargo test --workspace --no-run` paid that per
/// file).
#[test]
fn every_crate_has_one_integration_test_binary() {
    let root = repo_root();
    let mut extra = Vec::new();
    for krate in fs::read_dir(&root).expect("read the checkout") {
        let tests = krate.expect("directory entry").path().join("tests");
        if !tests.join("../Cargo.toml").is_file() || !tests.is_dir() {
            continue;
        }
        for entry in fs::read_dir(&tests).expect("read tests/") {
            let path = entry.expect("directory entry").path();
            let binary = if path.is_dir() {
                path.join("main.rs").is_file() && !path.ends_with("it") && !path.ends_with("attack")
            } else {
                path.extension().is_some_and(|e| e == "rs")
            };
            if binary {
                extra.push(
                    path.strip_prefix(&root)
                        .unwrap_or(&path)
                        .display()
                        .to_string(),
                );
            }
        }
    }
    assert!(
        extra.is_empty(),
        "integration tests outside tests/it/ and tests/attack/ (a test binary each; make them modules of tests/it/main.rs): {extra:?}"
    );
}
