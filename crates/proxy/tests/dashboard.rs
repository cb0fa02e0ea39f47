//! `deploy/grafana/orthrus.json` against a live `/metrics`: every series a
//! panel or variable queries is one that orthrus serves, with the labels
//! the query matches on, so that renaming a metric cannot leave the
//! dashboard charting nothing.
//!
//! The PromQL in the dashboard is read by a small scanner: enough of the
//! language (selectors, functions, aggregations with `by`, ranges, Grafana
//! variables) to find the metric names and label matchers, not an
//! evaluator. A query it cannot read fails the test rather than passing
//! unread.

mod common;

use std::collections::{BTreeSet, HashMap};

use common::admin::{get, parse_sample, spawn_with_admin, wait_status};
use serde_json::Value;

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/grafana/orthrus.json"
);

/// Labels Prometheus adds when it scrapes, which `/metrics` never shows.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];
/// Grafana's own variables.
const GRAFANA_VARIABLES: [&str; 4] = ["__rate_interval", "__interval", "__range", "__all"];

/// `name{label op "value", ...}` as written in a query.
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: Vec<(String, String, String)>,
}

/// What the scanner found in one query.
#[derive(Debug, Default)]
struct Query {
    selectors: Vec<Selector>,
    /// Function and aggregation names, in order.
    functions: Vec<String>,
    /// The label lists of `by (...)`, `without (...)`, `on (...)`, ...
    groupings: Vec<Vec<String>>,
    /// Grafana variables (`$name`, `${name}`).
    variables: Vec<String>,
}

/// What `/metrics` serves: each sample name with the label sets it has.
struct Exposition {
    samples: HashMap<String, Vec<Vec<(String, String)>>>,
    types: HashMap<String, String>,
}

#[test]
fn every_metric_the_dashboard_queries_is_served() {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(DASHBOARD).expect("read the dashboard"))
            .expect("the dashboard is JSON");
    check_layout(&dashboard);
    let variables = variable_names(&dashboard);

    let mut queries = Vec::new();
    collect_exprs(&dashboard, &mut queries);
    assert!(queries.len() >= 10, "only {} queries found", queries.len());
    let mut scanned: Vec<(String, Query)> = queries
        .into_iter()
        .map(|expr| {
            let query = scan(&expr);
            (expr, query)
        })
        .collect();
    for (expr, metric) in template_queries(&dashboard) {
        let query = Query {
            selectors: vec![Selector {
                metric,
                matchers: Vec::new(),
            }],
            ..Query::default()
        };
        scanned.push((expr, query));
    }

    let live = live_exposition();
    let mut used = BTreeSet::new();
    for (expr, query) in &scanned {
        assert!(!query.selectors.is_empty(), "no metric found in {expr:?}");
        for selector in &query.selectors {
            check_selector(&live, selector, expr);
            used.insert(selector.metric.clone());
        }
        if query.functions.iter().any(|f| f == "histogram_quantile") {
            assert!(
                query.groupings.iter().any(|g| g.iter().any(|l| l == "le")),
                "histogram_quantile without `le` kept: {expr}"
            );
        }
        for variable in &query.variables {
            assert!(
                GRAFANA_VARIABLES.contains(&variable.as_str()) || variables.contains(variable),
                "${variable} is not a dashboard variable: {expr}"
            );
        }
    }
    // The histograms are charted through their buckets, and the headline
    // series are there.
    for name in [
        "orthrus_command_duration_seconds_bucket",
        "orthrus_command_backend_duration_seconds_bucket",
        "orthrus_command_proxy_duration_seconds_bucket",
        "orthrus_backend_duration_seconds_bucket",
        "orthrus_redirects_total",
        "orthrus_retries_total",
        "orthrus_connected_clients",
        "orthrus_backend_errors_total",
    ] {
        assert!(used.contains(name), "the dashboard does not chart {name}");
    }
}

/// Starts orthrus in front of a cluster, sends traffic so that the
/// histograms have series, and reads `/metrics`.
fn live_exposition() -> Exposition {
    let cluster = common::cluster(3, 0);
    let (proxy, admin) = spawn_with_admin(&cluster.seeds(), &[], &[]);
    wait_status(admin, "/readyz", 200, std::time::Duration::from_secs(20));
    let mut con = proxy.client();
    for i in 0..20 {
        let key = format!("dashboard:{i}");
        let _: () = redis::cmd("SET").arg(&key).arg(i).query(&mut con).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("{key}:h"))
            .arg("f")
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let (status, text) = get(admin, "/metrics");
    assert_eq!(status, 200, "{text}");
    parse_exposition(&text)
}

/// The selector's metric is a served sample name, its label matchers name
/// labels that metric has, and an `=` matcher's value is one it takes.
fn check_selector(live: &Exposition, selector: &Selector, expr: &str) {
    let name = selector.metric.as_str();
    let Some(label_sets) = live.samples.get(name) else {
        let hint = if live.types.get(name).is_some_and(|t| t == "histogram") {
            " (a histogram: query its _bucket, _sum or _count)"
        } else {
            ""
        };
        panic!("{name} is not in /metrics{hint}: {expr}");
    };
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if live.types.contains_key(base) {
                assert_eq!(
                    live.types[base], "histogram",
                    "{name}: {base} is not a histogram"
                );
            }
        }
    }
    for (label, op, value) in &selector.matchers {
        if TARGET_LABELS.contains(&label.as_str()) {
            continue;
        }
        assert!(
            label_sets
                .iter()
                .any(|set| set.iter().any(|(k, _)| k == label)),
            "{name} has no label {label}: {expr}"
        );
        if op == "=" && !value.starts_with('$') {
            assert!(
                label_sets
                    .iter()
                    .any(|set| set.iter().any(|(k, v)| k == label && v == value)),
                "{name} never has {label}=\"{value}\": {expr}"
            );
        }
    }
}

// --- the dashboard ---

/// Panels with unique ids and a place on the grid; every query panel uses
/// the datasource variable and gives each query a refId.
fn check_layout(dashboard: &Value) {
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        let id = panel["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        for key in ["x", "y", "w", "h"] {
            assert!(panel["gridPos"][key].is_u64(), "panel {id}: gridPos.{key}");
        }
        let Some(targets) = panel["targets"].as_array() else {
            assert_eq!(panel["type"], "row", "panel {id} has no targets");
            continue;
        };
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "panel {id}");
        let refs: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().expect("refId"))
            .collect();
        assert_eq!(refs.len(), targets.len(), "panel {id}: refIds repeat");
    }
}

fn variable_names(dashboard: &Value) -> BTreeSet<String> {
    dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| v["name"].as_str().expect("variable name").to_owned())
        .collect()
}

/// Every `expr` string anywhere in the dashboard.
fn collect_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The metric of each query variable's `label_values(metric, label)`.
fn template_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for variable in dashboard["templating"]["list"].as_array().expect("list") {
        if variable["type"] != "query" {
            continue;
        }
        let query = match &variable["query"] {
            Value::String(q) => q.clone(),
            other => other["query"]
                .as_str()
                .expect("a variable's query")
                .to_owned(),
        };
        let args = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("not label_values(metric, label): {query}"));
        let (metric, _label) = args.split_once(',').expect("metric and label");
        found.push((query.clone(), metric.trim().to_owned()));
    }
    found
}

// --- the exposition ---

fn parse_exposition(text: &str) -> Exposition {
    let mut samples: HashMap<String, Vec<Vec<(String, String)>>> = HashMap::new();
    let mut types = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let sample = parse_sample(line);
        samples.entry(sample.name).or_default().push(sample.labels);
    }
    Exposition { samples, types }
}

// --- the PromQL scanner ---

/// Aggregation operators: keywords that may come before their `by`
/// clause rather than before `(`.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

fn scan(expr: &str) -> Query {
    let chars: Vec<char> = expr.chars().collect();
    let mut query = Query::default();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i, expr);
        } else if c == '[' {
            // A range or subquery: durations and Grafana variables.
            let end = find(&chars, i, ']', expr);
            let inner: String = chars[i + 1..end].iter().collect();
            query.variables.extend(variables_in(&inner));
            i = end + 1;
        } else if c == '$' {
            let (name, next) = variable_at(&chars, i, expr);
            query.variables.push(name);
            i = next;
        } else if c == '{' {
            panic!("a selector without a metric name is not supported: {expr}");
        } else if c.is_ascii_digit() || c == '.' {
            while chars
                .get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
            {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            i = scan_identifier(&chars, i, expr, &mut query);
        } else {
            i += 1;
        }
    }
    query
}

/// An identifier at `start`: a function, a keyword, a grouping clause or
/// a metric with its matchers. Returns where scanning goes on.
fn scan_identifier(chars: &[char], start: usize, expr: &str, query: &mut Query) -> usize {
    let mut i = start;
    while chars
        .get(i)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
    {
        i += 1;
    }
    let word: String = chars[start..i].iter().collect();
    let mut next = i;
    while chars.get(next).is_some_and(|c| c.is_whitespace()) {
        next += 1;
    }
    let before_paren = chars.get(next) == Some(&'(');
    let lower = word.to_ascii_lowercase();
    if GROUPING.contains(&lower.as_str()) {
        if before_paren {
            let end = find(chars, next, ')', expr);
            let labels: String = chars[next + 1..end].iter().collect();
            query.groupings.push(
                labels
                    .split(',')
                    .map(|l| l.trim().to_owned())
                    .filter(|l| !l.is_empty())
                    .collect(),
            );
            return end + 1;
        }
        return i;
    }
    if before_paren {
        query.functions.push(word);
        return i;
    }
    if AGGREGATIONS.contains(&lower.as_str()) {
        query.functions.push(word);
        return i;
    }
    if KEYWORDS.contains(&lower.as_str()) {
        return i;
    }
    let mut selector = Selector {
        metric: word,
        matchers: Vec::new(),
    };
    let mut after = i;
    if chars.get(next) == Some(&'{') {
        let end = find(chars, next, '}', expr);
        let inner: String = chars[next + 1..end].iter().collect();
        selector.matchers = matchers(&inner, expr);
        for (_, _, value) in &selector.matchers {
            query.variables.extend(variables_in(value));
        }
        after = end + 1;
    }
    query.selectors.push(selector);
    after
}

/// `label op "value"` pairs, separated by commas outside quotes.
fn matchers(inner: &str, expr: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let op_at = rest
            .find(['=', '!'])
            .unwrap_or_else(|| panic!("bad matcher {rest:?} in {expr}"));
        let label = rest[..op_at].trim().to_owned();
        let after_label = &rest[op_at..];
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| after_label.starts_with(op))
            .unwrap_or_else(|| panic!("bad operator in {rest:?} of {expr}"));
        let value_part = after_label[op.len()..].trim_start();
        let quote = value_part
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .unwrap_or_else(|| panic!("unquoted value in {rest:?} of {expr}"));
        let close = value_part[1..]
            .find(quote)
            .unwrap_or_else(|| panic!("unclosed value in {rest:?} of {expr}"))
            + 1;
        out.push((label, op.to_owned(), value_part[1..close].to_owned()));
        rest = value_part[close + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    out
}

/// Grafana variables in a piece of text.
fn variables_in(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '$' {
            let (name, next) = variable_at(&chars, i, text);
            found.push(name);
            i = next;
        } else {
            i += 1;
        }
    }
    found
}

/// The variable `$name` or `${name}` (`${name:format}`) at `at`.
fn variable_at(chars: &[char], at: usize, expr: &str) -> (String, usize) {
    if chars.get(at + 1) == Some(&'{') {
        let end = find(chars, at + 1, '}', expr);
        let inner: String = chars[at + 2..end].iter().collect();
        let name = inner.split(':').next().unwrap_or_default().to_owned();
        return (name, end + 1);
    }
    let mut i = at + 1;
    while chars
        .get(i)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
    {
        i += 1;
    }
    assert!(i > at + 1, "a lone $ in {expr}");
    (chars[at + 1..i].iter().collect(), i)
}

fn skip_string(chars: &[char], at: usize, expr: &str) -> usize {
    let quote = chars[at];
    let mut i = at + 1;
    while let Some(&c) = chars.get(i) {
        if c == '\\' && quote != '`' {
            i += 2;
            continue;
        }
        if c == quote {
            return i + 1;
        }
        i += 1;
    }
    panic!("unclosed string in {expr}");
}

/// The index of the first `close` after `from`, outside quotes.
fn find(chars: &[char], from: usize, close: char, expr: &str) -> usize {
    let mut i = from + 1;
    while let Some(&c) = chars.get(i) {
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(chars, i, expr);
            continue;
        }
        if c == close {
            return i;
        }
        i += 1;
    }
    panic!("no {close:?} after position {from} in {expr}");
}

#[test]
fn the_scanner_reads_the_queries_it_meets() {
    let q = scan(
        "histogram_quantile(0.99, sum by (le, family) (rate(orthrus_command_duration_seconds_bucket{instance=~\"$instance\"}[$__rate_interval])))",
    );
    assert_eq!(q.selectors.len(), 1);
    assert_eq!(
        q.selectors[0].metric,
        "orthrus_command_duration_seconds_bucket"
    );
    assert_eq!(
        q.selectors[0].matchers,
        [(
            "instance".to_owned(),
            "=~".to_owned(),
            "$instance".to_owned()
        )]
    );
    assert_eq!(q.functions, ["histogram_quantile", "sum", "rate"]);
    assert_eq!(q.groupings, [["le", "family"]]);
    assert_eq!(q.variables, ["instance", "__rate_interval"]);

    let q = scan(
        "sum(rate(a_sum{x=\"1\", y!~'b,c'}[5m] offset 1h)) / on (x) group_left sum without (z) (b_count) > bool 0",
    );
    let names: Vec<&str> = q.selectors.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(names, ["a_sum", "b_count"]);
    assert_eq!(q.selectors[0].matchers.len(), 2);
    assert_eq!(q.selectors[0].matchers[1].2, "b,c");
    assert_eq!(q.groupings, [vec!["x"], vec!["z"]]);

    assert_eq!(scan("max by(role, health) (m)").selectors[0].metric, "m");
    assert_eq!(scan("${datasource_x:raw} + m2").variables, ["datasource_x"]);
}
