//! `docs/configuration.md` against the configuration struct and the flags
//! of the real binary.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::{code, codes, read, report, table_rows};

const PAGE: &str = "docs/configuration.md";

/// Every setting as a dotted key, with its default as JSON: the leaves of
/// the configuration struct's defaults, `None`s included (an empty map,
/// `client.users`, is a leaf).
fn settings_in_code() -> BTreeMap<String, serde_json::Value> {
    fn walk(
        prefix: &str,
        value: &serde_json::Value,
        out: &mut BTreeMap<String, serde_json::Value>,
    ) {
        match value {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            _ => {
                out.insert(prefix.to_owned(), value.clone());
            }
        }
    }
    let defaults = serde_json::to_value(orthrus_proxy::config::Config::default()).unwrap();
    let mut out = BTreeMap::new();
    walk("", &defaults, &mut out);
    out
}

fn orthrus(args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orthrus"));
    cmd.args(args).env_remove("ORTHRUS_CONFIG");
    let out = crate::common::run_to_exit(cmd, Duration::from_secs(20));
    assert!(out.status.success(), "orthrus {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The keys `orthrus --check-config` prints (settings left unset are not
/// printed): `[section]` headers and `key = value` lines.
fn settings_printed() -> BTreeSet<String> {
    let text = orthrus(&["--check-config", "--seeds", "127.0.0.1:1"]);
    let mut section = String::new();
    let mut keys = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = format!("{name}.");
        } else if let Some((key, _)) = line.split_once(" = ") {
            keys.insert(format!("{section}{}", key.trim()));
        }
    }
    keys
}

/// Each flag of `orthrus --help` with the environment variable its help
/// names (the setting it sets), if any.
fn flags_in_help() -> BTreeMap<String, Option<String>> {
    let help = orthrus(&["--help"]);
    let mut flags: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        let flag = trimmed
            .strip_prefix("-h, ")
            .or_else(|| trimmed.strip_prefix("-V, "))
            .unwrap_or(trimmed);
        let indent = line.len() - trimmed.len();
        if flag.starts_with("--") && (1..=6).contains(&indent) {
            let name = flag.split([' ', '=']).next().unwrap().to_owned();
            flags.insert(name.clone(), None);
            current = Some(name);
        }
        if let (Some(name), Some(at)) = (&current, line.find("env ORTHRUS_")) {
            let var: String = line[at + 4..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            flags.insert(name.clone(), Some(var));
        }
    }
    assert!(flags.len() >= 10, "too few flags in --help:\n{help}");
    flags
}

/// Settings read from the configuration file only (tables of tables: no
/// environment variable or flag spells them); their rows say `—`.
const FILE_ONLY: &[&str] = &["upstreams", "routes"];

fn env_name(key: &str) -> String {
    format!("ORTHRUS_{}", key.to_ascii_uppercase().replace('.', "__"))
}

/// One setting's row: six cells, its environment variable, exactly the
/// flags that set it, and its default.
fn check_row(
    key: &str,
    row: &[String],
    default: &serde_json::Value,
    flags: &BTreeMap<String, Option<String>>,
    failures: &mut Vec<String>,
) {
    if row.len() != 6 || row[1..].iter().any(String::is_empty) {
        failures.push(format!(
            "`{key}`: a row needs six cells, none empty: {row:?}"
        ));
        return;
    }
    let env = env_name(key);
    let file_only = FILE_ONLY.contains(&key) && row[1] == "—";
    if !file_only && !code(&row[1]).is_some_and(|e| e.starts_with(&env)) {
        failures.push(format!(
            "`{key}`: its environment variable is {env}, not {}",
            row[1]
        ));
    }
    for (flag, var) in flags {
        let sets = var.as_deref() == Some(env.as_str());
        let listed = codes(&row[2]).contains(&flag.as_str());
        if sets && !listed {
            failures.push(format!(
                "`{key}`: the flag {flag} sets it; its row does not say so"
            ));
        }
        if listed && !sets {
            failures.push(format!("`{key}`: {flag} does not set it ({var:?})"));
        }
    }
    let shown = match default {
        serde_json::Value::Null | serde_json::Value::Object(_) => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    if let Some(shown) = shown.filter(|s| !codes(&row[4]).contains(&s.as_str())) {
        failures.push(format!(
            "`{key}`: its default is `{shown}`, the row says {}",
            row[4]
        ));
    }
}

/// Every `--flag` the page names is one orthrus takes, and every flag
/// orthrus takes is named.
fn check_flags_named(
    page: &str,
    flags: &BTreeMap<String, Option<String>>,
    failures: &mut Vec<String>,
) {
    let words: BTreeSet<&str> = page
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w[2..].starts_with(|c: char| c.is_ascii_lowercase()))
        .collect();
    for word in &words {
        if !flags.contains_key(*word) {
            failures.push(format!("{PAGE} names {word}, which orthrus does not take"));
        }
    }
    for flag in flags.keys() {
        if !words.contains(flag.as_str()) {
            failures.push(format!("the flag {flag} is not in {PAGE}"));
        }
    }
}

#[test]
fn configuration_doc_names_every_setting_and_flag() {
    let page = read(PAGE);
    let settings = settings_in_code();
    for key in settings_printed() {
        assert!(
            settings.contains_key(&key),
            "--check-config prints {key}, which the configuration struct's defaults do not have"
        );
    }
    let flags = flags_in_help();
    let mut documented = BTreeSet::new();
    let mut failures = Vec::new();
    for row in table_rows(&page, "TOML key") {
        let Some(key) = code(&row[0]) else { continue };
        documented.insert(key.to_owned());
        match settings.get(key) {
            Some(default) => check_row(key, &row, default, &flags, &mut failures),
            None => failures.push(format!("{PAGE} names `{key}`, which is not a setting")),
        }
    }
    for key in settings.keys().filter(|k| !documented.contains(*k)) {
        failures.push(format!("the setting `{key}` has no row in {PAGE}"));
    }
    check_flags_named(&page, &flags, &mut failures);
    report(&failures);
}
