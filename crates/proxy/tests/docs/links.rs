//! Every relative link (and `#anchor`) of the front page, `docs/` and
//! `bench/README.md` resolves, and the pages keep their sizes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::{read, repo, report, unfenced};

/// The pages a newcomer reads, and the most lines each may have.
const PAGES: &[(&str, usize)] = &[
    ("README.md", 250),
    ("bench/README.md", 200),
    ("docs/ARCHITECTURE.md", 450),
];

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to hyphens.
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

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in unfenced(text).lines().filter(|l| l.starts_with('#')) {
        let base = slug(line.trim_start_matches('#'));
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

/// Every `](target)` of a page outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in unfenced(text).lines() {
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].split(' ').next().unwrap_or_default().to_owned());
            rest = &rest[end..];
        }
    }
    out
}

fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned(), "bench/README.md".to_owned()];
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    pages.sort();
    pages
}

#[test]
fn every_relative_link_resolves() {
    let mut failures = Vec::new();
    let pages = pages();
    assert!(pages.len() >= 9, "{pages:?}");
    for page in &pages {
        let text = read(page);
        let dir = Path::new(page).parent().unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                PathBuf::from(page)
            } else {
                dir.join(path)
            };
            let full = repo().join(&target);
            if !full.exists() {
                failures.push(format!(
                    "{page}: ({link}): {} does not exist",
                    target.display()
                ));
                continue;
            }
            let markdown = target.extension().is_some_and(|e| e == "md");
            if !anchor.is_empty() && markdown {
                let text = std::fs::read_to_string(&full).unwrap();
                if !anchors(&text).contains(anchor) {
                    failures.push(format!(
                        "{page}: ({link}): no heading #{anchor} in {}",
                        target.display()
                    ));
                }
            }
        }
    }
    for (page, most) in PAGES {
        let lines = read(page).lines().count();
        if lines > *most {
            failures.push(format!("{page} has {lines} lines; at most {most}"));
        }
    }
    report(&failures);
}
