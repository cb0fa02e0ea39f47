//! The ACL subcommands orthrus answers for its own users: WHOAMI, USERS,
//! LIST, CAT and LOG. The others (SETUSER, DELUSER, ...) would change
//! users that live in orthrus's configuration: they stay administrative
//! commands for the nodes (`[admin] passthrough`).

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Request, encode};

use crate::acl::category;
use crate::client::Client;
use crate::cmd::reply::bulk;
use crate::node::answer::error_reply;
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
        (b"users", 2) => lines(ctx.shared.users.load().all().map(|u| u.name.clone())),
        (b"list", 2) => lines(ctx.shared.users.load().all().map(|u| u.describe())),
        (b"cat", 2) => lines(category::NAMES.iter().map(|n| (*n).to_owned())),
        (b"cat", 3) => {
            let name = String::from_utf8_lossy(req.arg(2).unwrap_or_default());
            match category::bits(&name).filter(|&bits| bits != category::ALL) {
                Some(bits) => lines(ctx.commands().in_categories(bits)),
                None => error_reply(&format!("ERR Unknown category '{name}'")),
            }
        }
        (b"log", 2 | 3) => ctx.shared.acl_log.command(req.arg(2), client.proto),
        _ => error_reply(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. orthrus answers \
             ACL WHOAMI, USERS, LIST, CAT and LOG",
            String::from_utf8_lossy(&sub)
        )),
    }
}

fn lines(items: impl IntoIterator<Item = String>) -> Bytes {
    let items: Vec<String> = items.into_iter().collect();
    let mut out = BytesMut::new();
    encode::array_header(&mut out, items.len());
    for item in items {
        encode::bulk(&mut out, item.as_bytes());
    }
    out.freeze()
}
