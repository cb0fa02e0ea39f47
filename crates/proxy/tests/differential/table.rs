//! The case table of the differential test: parsing `cases.txt` (its
//! format is described at its top) and checking it is well formed.

#![allow(clippy::wildcard_imports)]

use super::*;

/// Parses the table: `## category`, `case name`, then one step per line,
/// `[mode] ARG ARG ...`, where `~` stands for the case name.
pub(super) fn parse_cases(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut category = String::from("uncategorised");
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(c) = line.strip_prefix("## ") {
            category = c.trim().to_string();
        } else if line.is_empty() || line.starts_with('#') {
            continue;
        } else if let Some(name) = line.strip_prefix("case ") {
            let name = name.trim().to_string();
            cases.push(Case {
                category: category.clone(),
                name,
                steps: Vec::new(),
            });
        } else {
            let case = cases
                .last_mut()
                .unwrap_or_else(|| panic!("line {}: step before any case", n + 1));
            let (mode, rest) = parse_mode(line).unwrap_or_else(|e| panic!("line {}: {e}", n + 1));
            let args = tokenize(rest, &case.name).unwrap_or_else(|e| panic!("line {}: {e}", n + 1));
            match case.steps.last_mut() {
                Some(last) if mode == Mode::Pipeline && last.mode == Mode::Pipeline => {
                    last.cmds.push(args)
                }
                _ if matches!(mode, Mode::Sleep(_) | Mode::Read) => case.steps.push(Step {
                    mode,
                    cmds: Vec::new(),
                }),
                _ => case.steps.push(Step {
                    mode,
                    cmds: vec![args],
                }),
            }
        }
    }
    cases
}

pub(super) fn parse_mode(line: &str) -> Result<(Mode, &str), String> {
    let Some(rest) = line.strip_prefix('[') else {
        return Ok((Mode::Exact, line));
    };
    let (spec, rest) = rest.split_once(']').ok_or("unclosed [mode]")?;
    let mut words = spec.split_whitespace();
    let number = |w: Option<&str>| {
        w.and_then(|w| w.parse::<u64>().ok())
            .ok_or(format!("[{spec}] needs a number"))
    };
    let mode = match words.next().unwrap_or_default() {
        "split" => Mode::Split,
        "unordered" => Mode::Unordered,
        "unordered-deep" => Mode::UnorderedDeep,
        "pairs" => Mode::Pairs,
        "near" => Mode::Near(number(words.next())? as i64),
        "shape" => Mode::Shape,
        "ignore" => Mode::Ignore,
        "crossslot" => Mode::CrossSlot,
        "refused" => Mode::Refused,
        "proxy-only" => Mode::ProxyOnly,
        "queue-refused" => Mode::QueueRefused,
        "execabort" => Mode::ExecAbort,
        "side" => Mode::Side,
        "scan" => Mode::Scan,
        "inline" => Mode::Inline,
        "read" => Mode::Read,
        "send" => Mode::Send,
        "pipe" => Mode::Pipeline,
        "sleep" => Mode::Sleep(number(words.next())?),
        other => return Err(format!("unknown mode [{other}]")),
    };
    // `[MODE on ENGINE]`: that mode on that engine, byte-identical on the
    // other.
    let mode = match (words.next(), words.next()) {
        (None, _) => mode,
        (Some("on"), Some(engine)) => {
            let running = match orthrus_devcluster::server_kind().engine {
                orthrus_devcluster::Engine::Redis => "redis",
                orthrus_devcluster::Engine::Valkey => "valkey",
            };
            if engine == running { mode } else { Mode::Exact }
        }
        (Some(other), _) => return Err(format!("[{spec}]: unexpected {other:?}")),
    };
    Ok((mode, rest.trim_start()))
}

/// Splits on spaces; `"..."` may hold spaces and the escapes `\" \\ \r \n
/// \t \0 \xHH`; a bare `~` becomes the case name.
pub(super) fn tokenize(line: &str, name: &str) -> Result<Args, String> {
    let bytes = line.as_bytes();
    let mut args = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        let mut arg = Vec::new();
        if bytes[i] == b'"' {
            i += 1;
            loop {
                let c = *bytes.get(i).ok_or("unclosed quote")?;
                i += 1;
                match c {
                    b'"' => break,
                    b'~' => arg.extend_from_slice(name.as_bytes()),
                    b'\\' => {
                        let e = *bytes.get(i).ok_or("dangling backslash")?;
                        i += 1;
                        match e {
                            b'r' => arg.push(b'\r'),
                            b'n' => arg.push(b'\n'),
                            b't' => arg.push(b'\t'),
                            b'0' => arg.push(0),
                            b'x' => {
                                let hex = line.get(i..i + 2).ok_or("short \\x escape")?;
                                arg.push(u8::from_str_radix(hex, 16).map_err(|e| e.to_string())?);
                                i += 2;
                            }
                            other => arg.push(other),
                        }
                    }
                    other => arg.push(other),
                }
            }
        } else {
            while i < bytes.len() && bytes[i] != b' ' {
                match bytes[i] {
                    b'~' => arg.extend_from_slice(name.as_bytes()),
                    c => arg.push(c),
                }
                i += 1;
            }
        }
        args.push(arg);
    }
    Ok(args)
}

/// Catches mistakes in the table itself before anything runs.
pub(super) fn check_table(cases: &[Case]) {
    assert!(cases.len() >= 200, "only {} cases", cases.len());
    let mut names = BTreeSet::new();
    for case in cases {
        assert!(names.insert(case.name.as_str()), "case {} twice", case.name);
        assert!(!case.steps.is_empty(), "case {} has no steps", case.name);
        for step in &case.steps {
            if matches!(step.mode, Mode::Split | Mode::CrossSlot) {
                let slots: BTreeSet<u16> = step.cmds[0]
                    .iter()
                    .skip(1)
                    .filter(|a| contains(a, case.name.as_bytes()))
                    .map(|k| Slot::for_key(k).get())
                    .collect();
                assert!(
                    slots.len() >= 2,
                    "case {}: its keys do not span slots",
                    case.name
                );
            }
        }
    }
}

pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
