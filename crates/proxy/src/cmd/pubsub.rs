//! The pub/sub commands as a client sends them: (S|P)SUBSCRIBE and their
//! UN-forms, and what RESP2's subscriber mode allows besides. The
//! subscriptions themselves are the client's (`client::subscriptions`).

use std::rc::Rc;

use crate::observe::clients::Closer;
use orthrus_resp::{Protocol, Request};

use crate::client::subscriptions::PubSub;
use crate::client::{Client, Pending, PushSink};
use crate::node::answer::error_reply;
use crate::worker::WorkerCtx;

/// A pub/sub command (`name`, lower case).
pub fn command(
    client: &mut Client,
    req: &Request,
    name: &str,
    sink: &mut impl FnMut(Closer) -> PushSink,
    ctx: &Rc<WorkerCtx>,
) -> Pending {
    let needs_args = matches!(name, "subscribe" | "psubscribe" | "ssubscribe");
    if needs_args && req.arg_count() < 2 {
        return Pending::Ready(error_reply(&format!(
            "ERR wrong number of arguments for '{name}' command"
        )));
    }
    if client.multi.is_some() {
        return Pending::Ready(error_reply(&format!(
            "ERR orthrus: {} cannot be used inside MULTI",
            name.to_ascii_uppercase()
        )));
    }
    let pubsub = match client.pubsub.take() {
        Some(pubsub) => pubsub,
        None => PubSub::new(ctx.clone(), client.proto, sink(client.closer())),
    };
    let pending = pubsub.command(name, req);
    client.pubsub = Some(pubsub);
    pending
}

/// Whether RESP2's subscriber mode keeps `req` from running as usual:
/// only QUIT and RESET leave it that way.
#[inline]
pub fn restricts(client: &Client, req: &Request) -> bool {
    let leaves =
        |name: &[u8]| name.eq_ignore_ascii_case(b"quit") || name.eq_ignore_ascii_case(b"reset");
    client.pubsub.as_ref().is_some_and(PubSub::active)
        && client.proto == Protocol::Resp2
        && !req.arg(0).is_some_and(leaves)
}

/// What RESP2's subscriber mode allows besides the pub/sub commands
/// (PING), and the error for everything else, naming the command by its
/// full name (`client|list`) as Redis does.
pub fn in_subscriber_mode(client: &Client, req: &Request, shown: &str) -> Pending {
    let name = req.arg(0).unwrap_or_default();
    match &client.pubsub {
        Some(pubsub) if name.eq_ignore_ascii_case(b"ping") => pubsub.ping(req),
        _ => Pending::Ready(error_reply(&format!(
            "ERR Can't execute '{shown}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        ))),
    }
}
