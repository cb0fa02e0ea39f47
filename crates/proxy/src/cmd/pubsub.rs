//! The pub/sub commands as a client sends them: (S|P)SUBSCRIBE and their
//! UN-forms, and what RESP2's subscriber mode allows besides. The
//! subscriptions themselves are the client's (`client::subscriptions`).

use std::rc::Rc;

use crate::observe::clients::Closer;
use orthrus_resp::{Protocol, Request};

use crate::client::subscriptions::PubSub;
use crate::client::{Client, Pending, PushSink};
use crate::node::forward::error_reply;
use crate::worker::WorkerCtx;

/// Pub/sub commands, and what subscriber mode allows in RESP2.
pub fn command(
    client: &mut Client,
    req: &Request,
    sink: &mut impl FnMut(Closer) -> PushSink,
    ctx: &Rc<WorkerCtx>,
) -> Option<Pending> {
    const COMMANDS: [&str; 6] = [
        "subscribe",
        "psubscribe",
        "ssubscribe",
        "unsubscribe",
        "punsubscribe",
        "sunsubscribe",
    ];
    let name = req.arg(0)?;
    let command = COMMANDS
        .iter()
        .find(|c| name.eq_ignore_ascii_case(c.as_bytes()));
    let subscribed = client.pubsub.as_ref().is_some_and(PubSub::active);
    match command {
        Some(cmd) => {
            let needs_args = matches!(*cmd, "subscribe" | "psubscribe" | "ssubscribe");
            if needs_args && req.arg_count() < 2 {
                return Some(Pending::Ready(error_reply(&format!(
                    "ERR wrong number of arguments for '{cmd}' command"
                ))));
            }
            if client.multi.is_some() {
                return Some(Pending::Ready(error_reply(&format!(
                    "ERR orthrus: {} cannot be used inside MULTI",
                    cmd.to_ascii_uppercase()
                ))));
            }
            if client.pubsub.is_none() {
                let push = sink(client.closer());
                client.pubsub = Some(PubSub::new(ctx.clone(), client.proto, push));
            }
            let pubsub = client.pubsub.as_ref()?;
            Some(pubsub.command(cmd, req))
        }
        None if subscribed && client.proto == Protocol::Resp2 => {
            if name.eq_ignore_ascii_case(b"ping") {
                return client.pubsub.as_ref().and_then(|p| p.ping(req));
            }
            if name.eq_ignore_ascii_case(b"quit") || name.eq_ignore_ascii_case(b"reset") {
                return None;
            }
            let shown = String::from_utf8_lossy(name).to_ascii_lowercase();
            Some(Pending::Ready(error_reply(&format!(
                "ERR Can't execute '{shown}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
            ))))
        }
        None => None,
    }
}
