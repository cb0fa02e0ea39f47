//! Why a request is refused before it reaches the cluster, and the error
//! the client gets, worded as Redis words it where Redis has a word for it.

use std::sync::Arc;

use orthrus_resp::Request;

use super::CommandInfo;
use crate::route::kind;

/// Why a request is refused before it reaches the cluster.
#[derive(Debug)]
pub enum Rejection {
    UnknownCommand,
    UnknownSubcommand,
    WrongArity(Arc<CommandInfo>),
    CrossSlot,
    /// Keys routed by their prefixes to different upstreams, in a command
    /// that is not split.
    CrossRoute,
    Unsupported(Arc<CommandInfo>, &'static str),
}

// === impl Rejection ===

impl Rejection {
    /// Why an administrative command is refused without `admin.passthrough`.
    pub fn admin(info: Arc<CommandInfo>) -> Rejection {
        Rejection::Unsupported(info, kind::ADMIN)
    }

    /// The error text for a refused request, worded as Redis words it where
    /// Redis has a word for it.
    pub fn message(&self, req: &Request) -> String {
        let name = String::from_utf8_lossy(req.arg(0).unwrap_or_default());
        match self {
            Rejection::UnknownCommand => {
                let mut args = String::new();
                for arg in req.args().skip(1) {
                    if args.len() >= 128 {
                        break;
                    }
                    let arg = String::from_utf8_lossy(arg);
                    let room = 128usize.saturating_sub(args.len());
                    args.push('\'');
                    args.extend(arg.chars().take(room));
                    args.push_str("' ");
                }
                let name: String = name.chars().take(128).collect();
                format!("ERR unknown command '{name}', with args beginning with: {args}")
            }
            Rejection::UnknownSubcommand => {
                let sub = String::from_utf8_lossy(req.arg(1).unwrap_or_default());
                let sub: String = sub.chars().take(128).collect();
                format!(
                    "ERR unknown subcommand '{sub}'. Try {} HELP.",
                    name.to_ascii_uppercase()
                )
            }
            Rejection::WrongArity(info) => {
                format!(
                    "ERR wrong number of arguments for '{}' command",
                    info.full_name()
                )
            }
            Rejection::CrossSlot => {
                "CROSSSLOT Keys in request don't hash to the same slot".to_owned()
            }
            Rejection::CrossRoute => {
                "CROSSROUTE Keys in request don't route to the same upstream".to_owned()
            }
            Rejection::Unsupported(info, why) => {
                let shown = info.full_name().replace('|', " ").to_ascii_uppercase();
                format!("ERR orthrus: {shown} is not supported: {why}")
            }
        }
    }
}
