//! `HOTKEYS` (Redis 8.6's syntax, errors and reply, for the whole cluster
//! and on any Redis version) and `ORTHRUS HOTSLOTS`, answered by orthrus
//! from what it counts itself (`observe::hotkeys`, `observe::load`).
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use orthrus_cluster::{SLOT_COUNT, Slot, SlotMap};
use orthrus_resp::{Protocol, Request, encode};

use crate::cmd::reply::{null, simple};
use crate::node::answer::error_reply;
use crate::observe::hotkeys::{MAX_COUNT, Options, Report};
use crate::route::prefix::{DEFAULT_UPSTREAM, Upstream};
use crate::worker::WorkerCtx;

/// Redis's limit on DURATION, in seconds.
const MAX_DURATION: i64 = 1_000_000;
/// Slots `ORTHRUS HOTSLOTS` lists unless given `COUNT`.
const HOTSLOTS_DEFAULT: usize = 10;

const HELP: &[&str] = &[
    "START <METRICS count [CPU] [NET]> [COUNT k] [DURATION duration] [SAMPLE ratio] [SLOTS count slot...]",
    "    Starts hotkeys tracking with specified metrics, over every master orthrus serves.",
    "    * METRICS count [CPU] [NET]",
    "        CPU: time at the node (request written to reply read), an upper bound of the node's CPU time",
    "        NET: request and reply bytes",
    "    * COUNT k: the K of the top-K (1 to 64). Default: 10",
    "    * DURATION duration: seconds until tracking stops by itself. Default: 0 (until STOP)",
    "    * SAMPLE ratio: keys are tracked with probability 1/ratio. Default: 1",
    "    * SLOTS count slot...: track only keys of these slots. Default: every slot",
    "STOP",
    "    Stop hotkeys tracking. Results are still available via GET",
    "GET",
    "    Get results from hotkeys tracking.",
    "RESET",
    "    Release the results. Tracking must have been stopped.",
];

/// HOTKEYS HELP|START|STOP|GET|RESET.
pub fn hotkeys(req: &Request, proto: Protocol, ctx: &WorkerCtx) -> Bytes {
    let shared = &ctx.shared;
    let sub = req.arg(1).unwrap_or_default().to_ascii_lowercase();
    let argc = req.arg_count();
    let wrong_args = |name: &str| {
        error_reply(&format!(
            "ERR wrong number of arguments for 'hotkeys|{name}' command"
        ))
    };
    match sub.as_slice() {
        b"help" => help(),
        b"start" if shared.hotkeys.running(&shared.load) => {
            error_reply("ERR hotkey tracking session already in progress")
        }
        b"start" => match parse_start(req, &ctx.pool.env().slots()) {
            Err(msg) => error_reply(&format!("ERR {msg}")),
            Ok(options) => match shared.hotkeys.start(options, &shared.load) {
                Ok(()) => simple("OK"),
                Err(_) => error_reply("ERR hotkey tracking session already in progress"),
            },
        },
        b"stop" if argc != 2 => wrong_args("stop"),
        b"stop" if shared.hotkeys.stop(&shared.load) => simple("OK"),
        b"stop" => null(proto),
        b"get" if argc != 2 => wrong_args("get"),
        b"get" => match shared.hotkeys.report(&shared.load) {
            Some(report) => encode_report(&report, &ctx.pool.env().slots(), proto),
            None => null(proto),
        },
        b"reset" if argc != 2 => wrong_args("reset"),
        b"reset" if shared.hotkeys.reset(&shared.load) => simple("OK"),
        b"reset" => error_reply("ERR hotkey tracking session in progress, stop tracking first"),
        _ => error_reply("ERR unknown subcommand or wrong number of arguments"),
    }
}

/// ORTHRUS HOTSLOTS [COUNT n] [UPSTREAM name] (or `HOTSLOTS n`): the
/// default upstream's slots unless another is named.
pub fn orthrus(req: &Request, proto: Protocol, ctx: &WorkerCtx) -> Bytes {
    let sub = req.arg(1).unwrap_or_default();
    if !sub.eq_ignore_ascii_case(b"hotslots") {
        return error_reply(&format!(
            "ERR unknown subcommand '{}'. Try ORTHRUS HOTSLOTS [COUNT n] [UPSTREAM name].",
            String::from_utf8_lossy(sub)
        ));
    }
    let (count, upstream) = match hotslots_args(req, ctx) {
        Ok(args) => args,
        Err(reply) => return reply,
    };
    let count = count.min(usize::from(SLOT_COUNT));
    let map = ctx.pool.env().slots_of(upstream);
    let rates = ctx.shared.load.hottest(count, upstream);
    let mut out = BytesMut::new();
    encode::array_header(&mut out, rates.len());
    for rate in &rates {
        encode::map_header(&mut out, 4, proto);
        encode::bulk(&mut out, b"slot");
        encode::integer(&mut out, i64::from(rate.slot.get()));
        encode::bulk(&mut out, b"requests-per-sec");
        encode::integer(&mut out, rate.requests_per_sec.round() as i64);
        encode::bulk(&mut out, b"bytes-per-sec");
        encode::integer(&mut out, rate.bytes_per_sec.round() as i64);
        encode::bulk(&mut out, b"owner");
        match map.master(rate.slot) {
            Some(addr) => encode::bulk(&mut out, addr.to_string().as_bytes()),
            None => encode::null(&mut out, proto),
        }
    }
    out.freeze()
}

/// HOTSLOTS' count and upstream: `n` alone, or `COUNT n` and `UPSTREAM
/// name` in either order.
fn hotslots_args(req: &Request, ctx: &WorkerCtx) -> Result<(usize, Upstream), Bytes> {
    let bad_count = || error_reply("ERR COUNT must be a positive integer");
    let mut count = None;
    let mut upstream = None;
    let mut at = 2;
    if req.arg_count() == 3 {
        let n = req.arg(2).unwrap_or_default();
        if n.eq_ignore_ascii_case(b"count") || n.eq_ignore_ascii_case(b"upstream") {
            return Err(error_reply("ERR syntax error")); // its value is missing
        }
        return positive(n)
            .map(|n| (n, DEFAULT_UPSTREAM))
            .ok_or_else(bad_count);
    }
    while let Some(word) = req.arg(at) {
        let Some(value) = req.arg(at.saturating_add(1)) else {
            return Err(error_reply("ERR syntax error"));
        };
        if word.eq_ignore_ascii_case(b"count") && count.is_none() {
            count = Some(positive(value).ok_or_else(bad_count)?);
        } else if word.eq_ignore_ascii_case(b"upstream") && upstream.is_none() {
            let name = String::from_utf8_lossy(value);
            let Some(number) = ctx.shared.upstream_named(&name) else {
                return Err(error_reply(&format!("ERR no upstream named '{name}'")));
            };
            upstream = Some(number);
        } else {
            return Err(error_reply("ERR syntax error"));
        }
        at = at.saturating_add(2);
    }
    Ok((
        count.unwrap_or(HOTSLOTS_DEFAULT),
        upstream.unwrap_or(DEFAULT_UPSTREAM),
    ))
}

fn positive(arg: &[u8]) -> Option<usize> {
    integer(arg)
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok())
}

/// A whole decimal integer, as Redis reads one (no sign but `-`, no spaces).
fn integer(arg: &[u8]) -> Option<i64> {
    if arg.first() == Some(&b'+') {
        return None;
    }
    std::str::from_utf8(arg).ok()?.parse().ok()
}

/// `arg` as an integer in `min..=max`, or `msg`.
fn ranged(arg: Option<&[u8]>, min: i64, max: i64, msg: &str) -> Result<i64, String> {
    arg.and_then(integer)
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| msg.to_owned())
}

/// HOTKEYS START's arguments, checked the way Redis checks them; the
/// error text (without `ERR`) when they are wrong. Nothing changes until
/// they are all right.
fn parse_start(req: &Request, map: &SlotMap) -> Result<Options, String> {
    let argc = req.arg_count();
    let is = |i: usize, word: &[u8]| req.arg(i).is_some_and(|a| a.eq_ignore_ascii_case(word));
    if argc < 4 || !is(2, b"metrics") {
        return Err("METRICS parameter is required".into());
    }
    let metrics = ranged(req.arg(3), 1, 2, "METRICS count must be > 0 and <= 2")?;
    let (mut cpu, mut net) = (false, false);
    let mut j = 4usize;
    let mut parsed = 0i64;
    while j < argc && parsed < metrics {
        if is(j, b"cpu") {
            if cpu {
                return Err("METRICS CPU defined more than once!".into());
            }
            cpu = true;
        } else if is(j, b"net") {
            if net {
                return Err("METRICS NET defined more than once!".into());
            }
            net = true;
        }
        parsed = parsed.saturating_add(1);
        j = j.saturating_add(1);
    }
    if parsed != metrics {
        return Err("METRICS count does not match number of metric types provided".into());
    }
    if !cpu && !net {
        return Err("METRICS no valid metrics passed. Supported: CPU|NET".into());
    }
    let mut options = Options {
        cpu,
        net,
        count: 10,
        duration: None,
        sample: 1,
        slots: None,
    };
    let max_count = i64::try_from(MAX_COUNT).unwrap_or(64);
    while j < argc {
        let more = j.saturating_add(1) < argc;
        let value = req.arg(j.saturating_add(1));
        if more && is(j, b"count") {
            let n = ranged(value, 1, max_count, "COUNT must be between 1 and 64")?;
            options.count = usize::try_from(n).unwrap_or(10);
            j = j.saturating_add(2);
        } else if more && is(j, b"duration") {
            let secs = ranged(
                value,
                1,
                MAX_DURATION,
                "DURATION must be between 1 and 1000000",
            )?;
            options.duration = Some(Duration::from_secs(secs.unsigned_abs()));
            j = j.saturating_add(2);
        } else if more && is(j, b"sample") {
            let ratio = ranged(
                value,
                1,
                i64::from(i32::MAX),
                "SAMPLE ratio must be positive",
            )?;
            options.sample = u32::try_from(ratio).unwrap_or(1);
            j = j.saturating_add(2);
        } else if more && is(j, b"slots") {
            if options.slots.is_some() {
                return Err("SLOTS parameter already specified".into());
            }
            let n = ranged(
                value,
                1,
                i64::from(SLOT_COUNT),
                "SLOTS count must be between 1 and 16384",
            )?;
            let n = usize::try_from(n).unwrap_or(0);
            let first = j.saturating_add(2);
            if j.saturating_add(1).saturating_add(n) >= argc {
                return Err("not enough slot numbers provided".into());
            }
            let mut slots = Vec::with_capacity(n);
            for i in first..first.saturating_add(n) {
                let slot = req
                    .arg(i)
                    .and_then(integer)
                    .and_then(|s| u16::try_from(s).ok())
                    .and_then(Slot::new)
                    .ok_or_else(|| "Invalid or out of range slot".to_owned())?;
                if map.master(slot).is_none() {
                    return Err(format!("slot {} not handled by this node", slot.get()));
                }
                slots.push(slot.get());
            }
            slots.sort_unstable();
            if slots.windows(2).any(|w| w.first() == w.get(1)) {
                return Err("duplicate slot number".into());
            }
            options.slots = Some(slots);
            j = first.saturating_add(n);
        } else {
            return Err("syntax error".into());
        }
    }
    Ok(options)
}

fn help() -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, HELP.len());
    for line in HELP {
        encode::simple(&mut out, line.as_bytes());
    }
    out.freeze()
}

/// Slot ranges, merged: `[[start, end]]`, or `[[slot]]` for one slot.
fn encode_ranges(out: &mut BytesMut, slots: impl Iterator<Item = u16>) {
    let mut ranges: Vec<(u16, u16)> = Vec::new();
    for s in slots {
        match ranges.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(s) => *end = s,
            _ => ranges.push((s, s)),
        }
    }
    encode::array_header(out, ranges.len());
    for (start, end) in ranges {
        if start == end {
            encode::array_header(out, 1);
            encode::integer(out, i64::from(start));
        } else {
            encode::array_header(out, 2);
            encode::integer(out, i64::from(start));
            encode::integer(out, i64::from(end));
        }
    }
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// HOTKEYS GET's reply: an array of one map (flat pairs in RESP2), with
/// Redis's fields in Redis's order.
fn encode_report(report: &Report, map: &SlotMap, proto: Protocol) -> Bytes {
    let o = &report.options;
    let sampled = o.sample > 1;
    let selected = o.slots.is_some();
    let mut fields: Vec<(&str, Field<'_>)> = vec![
        ("tracking-active", Field::Int(i64::from(report.active))),
        ("sample-ratio", Field::Int(i64::from(o.sample))),
        ("selected-slots", Field::Slots),
    ];
    if sampled && selected {
        let us = clamp(report.sampled_micros);
        fields.push(("sampled-commands-selected-slots-us", Field::Int(us)));
    }
    if selected {
        let us = clamp(report.selected.micros);
        fields.push(("all-commands-selected-slots-us", Field::Int(us)));
    }
    let all_us = clamp(report.all.micros);
    fields.push(("all-commands-all-slots-us", Field::Int(all_us)));
    if sampled && selected {
        let bytes = clamp(report.sampled_bytes);
        fields.push((
            "net-bytes-sampled-commands-selected-slots",
            Field::Int(bytes),
        ));
    }
    if selected {
        let bytes = clamp(report.selected.bytes);
        fields.push(("net-bytes-all-commands-selected-slots", Field::Int(bytes)));
    }
    let all_bytes = clamp(report.all.bytes);
    fields.push(("net-bytes-all-commands-all-slots", Field::Int(all_bytes)));
    let start = clamp(report.start_unix_ms);
    fields.push(("collection-start-time-unix-ms", Field::Int(start)));
    let duration = clamp(report.duration_ms);
    fields.push(("collection-duration-ms", Field::Int(duration)));
    if o.cpu {
        fields.push((
            "total-cpu-time-user-ms",
            Field::Int(clamp(report.cpu_user_ms)),
        ));
        fields.push((
            "total-cpu-time-sys-ms",
            Field::Int(clamp(report.cpu_sys_ms)),
        ));
    }
    if o.net {
        let total = clamp(report.total_net_bytes);
        fields.push(("total-net-bytes", Field::Int(total)));
    }
    if o.cpu {
        fields.push(("by-cpu-time-us", Field::Keys(&report.by_cpu)));
    }
    if o.net {
        fields.push(("by-net-bytes", Field::Keys(&report.by_net)));
    }
    let mut out = BytesMut::new();
    encode::array_header(&mut out, 1);
    encode::map_header(&mut out, fields.len(), proto);
    for (name, field) in fields {
        encode::bulk(&mut out, name.as_bytes());
        match field {
            Field::Int(n) => encode::integer(&mut out, n),
            Field::Slots => match &o.slots {
                Some(slots) => encode_ranges(&mut out, slots.iter().copied()),
                None => encode_ranges(
                    &mut out,
                    Slot::all()
                        .filter(|s| map.master(*s).is_some())
                        .map(Slot::get),
                ),
            },
            Field::Keys(keys) => {
                encode::array_header(&mut out, keys.len().saturating_mul(2));
                for (key, n) in keys {
                    encode::bulk(&mut out, key);
                    encode::integer(&mut out, clamp(*n));
                }
            }
        }
    }
    out.freeze()
}

enum Field<'a> {
    Int(i64),
    Slots,
    Keys(&'a [(Vec<u8>, u64)]),
}
