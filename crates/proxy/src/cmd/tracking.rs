//! CLIENT TRACKING, CACHING, GETREDIR and TRACKINGINFO: checked and
//! answered as Redis 7.0 does, with the tracking itself done by the
//! client's own connections (`client::tracking`).

use std::rc::Rc;

use bytes::Bytes;
use orthrus_resp::Request;

use crate::client::subscriptions::PubSub;
use crate::client::tracking::{Options, Tracking};
use crate::client::{Client, Pending, PushSink};
use crate::cmd::reply::{integer, simple};
use crate::node::Done;
use crate::node::answer::error_reply;
use crate::observe::clients::Closer;
use crate::worker::WorkerCtx;

const SYNTAX: &str = "ERR syntax error";

/// Whether this CLIENT subcommand is one of tracking's.
pub fn handles(req: &Request) -> bool {
    req.arg(1).is_some_and(|sub| {
        [&b"tracking"[..], b"caching", b"getredir", b"trackinginfo"]
            .iter()
            .any(|n| sub.eq_ignore_ascii_case(n))
    })
}

/// Why CLIENT TRACKING ON BCAST is refused behind a route that cuts its
/// prefix.
const BCAST_CUT: &str = "ERR orthrus: CLIENT TRACKING BCAST cannot be used while a route has remove_prefix (the nodes would name its keys without their prefix)";

/// Runs CLIENT TRACKING|CACHING|GETREDIR|TRACKINGINFO.
pub fn command(
    client: &mut Client,
    req: &Request,
    sink: &mut impl FnMut(Closer) -> PushSink,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let sub = req.arg(1).unwrap_or_default().to_ascii_lowercase();
    let argc = req.arg_count();
    let wrong_arity = || {
        let sub = String::from_utf8_lossy(&sub);
        Pending::Ready(error_reply(&format!(
            "ERR wrong number of arguments for 'client|{sub}' command"
        )))
    };
    match sub.as_slice() {
        b"tracking" if argc >= 3 => tracking(client, req, sink, ctx),
        b"caching" if argc == 3 => Pending::Ready(caching(client, req)),
        b"getredir" if argc == 2 => Pending::Ready(integer(match &client.tracking {
            Some(t) => i64::try_from(t.redirect()).unwrap_or(i64::MAX),
            None => -1,
        })),
        b"trackinginfo" if argc == 2 => {
            Pending::Ready(Tracking::info(client.tracking.as_deref(), client.proto))
        }
        _ => wrong_arity(),
    }
}

/// How many BCAST prefixes one client may have, and their bytes
/// together: a node checks a new prefix against every other one, and
/// orthrus sends them to every master.
#[derive(Clone, Copy)]
struct PrefixCap {
    count: usize,
    bytes: usize,
}

/// What CLIENT TRACKING ON|OFF asks for.
struct Asked {
    options: Options,
    redirect: u64,
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN]
/// [OPTOUT] [NOLOOP].
fn tracking(
    client: &mut Client,
    req: &Request,
    sink: &mut impl FnMut(Closer) -> PushSink,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let asked = match parse(req, ctx) {
        Ok(asked) => asked,
        Err(e) => return Pending::Ready(e),
    };
    let switch = req.arg(2).unwrap_or_default();
    if switch.eq_ignore_ascii_case(b"off") {
        // Its connections close once their requests are answered.
        client.tracking = None;
        return Pending::Ready(simple("OK"));
    }
    if !switch.eq_ignore_ascii_case(b"on") {
        return Pending::Ready(error_reply(SYNTAX));
    }
    let limits = &ctx.shared.settings.raw.client;
    let cap = PrefixCap {
        count: limits.max_tracking_prefixes,
        bytes: limits.max_tracking_prefix_bytes,
    };
    if let Err(e) = check(client.tracking.as_deref(), &asked.options, cap) {
        return Pending::Ready(error_reply(&e));
    }
    // A node tells BCAST clients every key written under their prefixes,
    // as it holds them: keys of a route with remove_prefix without it.
    if asked.options.bcast && ctx.pool.env().with_prefixes(|p| p.strips()) {
        return Pending::Ready(error_reply(BCAST_CUT));
    }
    let Asked {
        mut options,
        redirect,
    } = asked;
    let added = if options.bcast && options.prefixes.is_empty() {
        vec![Bytes::new()]
    } else {
        std::mem::take(&mut options.prefixes)
    };
    let work = match &client.tracking {
        Some(current) => Box::pin(current.update(options, added, redirect))
            as std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Bytes>>>>,
        None => {
            options.prefixes = added;
            let push = sink(client.closer());
            // BCAST tracking goes on the client's links, beside its
            // subscriptions (made here if it has none yet).
            let links = Tracking::on_links(&options).then(|| {
                client
                    .pubsub
                    .get_or_insert_with(|| PubSub::new(ctx.clone(), client.proto, push.clone()))
                    .links()
            });
            let tracking = Tracking::new(ctx, options, redirect, client.dialect(), push, links);
            tracking.set_reader(client.names.as_ref().and_then(|n| n.acl.clone()));
            let ready = Box::pin(tracking.ready());
            client.tracking = Some(Box::new(tracking));
            ready
        }
    };
    // Deferred: it starts when every earlier reply is written, so nothing
    // of the client is in flight on its connections, and the commands
    // after it wait until the nodes track.
    Pending::deferred(Box::pin(async move {
        Done::unmeasured(match work.await {
            Ok(()) => simple("OK"),
            Err(e) => e,
        })
    }))
}

/// The options as Redis parses them (the same errors, in the same order).
fn parse(req: &Request, ctx: &WorkerCtx) -> Result<Asked, Bytes> {
    let mut asked = Asked {
        options: Options::default(),
        redirect: 0,
    };
    let o = &mut asked.options;
    let mut j = 3;
    while let Some(arg) = req.arg(j) {
        let more = req.arg_count() > j + 1;
        let is = |name: &[u8]| arg.eq_ignore_ascii_case(name);
        if is(b"redirect") && more {
            j += 1;
            if asked.redirect != 0 {
                return Err(error_reply(
                    "ERR A client can only redirect to a single other client",
                ));
            }
            let id = std::str::from_utf8(req.arg(j).unwrap_or_default())
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| error_reply("ERR value is not an integer or out of range"))?;
            match u64::try_from(id) {
                Ok(id) if ctx.shared.clients.contains(id) => asked.redirect = id,
                _ => {
                    return Err(error_reply(
                        "ERR The client ID you want redirect to does not exist",
                    ));
                }
            }
        } else if is(b"bcast") {
            o.bcast = true;
        } else if is(b"optin") {
            o.optin = true;
        } else if is(b"optout") {
            o.optout = true;
        } else if is(b"noloop") {
            o.noloop = true;
        } else if is(b"prefix") && more {
            j += 1;
            o.prefixes.push(req.arg_bytes(j).unwrap_or_default());
        } else {
            return Err(error_reply(SYNTAX));
        }
        j += 1;
    }
    Ok(asked)
}

/// CLIENT TRACKING ON's checks of the options against each other and the
/// client's current tracking, with Redis's messages.
fn check(current: Option<&Tracking>, o: &Options, cap: PrefixCap) -> Result<(), String> {
    if !o.bcast && !o.prefixes.is_empty() {
        return Err("ERR PREFIX option requires BCAST mode to be enabled".into());
    }
    let now = current.map(Tracking::options);
    if now.as_ref().is_some_and(|now| now.bcast != o.bcast) {
        return Err("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if o.bcast && (o.optin || o.optout) {
        return Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
    }
    if o.optin && o.optout {
        return Err("ERR You can't specify both OPTIN mode and OPTOUT mode".into());
    }
    if now
        .as_ref()
        .is_some_and(|now| (o.optin && now.optout) || (o.optout && now.optin))
    {
        return Err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if o.bcast {
        let existing = now.map(|n| n.prefixes).unwrap_or_default();
        check_cap(&existing, &o.prefixes, cap)?;
        for (i, p) in o.prefixes.iter().enumerate() {
            if let Some(old) = existing.iter().find(|old| overlap(old, p)) {
                return Err(format!(
                    "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                    String::from_utf8_lossy(p),
                    String::from_utf8_lossy(old)
                ));
            }
            if let Some(other) = o.prefixes.iter().skip(i + 1).find(|q| overlap(p, q)) {
                return Err(format!(
                    "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                    String::from_utf8_lossy(p),
                    String::from_utf8_lossy(other)
                ));
            }
        }
    }
    Ok(())
}

/// The prefixes the client has and those it adds, against the cap
/// (checked before the overlaps, which take time in the square of their
/// number).
fn check_cap(existing: &[Bytes], added: &[Bytes], cap: PrefixCap) -> Result<(), String> {
    let count = existing.len().saturating_add(added.len());
    if count > cap.count {
        return Err(format!(
            "ERR orthrus: at most {} tracking prefixes per client (client.max_tracking_prefixes); this would make {count}",
            cap.count
        ));
    }
    let bytes = existing
        .iter()
        .chain(added)
        .fold(0usize, |sum, p| sum.saturating_add(p.len()));
    if bytes > cap.bytes {
        return Err(format!(
            "ERR orthrus: at most {} bytes of tracking prefixes per client (client.max_tracking_prefix_bytes); this would make {bytes}",
            cap.bytes
        ));
    }
    Ok(())
}

/// Whether one of two prefixes starts the other (Redis's
/// `stringCheckPrefix`).
fn overlap(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a.get(..n) == b.get(..n)
}

/// CLIENT CACHING YES|NO: for the client's next command.
fn caching(client: &mut Client, req: &Request) -> Bytes {
    let Some(tracking) = &client.tracking else {
        return error_reply(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        );
    };
    let options = tracking.options();
    let opt = req.arg(2).unwrap_or_default();
    if opt.eq_ignore_ascii_case(b"yes") {
        if !options.optin {
            return error_reply(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            );
        }
    } else if opt.eq_ignore_ascii_case(b"no") {
        if !options.optout {
            return error_reply(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            );
        }
    } else {
        return error_reply(SYNTAX);
    }
    tracking.set_caching();
    simple("OK")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: PrefixCap = PrefixCap {
        count: 1000,
        bytes: 65536,
    };

    fn bcast(prefixes: &[&'static [u8]]) -> Options {
        Options {
            bcast: true,
            prefixes: prefixes.iter().map(|p| Bytes::from_static(p)).collect(),
            ..Options::default()
        }
    }

    #[test]
    fn overlapping_prefixes_are_refused_with_redis_messages() {
        let e = check(None, &bcast(&[b"FOOBAR", b"FOO"]), CAP).unwrap_err();
        assert!(e.starts_with("ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'"));
        assert!(check(None, &bcast(&[b"FOO", b"BAR"]), CAP).is_ok());
        let plain = Options {
            prefixes: vec![Bytes::from_static(b"a")],
            ..Options::default()
        };
        assert_eq!(
            check(None, &plain, CAP).unwrap_err(),
            "ERR PREFIX option requires BCAST mode to be enabled"
        );
        let both = Options {
            optin: true,
            optout: true,
            ..Options::default()
        };
        assert!(
            check(None, &both, CAP)
                .unwrap_err()
                .contains("both OPTIN mode and OPTOUT")
        );
    }

    #[test]
    fn prefixes_overlap_when_one_starts_the_other() {
        assert!(overlap(b"FO", b"FOO"));
        assert!(overlap(b"FOO", b"FO"));
        assert!(overlap(b"", b"x"));
        assert!(overlap(b"BARB", b"BAR"));
        assert!(!overlap(b"a:", b"b:"));
    }
}
