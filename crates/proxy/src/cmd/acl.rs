//! The ACL subcommands orthrus answers for its own users: WHOAMI, USERS,
//! LIST, CAT and LOG. The others (SETUSER, DELUSER, ...) would change
//! users that live in orthrus's configuration: they stay administrative
//! commands for the nodes (`[admin] passthrough`).

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Request, encode};

use crate::acl::{User, category};
use crate::client::Client;
use crate::cmd::reply::bulk;
use crate::node::forward::error_reply;
use crate::worker::WorkerCtx;

/// `ACL WHOAMI|USERS|LIST|CAT|LOG`.
pub fn command(req: &Request, client: &Client, ctx: &WorkerCtx) -> Bytes {
    let sub = req.arg(1).unwrap_or_default().to_ascii_lowercase();
    match (sub.as_slice(), req.arg_count()) {
        (b"whoami", 2) => bulk(
            client
                .names
                .as_ref()
                .and_then(|n| n.user.as_deref())
                .unwrap_or(b"default"),
        ),
        (b"users", 2) => lines(users(ctx).iter().map(|u| u.name.clone())),
        (b"list", 2) => lines(users(ctx).iter().map(User::describe)),
        (b"cat", 2) => lines(category::NAMES.iter().map(|n| (*n).to_owned())),
        (b"log", 2 | 3) => ctx.shared.acl_log.command(req.arg(2), client.proto),
        _ => error_reply(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. orthrus answers \
             ACL WHOAMI, USERS, LIST, CAT (without a category) and LOG",
            String::from_utf8_lossy(&sub)
        )),
    }
}

/// The default user and every configured one, by name.
fn users(ctx: &WorkerCtx) -> Vec<User> {
    let live = ctx.shared.live.load();
    let cfg = &live.client;
    let mut default = match &cfg.password {
        Some(pw) => User::with_password("default", pw),
        None => {
            let mut open =
                crate::acl::parse("default", "on nopass allkeys allchannels allcommands")
                    .unwrap_or_else(|_| User::new("default"));
            open.enabled = cfg.users.is_empty();
            open
        }
    };
    default.name = "default".to_owned();
    let mut all = vec![default];
    let mut named: Vec<User> = cfg
        .users
        .iter()
        .filter_map(|(name, spec)| spec.to_user(name).ok())
        .collect();
    named.sort_by(|a, b| a.name.cmp(&b.name));
    all.extend(named);
    all
}

fn lines(items: impl ExactSizeIterator<Item = String>) -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, items.len());
    for item in items {
        encode::bulk(&mut out, item.as_bytes());
    }
    out.freeze()
}
