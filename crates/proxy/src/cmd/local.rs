//! Commands orthrus answers itself: the connection handshake of today's
//! clients (HELLO, AUTH, CLIENT SETNAME/SETINFO, SELECT 0, PING) and INFO,
//! which clients use as a ready check. Replies follow Redis's wording.

use std::rc::Rc;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Protocol, Request, encode};

use crate::client::ReplyMode;
use crate::client::{Client, Pending};
use crate::cmd::reply::{bulk, integer, null, simple, verbatim};
use crate::cmd::{cluster as cluster_cmd, info};
use crate::config::ReadFrom;
use crate::node::answer::error_reply;
use crate::observe::acl_log::Reason;
use crate::observe::clients::{Current, KillReply};
use crate::observe::throttle::Throttle;
use crate::route::kind::Local;
use crate::route::prefix::DEFAULT_UPSTREAM;
use crate::worker::WorkerCtx;

const NO_PASSWORD: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

/// Runs a local command.
pub fn execute(cmd: Local, req: &Request, client: &mut Client, ctx: &Rc<WorkerCtx>) -> Pending {
    let reply = match cmd {
        Local::Ping => match ctx.shared.scripts.busy() {
            // A node runs nothing else while a script runs past the busy
            // threshold: Redis answers PING so, and scripts rely on it.
            Some(function) => error_reply(&format!(
                "BUSY Redis is busy running a script. You can only call {} KILL or SHUTDOWN NOSAVE.",
                if function { "FUNCTION" } else { "SCRIPT" }
            )),
            None => ping(req, client.proto),
        },
        Local::Echo => bulk(req.arg(1).unwrap_or_default()),
        Local::Quit => return Pending::Last(simple("OK")),
        Local::Select => select(req, client, ctx),
        // As on a cluster node, for this connection only: its keyed reads
        // go to replicas, or back to the masters.
        Local::ReadOnly => {
            client.read_from = Some(ReadFrom::Replica);
            simple("OK")
        }
        Local::ReadWrite => {
            client.read_from = Some(ReadFrom::Master);
            simple("OK")
        }
        Local::Reset => {
            client.proto = Protocol::Resp2;
            client.db = 0;
            client.names = None;
            client.multi = None;
            client.watch = None;
            client.monitor = None;
            client.pubsub = None;
            client.tracking = None;
            let live = ctx.live();
            let cfg = &live.client;
            client.authenticated = cfg.password.is_none() && cfg.users.is_empty();
            client.reply = ReplyMode::On;
            client.read_from = None;
            simple("RESET")
        }
        Local::Auth if req.arg_count() > 3 => error_reply("ERR syntax error"),
        Local::Auth => auth(req.arg(1), req.arg(2), client, ctx),
        Local::Hello => hello(req, client, ctx),
        Local::Client => client_command(req, client, ctx),
        Local::Info => return info::reply(req, client, ctx),
        Local::Cluster => return cluster_cmd::execute(req, client, ctx),
        Local::ResetStat => {
            let shared = &ctx.shared;
            shared
                .stats
                .iter()
                .for_each(crate::observe::stats::WorkerStats::reset);
            shared.latency.reset();
            shared.node_latency.reset();
            shared.commands_seen.reset();
            if ctx.live().admin.passthrough {
                // The nodes' statistics too (LATENCY, commandstats there).
                return crate::cmd::admin::every_node(ctx, req.frame(), client.dialect());
            }
            simple("OK")
        }
        Local::Acl => crate::cmd::acl::command(req, client, ctx),
        Local::SlowLog => crate::observe::slowlog::command(&ctx.shared.slowlog, req),
        Local::HotKeys => crate::cmd::hotkeys::hotkeys(req, client.proto, ctx),
        Local::Orthrus => crate::cmd::hotkeys::orthrus(req, client.proto, ctx),
    };
    if matches!(
        cmd,
        Local::Hello | Local::Client | Local::Reset | Local::Select
    ) {
        ctx.shared.clients.update(client.entry(ctx.index));
    }
    Pending::Ready(reply)
}

fn ping(req: &Request, proto: Protocol) -> Bytes {
    match (req.arg(1), req.arg_count()) {
        (_, n) if n > 2 => error_reply("ERR wrong number of arguments for 'ping' command"),
        (Some(msg), _) => bulk(msg),
        (None, _) => {
            let _ = proto;
            simple("PONG")
        }
    }
}

/// `SELECT n`: answered as the default upstream's nodes answer it (they
/// were asked once how many databases they serve: a Redis 7 cluster one,
/// a Valkey 9 cluster its `cluster-databases`, a standalone server its
/// `databases`); the client's next requests go on connections to that
/// database.
fn select(req: &Request, client: &mut Client, ctx: &WorkerCtx) -> Bytes {
    // Redis reads an int.
    let Some(index) = req.arg(1).and_then(orthrus_resp::parse_i64) else {
        return error_reply(NOT_INTEGER);
    };
    let Ok(index) = i32::try_from(index) else {
        return error_reply(
            "ERR value is out of range, value must between -2147483648 and 2147483647",
        );
    };
    let db = match u32::try_from(index) {
        Ok(0) => 0,
        served => match ctx.shared.databases.of(DEFAULT_UPSTREAM) {
            None => {
                return error_reply(
                    "CLUSTERDOWN orthrus: how many databases the nodes serve is not known yet",
                );
            }
            Some(known) => match served {
                Ok(db) if db < known.count => db,
                _ => return error_reply(&known.refusal),
            },
        },
    };
    if db != client.db && client.watch.is_some() {
        // The watch is on a connection to the other database.
        return error_reply(
            "ERR orthrus: SELECT while keys are watched is not supported (UNWATCH first)",
        );
    }
    client.db = db;
    if let Some(tracking) = &client.tracking {
        tracking.set_dialect(client.dialect());
    }
    simple("OK")
}

/// `AUTH [user] password`, against `[client] password` (the default
/// user) and `[client.users]`. With neither configured, Redis's default
/// user takes any password through `AUTH default <any>` and refuses the
/// one-argument form.
fn auth(
    first: Option<&[u8]>,
    second: Option<&[u8]>,
    client: &mut Client,
    ctx: &WorkerCtx,
) -> Bytes {
    let users = ctx.shared.users.load();
    let (user, pass) = match (first, second) {
        (Some(pass), None) => (&b"default"[..], pass),
        (Some(user), Some(pass)) => (user, pass),
        _ => return error_reply(WRONGPASS),
    };
    let expected = users.login(user);
    let open = users.open();
    match expected {
        Some(expected) if expected.accepts(pass) => {
            client.authenticated = true;
            let named = (user != b"default").then(|| Bytes::copy_from_slice(user));
            if client.names.as_ref().and_then(|n| n.user.as_ref()) != named.as_ref() {
                client.names_mut().user = named;
                ctx.shared.clients.update(client.entry(ctx.index));
            }
            // Only a user with limits is checked request by request.
            let acl = (!expected.is_unrestricted()).then(|| Arc::clone(expected));
            if let Some(tracking) = &client.tracking {
                tracking.set_reader(acl.clone());
            }
            if acl.is_some() || client.names.is_some() {
                client.names_mut().acl = acl;
            }
            simple("OK")
        }
        None if open && user == b"default" => {
            if second.is_none() {
                return error_reply(NO_PASSWORD);
            }
            client.authenticated = true;
            simple("OK")
        }
        _ => {
            ctx.shared.acl_log.record(
                Reason::Auth,
                "AUTH",
                &String::from_utf8_lossy(user),
                client_info(client),
            );
            if let Some(skipped) = FAILED_AUTH.allow() {
                tracing::warn!(
                    client.addr = %client.peer(),
                    user = %String::from_utf8_lossy(user),
                    earlier_failures_not_logged = skipped,
                    "AUTH failed: wrong password or unknown user"
                );
            }
            error_reply(WRONGPASS)
        }
    }
}

/// Who a client is, for ACL LOG's `client-info`.
pub fn client_info(client: &Client) -> String {
    let user = client.names.as_ref().and_then(|n| n.user.as_deref());
    format!(
        "id={} addr={} user={}",
        client.id(),
        client.peer(),
        String::from_utf8_lossy(user.unwrap_or(b"default"))
    )
}

/// Failed AUTHs are logged at most once a second.
static FAILED_AUTH: Throttle = Throttle::new();

fn hello(req: &Request, client: &mut Client, ctx: &WorkerCtx) -> Bytes {
    let mut proto = client.proto;
    if let Some(ver) = req.arg(1) {
        match std::str::from_utf8(ver)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            None => return error_reply("ERR Protocol version is not an integer or out of range"),
            Some(version) => match Protocol::from_version(version) {
                Some(p) => proto = p,
                None => return error_reply("NOPROTO unsupported protocol version"),
            },
        }
    }
    let mut name = None;
    let mut i = 2;
    while let Some(opt) = req.arg(i) {
        if opt.eq_ignore_ascii_case(b"AUTH") && req.arg_count() > i + 2 {
            let reply = auth(req.arg(i + 1), req.arg(i + 2), client, ctx);
            if reply.first() == Some(&b'-') {
                return reply;
            }
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && req.arg_count() > i + 1 {
            let value = req.arg_bytes(i + 1).unwrap_or_default();
            if !valid_name(&value) {
                return error_reply(BAD_NAME);
            }
            name = Some(value);
            i += 2;
        } else {
            let opt = String::from_utf8_lossy(opt);
            return error_reply(&format!("ERR Syntax error in HELLO option '{opt}'"));
        }
    }
    if !client.authenticated {
        return error_reply(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    client.proto = proto;
    if let Some(tracking) = &client.tracking {
        tracking.set_dialect(client.dialect());
    }
    // Subscriptions speak the protocol they were made in; a client
    // subscribed to nothing hears its next ones in this one (its links,
    // which may carry its tracking, speak RESP3 either way).
    if let Some(pubsub) = client.pubsub.as_ref().filter(|p| !p.active()) {
        pubsub.set_proto(proto);
    }
    if let Some(name) = name {
        client.names_mut().name = (!name.is_empty()).then_some(name);
    }
    let mut out = BytesMut::with_capacity(160);
    encode::map_header(&mut out, 7, proto);
    let engine = ctx.shared.engine.load();
    encode::bulk(&mut out, b"server");
    encode::bulk(&mut out, engine.name.as_bytes());
    encode::bulk(&mut out, b"version");
    encode::bulk(&mut out, engine.version.as_bytes());
    encode::bulk(&mut out, b"proto");
    encode::integer(&mut out, proto.version().into());
    encode::bulk(&mut out, b"id");
    encode::integer(&mut out, i64::try_from(client.id()).unwrap_or(i64::MAX));
    encode::bulk(&mut out, b"mode");
    encode::bulk(&mut out, b"standalone");
    encode::bulk(&mut out, b"role");
    encode::bulk(&mut out, b"master");
    encode::bulk(&mut out, b"modules");
    match &engine.modules {
        Some(modules) => modules.encode_for(&mut out, proto),
        None => encode::array_header(&mut out, 0),
    }
    out.freeze()
}

fn client_command(req: &Request, client: &mut Client, ctx: &WorkerCtx) -> Bytes {
    let sub = req.arg(1).unwrap_or_default().to_ascii_lowercase();
    let argc = req.arg_count();
    let arity = |ok: bool, reply: Bytes| {
        if ok {
            reply
        } else {
            let sub = String::from_utf8_lossy(&sub);
            error_reply(&format!(
                "ERR wrong number of arguments for 'client|{sub}' command"
            ))
        }
    };
    match sub.as_slice() {
        b"setname" if argc == 3 => {
            let name = req.arg_bytes(2).unwrap_or_default();
            if !valid_name(&name) {
                return error_reply(BAD_NAME);
            }
            client.names_mut().name = (!name.is_empty()).then_some(name);
            simple("OK")
        }
        b"getname" => arity(
            argc == 2,
            match client.names.as_ref().and_then(|n| n.name.as_ref()) {
                Some(name) => bulk(name),
                None => null(client.proto),
            },
        ),
        b"id" => arity(
            argc == 2,
            integer(i64::try_from(client.id()).unwrap_or(i64::MAX)),
        ),
        b"setinfo" if argc == 4 => {
            let attr = req.arg(2).unwrap_or_default();
            let value = req.arg_bytes(3).unwrap_or_default();
            if attr.eq_ignore_ascii_case(b"lib-name") {
                if !valid_name(&value) {
                    return error_reply(
                        "ERR lib-name cannot contain spaces, newlines or special characters.",
                    );
                }
                client.names_mut().lib_name = Some(value);
            } else if attr.eq_ignore_ascii_case(b"lib-ver") {
                client.names_mut().lib_ver = Some(value);
            } else {
                let attr = String::from_utf8_lossy(attr);
                return error_reply(&format!("ERR Unrecognized option '{attr}'"));
            }
            simple("OK")
        }
        b"info" => arity(argc == 2, {
            let now = Current {
                id: client.id(),
                cmd: "client|info",
                qbuf: req.frame().len(),
            };
            verbatim(&client.entry(ctx.index).line(Some(&now)), client.proto)
        }),
        b"no-evict" | b"no-touch" if argc == 3 => {
            let v = req.arg(2).unwrap_or_default();
            if v.eq_ignore_ascii_case(b"on") || v.eq_ignore_ascii_case(b"off") {
                simple("OK")
            } else {
                error_reply("ERR syntax error")
            }
        }
        b"setname" | b"setinfo" | b"no-evict" | b"no-touch" => arity(false, Bytes::new()),
        b"list" => {
            let now = Current {
                id: client.id(),
                cmd: "client|list",
                qbuf: req.frame().len(),
            };
            let args: Vec<&[u8]> = req.args().skip(2).collect();
            match ctx.shared.clients.list(&args, &now) {
                Ok(text) => verbatim(&text, client.proto),
                Err(e) => error_reply(&e),
            }
        }
        b"kill" if argc >= 3 => {
            let args: Vec<&[u8]> = req.args().skip(2).collect();
            let live = ctx.live();
            let user_exists = |u: &[u8]| {
                u == b"default"
                    || std::str::from_utf8(u).is_ok_and(|u| live.client.users.contains_key(u))
            };
            match ctx.shared.clients.kill(&args, client.id(), user_exists) {
                Ok(KillReply::Ok) => simple("OK"),
                Ok(KillReply::Count(n)) => integer(n),
                Err(e) => error_reply(e),
            }
        }
        b"pause" if argc == 3 || argc == 4 => pause(req, ctx),
        b"unpause" => arity(argc == 2, {
            ctx.shared.clients.unpause();
            simple("OK")
        }),
        b"pause" => arity(false, Bytes::new()),
        b"kill" => arity(false, Bytes::new()),
        b"reply" if argc == 3 => {
            let mode = req.arg(2).unwrap_or_default().to_ascii_lowercase();
            match mode.as_slice() {
                b"on" => {
                    client.reply = ReplyMode::On;
                    simple("OK")
                }
                b"off" => {
                    client.reply = ReplyMode::Off;
                    Bytes::new()
                }
                b"skip" => {
                    client.reply = ReplyMode::SkipNext;
                    Bytes::new()
                }
                _ => error_reply("ERR syntax error"),
            }
        }
        b"help" => {
            let mut out = BytesMut::new();
            encode::array_header(&mut out, CLIENT_HELP.len() + 1);
            encode::simple(
                &mut out,
                b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            );
            for line in CLIENT_HELP {
                encode::simple(&mut out, line.as_bytes());
            }
            out.freeze()
        }
        _ => {
            let shown = String::from_utf8_lossy(&sub).to_ascii_uppercase();
            let known: Vec<&str> = CLIENT_HELP
                .iter()
                .filter_map(|line| line.split(' ').next())
                .collect();
            error_reply(&format!(
                "ERR orthrus: CLIENT {shown} is not supported: orthrus answers CLIENT for its own clients ({})",
                known.join(", ")
            ))
        }
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL]: orthrus holds its own clients' commands
/// (all of them, or those that may write) until the timeout or UNPAUSE.
fn pause(req: &Request, ctx: &WorkerCtx) -> Bytes {
    let ms = std::str::from_utf8(req.arg(2).unwrap_or_default())
        .ok()
        .and_then(|t| t.parse::<i64>().ok());
    let ms = match ms {
        None => return error_reply("ERR timeout is not an integer or out of range"),
        Some(ms) if ms < 0 => return error_reply("ERR timeout is negative"),
        Some(ms) => ms.unsigned_abs(),
    };
    let all = match req.arg(3) {
        None => true,
        Some(m) if m.eq_ignore_ascii_case(b"all") => true,
        Some(m) if m.eq_ignore_ascii_case(b"write") => false,
        Some(_) => return error_reply("ERR syntax error"),
    };
    ctx.shared.clients.pause(ms, all);
    simple("OK")
}

/// The CLIENT subcommands orthrus answers, as CLIENT HELP lists them.
const CLIENT_HELP: [&str; 16] = [
    "GETNAME",
    "ID",
    "INFO",
    "LIST",
    "KILL <ip:port>|<filter> ...",
    "REPLY <ON|OFF|SKIP>",
    "SETNAME <name>",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "NO-EVICT <ON|OFF>",
    "NO-TOUCH <ON|OFF>",
    "PAUSE <timeout> [WRITE|ALL]",
    "UNPAUSE",
    "TRACKING <ON|OFF> [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]",
    "CACHING <YES|NO>",
    "GETREDIR",
    "TRACKINGINFO",
];

/// Redis accepts names of printable ASCII without spaces.
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}
