//! The operator documentation against the code it describes, so that a
//! setting, a flag, a metric or a page added without its line fails here:
//!
//! - `docs/configuration.md` has a row for every setting of the
//!   configuration struct and every `orthrus` flag, and none for a setting
//!   or flag that does not exist. The settings are read from the code
//!   (`Config::default()` serialized, `None`s included) and from the real
//!   binary (`orthrus --check-config`); the flags from `orthrus --help`.
//! - `docs/metrics.md` has a row for every Prometheus series and every
//!   INFO field a live orthrus serves in front of a real cluster after
//!   some traffic, and none for one it does not serve.
//! - every relative link (and `#anchor`) of the front page, `docs/` and
//!   `bench/README.md` resolves, and the pages keep their sizes.

mod common;
#[path = "docs/configuration.rs"]
mod configuration;
#[path = "docs/links.rs"]
mod links;
#[path = "docs/metrics.rs"]
mod metrics;

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

// --- tables in the pages ---

/// The rows of every Markdown table in `text` whose header's first cell is
/// `first`, each as its cells, trimmed.
fn table_rows(text: &str, first: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            inside = false;
            continue;
        }
        let cells: Vec<String> = line
            .trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_owned())
            .collect();
        if cells.first().is_some_and(|c| c == first) {
            inside = true;
        } else if inside && !cells[0].starts_with("---") {
            rows.push(cells);
        }
    }
    rows
}

/// The text between the first pair of backticks of a cell.
fn code(cell: &str) -> Option<&str> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(&cell[start..start + len])
}

/// Every backticked word of a cell.
fn codes(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// The page without its fenced code blocks.
fn unfenced(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Fails with every finding at once, one per line.
#[track_caller]
fn report(failures: &[String]) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
