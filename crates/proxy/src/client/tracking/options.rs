//! The options of CLIENT TRACKING ON as the nodes see them, and the
//! command that turns tracking on on a node.

use bytes::Bytes;

/// The options of CLIENT TRACKING ON that the nodes see.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// BCAST prefixes, in the order given (`""` when BCAST had none).
    pub prefixes: Vec<Bytes>,
}

// === impl Options ===

impl Options {
    /// `CLIENT TRACKING ON` with these options and `prefixes`, redirected
    /// on the node to `listener`.
    pub(crate) fn command(&self, prefixes: &[Bytes], listener: Option<u64>) -> Bytes {
        let mut args: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING", b"ON"];
        if self.bcast {
            args.push(b"BCAST");
            for p in prefixes.iter().filter(|p| !p.is_empty()) {
                args.push(b"PREFIX");
                args.push(p);
            }
        }
        for (set, name) in [
            (self.optin, &b"OPTIN"[..]),
            (self.optout, b"OPTOUT"),
            (self.noloop, b"NOLOOP"),
        ] {
            if set {
                args.push(name);
            }
        }
        let id = listener.map(|id| id.to_string());
        if let Some(id) = &id {
            args.push(b"REDIRECT");
            args.push(id.as_bytes());
        }
        orthrus_resp::encode::command(&args)
    }

    /// The flags TRACKINGINFO shows for these options.
    pub(crate) fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec!["on"];
        for (set, name) in [
            (self.bcast, "bcast"),
            (self.optin, "optin"),
            (self.optout, "optout"),
        ] {
            if set {
                flags.push(name);
            }
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orthrus_resp::Request;

    #[test]
    fn the_node_command_carries_the_options() {
        let options = Options {
            bcast: true,
            noloop: true,
            prefixes: vec![Bytes::from_static(b"a:"), Bytes::new()],
            ..Options::default()
        };
        let frame = options.command(&options.prefixes, Some(7));
        let expected = Request::from_args(&[
            &b"CLIENT"[..],
            b"TRACKING",
            b"ON",
            b"BCAST",
            b"PREFIX",
            b"a:",
            b"NOLOOP",
            b"REDIRECT",
            b"7",
        ])
        .into_frame();
        assert_eq!(frame, expected);
    }
}
