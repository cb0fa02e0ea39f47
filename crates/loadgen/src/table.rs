//! The original's fixed-width text table, one block per concurrency level.
//!
//! The layout is the published Cerberus comparison's, reproduced exactly for
//! one measured target so the two can be read side by side:
//!
//! ```text
//! 1 concurrency
//! Test|      Single Redis     |    Cerberus + Cluster    |
//! set |  Min     Max     Avg  |    Min     Max     Avg   | Ratio
//! ----+-------+-------+-------+--------+--------+--------+------
//! keys|16.8164|16.8425|16.8295| 28.9120| 29.0358| 28.9739|58.08%
//! ```
//!
//! Each column group is three cells as wide as its widest number (at least
//! 7), the group's heading and the `Min Max Avg` line are centred over it
//! with the odd space on the left, and the Ratio columns come last. With
//! more than one measured target, each Ratio column is headed by its
//! target's name on the first line, so the columns stay attributable.

use crate::results::{LevelResult, PerSet, SetName, Stats, TargetInfo};

/// The original's `Min Max Avg` heading for a 7-wide group; wider groups
/// centre it.
const MIN_MAX_AVG: &str = "  Min     Max     Avg  ";
/// The narrowest number cell, `16.8164`.
const MIN_CELL: usize = 7;
/// The narrowest Ratio cell, `58.08%`.
const MIN_RATIO: usize = 6;

/// One column group: a target's Min/Max/Avg cells.
struct Group {
    label: String,
    cell: usize,
    cells: PerSet<[String; 3]>,
}

/// One Ratio column.
struct RatioColumn {
    name: String,
    width: usize,
    cells: PerSet<String>,
}

/// The text block for one level: the `N concurrency` line, two heading
/// lines, the separator and the keys/hash/list/proc rows, each ending in
/// `\n`. Targets are matched by name; one missing from `level` is skipped.
pub fn render_level(level: &LevelResult, targets: &[TargetInfo]) -> String {
    let mut groups = Vec::new();
    let mut ratios = Vec::new();
    for info in targets {
        let Some(result) = level.target(&info.name) else {
            continue;
        };
        groups.push(Group::new(info.label.clone(), &result.stats));
        if let Some(ratio) = &result.ratio_percent {
            ratios.push(RatioColumn::new(info.name.clone(), ratio));
        }
    }
    let named_ratios = ratios.len() > 1;
    if named_ratios {
        for column in &mut ratios {
            column.width = column.width.max(column.name.len());
        }
    }

    let mut out = format!("{} concurrency\n", level.concurrency);
    let headings: Vec<String> = groups.iter().map(|g| center(&g.label, g.width())).collect();
    out.push_str(&format!("Test|{}|", headings.join("|")));
    if named_ratios {
        let names: Vec<String> = ratios.iter().map(|r| center(&r.name, r.width)).collect();
        out.push_str(&names.join("|"));
    }
    out.push('\n');

    let mut sub: Vec<String> = groups
        .iter()
        .map(|g| center(MIN_MAX_AVG, g.width()))
        .collect();
    sub.extend(ratios.iter().map(|r| format!("{:>1$}", "Ratio", r.width)));
    out.push_str(&format!("set |{}\n", sub.join("|")));

    let mut dashes: Vec<String> = Vec::new();
    for g in &groups {
        dashes.extend(std::iter::repeat_n("-".repeat(g.cell), 3));
    }
    dashes.extend(ratios.iter().map(|r| "-".repeat(r.width)));
    out.push_str(&format!("----+{}\n", dashes.join("+")));

    for set in SetName::ALL {
        let mut cells: Vec<String> = Vec::new();
        for g in &groups {
            cells.extend(g.cells.get(set).iter().map(|c| format!("{c:>0$}", g.cell)));
        }
        cells.extend(
            ratios
                .iter()
                .map(|r| format!("{:>1$}", r.cells.get(set), r.width)),
        );
        out.push_str(&format!("{}|{}\n", set.as_str(), cells.join("|")));
    }
    out
}

/// Seconds as the original printed them: four decimals.
pub fn seconds(value: f64) -> String {
    format!("{value:.4}")
}

/// A ratio as the original printed it: two decimals and a percent sign.
pub fn percent(value: f64) -> String {
    format!("{value:.2}%")
}

/// `text` centred in `width`, the odd space going to the left as in the
/// original (`      Single Redis     `); never truncated.
fn center(text: &str, width: usize) -> String {
    let spare = width.saturating_sub(text.chars().count());
    let left = spare.div_ceil(2);
    format!("{}{text}{}", " ".repeat(left), " ".repeat(spare - left))
}

// === impl Group ===

impl Group {
    fn new(label: String, stats: &PerSet<Stats>) -> Group {
        let cells = PerSet::from_fn(|set| {
            let s = stats.get(set);
            [seconds(s.min), seconds(s.max), seconds(s.avg)]
        });
        let widest = SetName::ALL
            .iter()
            .flat_map(|&set| cells.get(set).iter().map(String::len))
            .max()
            .unwrap_or(0);
        // The heading must fit over the three cells and their two bars.
        let for_label = label.chars().count().saturating_sub(2).div_ceil(3);
        Group {
            cell: widest.max(MIN_CELL).max(for_label),
            label,
            cells,
        }
    }

    fn width(&self) -> usize {
        self.cell * 3 + 2
    }
}

// === impl RatioColumn ===

impl RatioColumn {
    fn new(name: String, ratio: &PerSet<f64>) -> RatioColumn {
        let cells = PerSet::from_fn(|set| percent(*ratio.get(set)));
        let width = SetName::ALL
            .iter()
            .map(|&set| cells.get(set).len())
            .max()
            .unwrap_or(0)
            .max(MIN_RATIO);
        RatioColumn { name, width, cells }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{TargetKind, TargetResult};

    fn stats(min: f64, max: f64, avg: f64) -> Stats {
        Stats {
            min,
            max,
            avg,
            samples: 8,
        }
    }

    fn info(name: &str, label: &str, baseline: bool) -> TargetInfo {
        TargetInfo {
            name: name.into(),
            label: label.into(),
            addr: "127.0.0.1:1".into(),
            kind: TargetKind::External,
            baseline,
        }
    }

    fn result(name: &str, s: PerSet<Stats>, baseline: Option<&PerSet<Stats>>) -> TargetResult {
        let mut r = TargetResult {
            target: name.into(),
            stats: s,
            ratio_percent: None,
            runs: Vec::new(),
        };
        if let Some(b) = baseline {
            r.set_ratio(b);
        }
        r
    }

    fn original_single() -> PerSet<Stats> {
        // The original computed Ratio from unrounded averages: 16.8295 as
        // printed is 16.82948 or so, which gives its 58.08% (16.8295 itself
        // would round to 58.09%).
        PerSet {
            keys: stats(16.8164, 16.8425, 16.82948),
            hash: stats(23.6243, 23.7699, 23.6971),
            list: stats(20.1631, 20.3751, 20.2691),
            proc: stats(60.7756, 60.8158, 60.7957),
        }
    }

    fn original_cerberus() -> PerSet<Stats> {
        PerSet {
            keys: stats(28.9120, 29.0358, 28.9739),
            hash: stats(40.9100, 41.0045, 40.9572),
            list: stats(34.7315, 34.9765, 34.8540),
            proc: stats(104.5535, 105.0168, 104.7852),
        }
    }

    #[test]
    fn reproduces_the_original_block_byte_for_byte() {
        let single = original_single();
        let level = LevelResult {
            concurrency: 1,
            repeats: 4,
            targets: vec![
                result("single", single, None),
                result("cerberus", original_cerberus(), Some(&single)),
            ],
        };
        let targets = [
            info("single", "Single Redis", true),
            info("cerberus", "Cerberus + Cluster", false),
        ];
        let expected = "\
1 concurrency
Test|      Single Redis     |    Cerberus + Cluster    |
set |  Min     Max     Avg  |    Min     Max     Avg   | Ratio
----+-------+-------+-------+--------+--------+--------+------
keys|16.8164|16.8425|16.8295| 28.9120| 29.0358| 28.9739|58.08%
hash|23.6243|23.7699|23.6971| 40.9100| 41.0045| 40.9572|57.86%
list|20.1631|20.3751|20.2691| 34.7315| 34.9765| 34.8540|58.15%
proc|60.7756|60.8158|60.7957|104.5535|105.0168|104.7852|58.02%
";
        assert_eq!(render_level(&level, &targets), expected);
    }

    #[test]
    fn two_targets_get_named_ratio_columns_of_equal_line_length() {
        let single = original_single();
        let level = LevelResult {
            concurrency: 40,
            repeats: 4,
            targets: vec![
                result("single", single, None),
                result("cluster3", original_cerberus(), Some(&single)),
                result("cluster6", single, Some(&single)),
            ],
        };
        let targets = [
            info("single", "Single Redis", true),
            info("cluster3", "Orthrus + Cluster (3)", false),
            info("cluster6", "Orthrus + Cluster (6)", false),
        ];
        let text = render_level(&level, &targets);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 8);
        assert_eq!(lines[0], "40 concurrency");
        assert!(lines[1].ends_with("|cluster3|cluster6"), "{}", lines[1]);
        assert!(lines[2].ends_with("|   Ratio|   Ratio"), "{}", lines[2]);
        assert!(lines[6].ends_with("|  58.15%| 100.00%"), "{}", lines[6]);
        let width = lines[1].len();
        for line in &lines[1..] {
            assert_eq!(line.len(), width, "ragged line {line:?}");
        }
    }

    #[test]
    fn long_labels_widen_their_group() {
        let single = original_single();
        let level = LevelResult {
            concurrency: 5,
            repeats: 1,
            targets: vec![
                result("single", single, None),
                result("other", single, Some(&single)),
            ],
        };
        let label = "a-very-long-external-proxy-name-here";
        let targets = [
            info("single", "Single Redis", true),
            info("other", label, false),
        ];
        let text = render_level(&level, &targets);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains(label));
        let width = lines[1].len();
        for line in &lines[2..] {
            // One Ratio column, as wide as "100.00%".
            assert_eq!(line.len(), width + 7, "{line:?}");
        }
    }

    #[test]
    fn centring_puts_the_odd_space_left() {
        assert_eq!(center("ab", 5), "  ab ");
        assert_eq!(center("abc", 2), "abc");
    }
}
