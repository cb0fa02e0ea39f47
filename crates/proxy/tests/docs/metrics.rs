//! `docs/metrics.md` against what a live orthrus serves: every Prometheus
//! series (with its labels) and every INFO field orthrus produces.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::admin::{get, spawn_with_admin, wait_status};
use crate::{code, codes, read, report, table_rows, unfenced};

const PAGE: &str = "docs/metrics.md";

/// Names with the label names (series) or section (INFO fields) they have.
type Names = BTreeMap<String, BTreeSet<String>>;

/// What a live orthrus serves: Prometheus families with their label names,
/// and INFO fields by section.
struct Served {
    series: Names,
    info: Names,
}

/// orthrus in front of a 3-master cluster, after traffic that makes every
/// per-family, per-node, per-command and per-error line appear.
fn served() -> Served {
    let cluster = crate::common::cluster(3, 0);
    let (proxy, admin) = spawn_with_admin(&cluster.seeds(), &[], &[]);
    wait_status(admin, "/readyz", 200, Duration::from_secs(20));
    let mut con = proxy.client();
    for i in 0..30 {
        let key = format!("docs:{i}");
        let hash = format!("{key}:h");
        let _: () = redis::cmd("SET").arg(&key).arg(i).query(&mut con).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&hash)
            .arg("f")
            .arg(i)
            .query(&mut con)
            .unwrap();
        let both: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&key)
            .arg(&hash)
            .query(&mut con)
            .unwrap();
        assert_eq!(both, [Some(i.to_string()), None]);
    }
    // Errors, for INFO errorstats.
    redis::cmd("HGET")
        .arg("docs:0")
        .arg("f")
        .query::<()>(&mut con)
        .unwrap_err();
    redis::cmd("NOSUCHCOMMAND")
        .query::<()>(&mut con)
        .unwrap_err();
    let info: String = redis::cmd("INFO")
        .arg("everything")
        .query(&mut con)
        .unwrap();
    let (status, text) = get(admin, "/metrics");
    assert_eq!(status, 200, "{text}");
    Served {
        series: exposition(&text),
        info: info_fields(&info),
    }
}

/// Each family of a `/metrics` text with its label names (`le` aside).
fn exposition(text: &str) -> Names {
    let mut series = Names::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap().to_owned();
            series.entry(name).or_default();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, labels) = line
            .split_once('{')
            .unwrap_or((line.split(' ').next().unwrap(), ""));
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| series.contains_key(*b)))
            .unwrap_or(name);
        let entry = series.entry(family.to_owned()).or_default();
        let names = labels.split(',').filter_map(|pair| pair.split_once('='));
        entry.extend(
            names
                .map(|(label, _)| label.to_owned())
                .filter(|l| l != "le"),
        );
    }
    series
}

/// Each INFO section with the fields orthrus itself produces: persistence
/// and memory are the masters' own fields, merged, except orthrus's own
/// `orthrus_` memory.
fn info_fields(info: &str) -> Names {
    let mut fields = Names::new();
    let mut section = String::new();
    for line in info.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("# ") {
            section = name.to_ascii_lowercase();
        } else if let Some((field, _)) = line.split_once(':') {
            let nodes =
                section == "persistence" || (section == "memory" && !field.starts_with("orthrus_"));
            if !nodes {
                fields
                    .entry(section.clone())
                    .or_default()
                    .insert(field.to_owned());
            }
        }
    }
    fields
}

/// `name` matches a documented name, where `<...>` stands for one or
/// more characters.
fn matches(documented: &str, name: &str) -> bool {
    fn go(glob: &[u8], name: &[u8]) -> bool {
        match glob.split_first() {
            None => name.is_empty(),
            Some((b'*', rest)) => (1..=name.len()).any(|n| go(rest, &name[n..])),
            Some((c, rest)) => name.first() == Some(c) && go(rest, &name[1..]),
        }
    }
    let mut glob = String::new();
    let mut inside = false;
    for c in documented.chars() {
        match c {
            '<' => inside = true,
            '>' if inside => {
                inside = false;
                glob.push('*');
            }
            _ if inside => {}
            c => glob.push(c),
        }
    }
    go(glob.as_bytes(), name.as_bytes())
}

/// The Prometheus table: a row per served series, naming its labels, and
/// no row for a series not served.
fn check_series(page: &str, served: &Names, failures: &mut Vec<String>) {
    let rows = table_rows(page, "series");
    let documented: BTreeMap<&str, &Vec<String>> = rows
        .iter()
        .filter_map(|row| Some((code(&row[0])?, row)))
        .collect();
    for (name, labels) in served {
        let Some(row) = documented.get(name.as_str()) else {
            failures.push(format!("the series {name} has no row in {PAGE}"));
            continue;
        };
        if row.len() != 5 || row[1..].iter().any(String::is_empty) {
            failures.push(format!(
                "{name}: a row needs five cells, none empty: {row:?}"
            ));
            continue;
        }
        for label in labels
            .iter()
            .filter(|l| !codes(&row[2]).contains(&l.as_str()))
        {
            failures.push(format!("{name}: its label {label} is not in its row"));
        }
    }
    for name in documented.keys().filter(|n| !served.contains_key(**n)) {
        failures.push(format!(
            "{PAGE} names the series {name}, which /metrics does not serve"
        ));
    }
}

/// The INFO table (`field | section | unit | meaning`): a row per field
/// orthrus produces, and none for a field it does not. Returns the
/// documented names.
fn check_info(page: &str, served: &Names, failures: &mut Vec<String>) -> Vec<String> {
    let mut documented: Vec<(String, String)> = Vec::new();
    for row in table_rows(page, "field") {
        let Some(name) = code(&row[0]) else { continue };
        if row.len() != 4 || row[1..].iter().any(String::is_empty) {
            failures.push(format!(
                "INFO {name}: a row needs four cells, none empty: {row:?}"
            ));
        }
        documented.push((row[1].to_ascii_lowercase(), name.to_owned()));
    }
    for (section, fields) in served {
        for field in fields {
            if !documented
                .iter()
                .any(|(s, d)| s == section && matches(d, field))
            {
                failures.push(format!(
                    "the INFO field {field} ({section}) has no row in {PAGE}"
                ));
            }
        }
    }
    // A row "on Valkey nodes only" is served only in front of Valkey.
    let valkey = orthrus_devcluster::server_kind().engine == orthrus_devcluster::Engine::Valkey;
    for (section, name) in &documented {
        let live = served.get(section);
        let valkey_only = table_rows(page, "field").iter().any(|row| {
            code(&row[0]) == Some(name)
                && row
                    .last()
                    .is_some_and(|m| m.contains("on Valkey nodes only"))
        });
        if valkey_only && !valkey {
            continue;
        }
        if !live.is_some_and(|fields| fields.iter().any(|f| matches(name, f))) {
            failures.push(format!(
                "{PAGE} names the INFO field {name} ({section}), which INFO does not give"
            ));
        }
    }
    documented.into_iter().map(|(_, name)| name).collect()
}

#[test]
fn metrics_doc_names_every_series_and_info_field() {
    let page = read(PAGE);
    let served = served();
    let mut failures = Vec::new();
    check_series(&page, &served.series, &mut failures);
    let documented = check_info(&page, &served.info, &mut failures);
    // Names in the prose too: every `orthrus_...` the page mentions is served.
    for word in codes(&unfenced(&page)) {
        let name = word.split(['{', ' ']).next().unwrap_or_default();
        let known = served.series.contains_key(name)
            || served.info.values().flatten().any(|f| f == name)
            || documented.iter().any(|d| d == name);
        if name.starts_with("orthrus_") && !known {
            failures.push(format!(
                "{PAGE} mentions `{word}`, which orthrus does not serve"
            ));
        }
    }
    report(&failures);
}
