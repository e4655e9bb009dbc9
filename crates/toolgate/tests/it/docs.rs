//! The documentation's links: every Markdown link in the repository's own
//! pages points inside the repository, at a file that exists and, with a
//! `#fragment`, at a heading that exists there. A reader of a clone (or of the
//! crate's source) never meets a link into a folder they do not have.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The Markdown pages of the repository (not `target/`, not hidden folders).
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `[text](target)` links outside code spans and fenced blocks.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans: a `[x](y)` inside backticks is an example, not a link.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((number + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, spaces to `-`, punctuation dropped.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let anchor: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        out.insert(anchor);
    }
    out
}

/// What is wrong with one link from `page`, if anything.
fn check(root: &Path, page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") || target.starts_with("//") {
        return Some("points outside the repository".into());
    }
    let (file, fragment) = match target.split_once('#') {
        Some((file, fragment)) => (file, Some(fragment)),
        None => (target, None),
    };
    let resolved = if file.is_empty() {
        page.to_path_buf()
    } else if file.starts_with('/') {
        return Some("is an absolute path".into());
    } else {
        let mut path = page.parent().unwrap().to_path_buf();
        for component in Path::new(file).components() {
            match component {
                Component::ParentDir => {
                    path.pop();
                }
                Component::Normal(part) => path.push(part),
                _ => {}
            }
        }
        path
    };
    if !resolved.starts_with(root) {
        return Some("points outside the repository".into());
    }
    if !resolved.exists() {
        return Some("names a file that does not exist".into());
    }
    if let Some(fragment) = fragment {
        if resolved.extension().is_some_and(|ext| ext == "md") {
            let text = std::fs::read_to_string(&resolved).unwrap();
            if !anchors(&text).contains(fragment) {
                return Some(format!("names a heading `#{fragment}` that does not exist"));
            }
        }
    }
    None
}

#[test]
fn every_link_stays_inside_the_repository_and_resolves() {
    let root = repository();
    let pages = pages(&root);
    for expected in [
        "README.md",
        "docs/README.md",
        "docs/protocol.md",
        "docs/contributing/benchmarks.md",
        "scripts/README.md",
    ] {
        assert!(
            pages.contains(&root.join(expected)),
            "{expected} not found among the pages under {}",
            root.display()
        );
    }
    let mut problems = Vec::new();
    let mut seen = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (line, target) in links(&text) {
            seen += 1;
            if let Some(problem) = check(&root, page, &target) {
                let shown = page.strip_prefix(&root).unwrap_or(page).display();
                problems.push(format!("{shown}:{line}: link `{target}` {problem}"));
            }
        }
    }
    assert!(seen > 0, "no links found: the link reader is broken");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself, on links it must refuse and accept.
#[test]
fn the_link_checker_refuses_what_it_should() {
    let root = repository();
    let readme = root.join("README.md");
    let cases = [
        ("docs/protocol.md", None),
        ("#install", None),
        ("docs/protocol.md#state-directory", None),
        (
            "../shared/spec/protocol-v1.md",
            Some("points outside the repository"),
        ),
        (
            "https://example.com/x",
            Some("points outside the repository"),
        ),
        ("/etc/passwd", Some("is an absolute path")),
        ("missing.md", Some("names a file that does not exist")),
        (
            "#no-such-heading",
            Some("names a heading `#no-such-heading` that does not exist"),
        ),
    ];
    for (target, expected) in cases {
        assert_eq!(
            check(&root, &readme, target).as_deref(),
            expected,
            "{target}"
        );
    }
    // From a page under docs/: relative to that page's folder.
    let status = root.join("docs/contributing/status.md");
    let cases = [
        ("benchmarks.md", None),
        ("../shell.md#known-limits", None),
        ("../../README.md#install", None),
        ("../protocol.md#modes", None),
        ("shell.md", Some("names a file that does not exist")),
        (
            "../shell.md#no-such-heading",
            Some("names a heading `#no-such-heading` that does not exist"),
        ),
        (
            "../../../shared/spec/protocol-v1.md",
            Some("points outside the repository"),
        ),
    ];
    for (target, expected) in cases {
        assert_eq!(
            check(&root, &status, target).as_deref(),
            expected,
            "{target} from docs/contributing/status.md"
        );
    }
    assert_eq!(
        links("see [a](b.md) and `[c](d)`\n```\n[e](f)\n```\n[g](h#i)"),
        vec![(1, "b.md".to_string()), (5, "h#i".to_string())]
    );
}
