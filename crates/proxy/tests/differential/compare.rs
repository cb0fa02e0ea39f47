//! Comparing the single server's reply with orthrus's, step by step, by
//! the case's comparison mode.

#![allow(clippy::wildcard_imports)]

use super::*;

pub(super) fn is_refusal(mode: Mode) -> bool {
    matches!(
        mode,
        Mode::CrossSlot | Mode::Refused | Mode::ProxyOnly | Mode::QueueRefused | Mode::ExecAbort
    )
}

pub(super) fn compare(
    case: &Case,
    i: usize,
    step: &Step,
    single: &Got,
    proxy: &Got,
    out: &mut Vec<Mismatch>,
) {
    let mut report = |cmd: usize, s: &[u8], p: &[u8], why: &str| {
        out.push(Mismatch {
            case: case.name.clone(),
            step: i + 1,
            command: step
                .cmds
                .get(cmd)
                .map(|c| show_command(c))
                .unwrap_or_default(),
            single: show(s),
            proxy: show(p),
            why: why.into(),
        });
    };
    let (s, p) = match (single, proxy) {
        (Got::Broken(e), _) => {
            return report(0, e.as_bytes(), b"", "the single server did not answer");
        }
        (Got::Replies(s), Got::Broken(e)) => {
            let s0 = s.first().map(Vec::as_slice).unwrap_or_default();
            return report(0, s0, e.as_bytes(), "orthrus did not answer");
        }
        (_, Got::Broken(e)) => return report(0, b"", e.as_bytes(), "orthrus did not answer"),
        (Got::Replies(s), Got::Replies(p)) => (s.as_slice(), p.as_slice()),
        (Got::Skipped, Got::Replies(p)) => (&[][..], p.as_slice()),
        _ => return,
    };
    let first = |r: &[Vec<u8>]| r.first().cloned().unwrap_or_default();
    let (s0, p0) = (first(s), first(p));
    let pong_ok = p.get(1).is_some_and(|r| r == PONG);
    match step.mode {
        Mode::Sleep(_) | Mode::Send => {}
        Mode::Pipeline => {
            for (j, (a, b)) in s.iter().zip(p).enumerate() {
                if a != b {
                    report(
                        j,
                        a,
                        b,
                        &format!("pipelined reply {} of {} differs", j + 1, s.len()),
                    );
                }
            }
        }
        Mode::Exact | Mode::Split | Mode::Side | Mode::Scan | Mode::Inline | Mode::Read
            if s0 != p0 =>
        {
            report(0, &s0, &p0, "replies differ")
        }
        Mode::Unordered if sorted_elements(&s0, 1) != sorted_elements(&p0, 1) => {
            report(0, &s0, &p0, "elements differ (compared unordered)")
        }
        Mode::UnorderedDeep if deep_sorted(&s0) != deep_sorted(&p0) => report(
            0,
            &s0,
            &p0,
            "elements differ (compared unordered at every depth)",
        ),
        Mode::Pairs if sorted_elements(&s0, 2) != sorted_elements(&p0, 2) => {
            report(0, &s0, &p0, "pairs differ (compared unordered)")
        }
        Mode::Near(tol) if !near(&s0, &p0, tol) => {
            report(0, &s0, &p0, &format!("differ beyond ±{tol}"))
        }
        Mode::Shape if shape(&s0) != shape(&p0) => report(0, &s0, &p0, "reply shapes differ"),
        Mode::CrossSlot if s0.starts_with(b"-") => report(
            0,
            &s0,
            &p0,
            "the single server refused it too: the case is wrong",
        ),
        Mode::CrossSlot if !p0.starts_with(b"-CROSSSLOT") => {
            report(0, &s0, &p0, "expected -CROSSSLOT from orthrus")
        }
        Mode::Refused | Mode::ProxyOnly | Mode::QueueRefused if !p0.starts_with(b"-") => {
            report(0, &s0, &p0, "expected a RESP error from orthrus")
        }
        Mode::ExecAbort if !p0.starts_with(b"-EXECABORT") => {
            report(0, &s0, &p0, "expected -EXECABORT from orthrus")
        }
        Mode::CrossSlot | Mode::Refused | Mode::ProxyOnly | Mode::ExecAbort if !pong_ok => {
            let pong = p.get(1).cloned().unwrap_or_default();
            report(0, &s0, &pong, "PING after the refusal did not answer +PONG")
        }
        _ => {}
    }
}

/// The elements of an aggregate frame (array, set, push or map), or `None`.
pub(super) fn elements(frame: &[u8]) -> Option<Vec<&[u8]>> {
    let kind = *frame.first()?;
    if !matches!(kind, b'*' | b'~' | b'>' | b'%') {
        return None;
    }
    let line_end = frame.windows(2).position(|w| w == b"\r\n")?;
    let n: usize = std::str::from_utf8(&frame[1..line_end])
        .ok()?
        .parse()
        .ok()?;
    let count = if kind == b'%' { n * 2 } else { n };
    let mut at = line_end + 2;
    let mut out = Vec::new();
    for _ in 0..count {
        let len = frame_len(frame, at)?;
        out.push(&frame[at..at + len]);
        at += len;
    }
    Some(out)
}

pub(super) fn bulk_payload(frame: &[u8]) -> Option<&[u8]> {
    let line_end = frame.windows(2).position(|w| w == b"\r\n")?;
    let is_value = frame.first() == Some(&b'$') && !frame.starts_with(b"$-");
    is_value.then(|| &frame[line_end + 2..frame.len() - 2])
}

/// An aggregate's elements, grouped `group` at a time, sorted; other
/// frames unchanged.
pub(super) fn sorted_elements(frame: &[u8], group: usize) -> Vec<Vec<u8>> {
    match elements(frame) {
        Some(items) if items.len() % group == 0 => {
            let mut groups: Vec<Vec<u8>> = items.chunks(group).map(|c| c.concat()).collect();
            groups.sort();
            groups
        }
        _ => vec![frame.to_vec()],
    }
}

/// A canonical form with every aggregate's elements sorted, at every depth.
pub(super) fn deep_sorted(frame: &[u8]) -> Vec<u8> {
    match elements(frame) {
        Some(items) => {
            let mut inner: Vec<Vec<u8>> = items.iter().map(|i| deep_sorted(i)).collect();
            inner.sort();
            let header_end = frame.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
            let mut out = frame[..header_end + 2].to_vec();
            inner.iter().for_each(|i| out.extend_from_slice(i));
            out
        }
        None => frame.to_vec(),
    }
}

/// Types, nullness and element counts, without contents.
pub(super) fn shape(frame: &[u8]) -> String {
    let Some(&kind) = frame.first() else {
        return String::from("nothing");
    };
    match elements(frame) {
        Some(items) => {
            let inner: Vec<String> = items.iter().map(|i| shape(i)).collect();
            format!("{}[{}]", kind as char, inner.join(","))
        }
        None if frame.starts_with(b"$-1")
            || frame.starts_with(b"*-1")
            || frame.starts_with(b"_") =>
        {
            "nil".into()
        }
        None => (kind as char).to_string(),
    }
}

/// Header lines of aggregates and whole leaf frames, depth first.
pub(super) fn leaves<'a>(frame: &'a [u8], out: &mut Vec<&'a [u8]>) {
    match elements(frame) {
        Some(items) => {
            let header_end = frame.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
            out.push(&frame[..header_end]);
            items.iter().for_each(|i| leaves(i, out));
        }
        None => out.push(frame),
    }
}

/// Same structure and bytes, except that integers may differ by `tol`.
pub(super) fn near(a: &[u8], b: &[u8], tol: i64) -> bool {
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    leaves(a, &mut la);
    leaves(b, &mut lb);
    la.len() == lb.len()
        && la
            .iter()
            .zip(&lb)
            .all(|(x, y)| match (integer(x), integer(y)) {
                (Some(x), Some(y)) => (x - y).abs() <= tol,
                _ => x == y,
            })
}

pub(super) fn integer(frame: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(frame.strip_prefix(b":")?).ok()?;
    text.trim_end().parse().ok()
}
