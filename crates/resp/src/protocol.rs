//! The RESP version spoken on a connection.

/// The RESP version a client negotiated (`HELLO 2` / `HELLO 3`; RESP2 until
/// it says otherwise). It decides how the [`encode`](crate::encode)
/// functions write the types RESP2 lacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// RESP2: simple strings, errors, integers, bulk strings, arrays.
    #[default]
    Resp2,
    /// RESP3: adds null, double, boolean, big number, verbatim, map, set,
    /// push and attribute types.
    Resp3,
}

impl Protocol {
    /// The protocol for a `HELLO` version number, if Redis knows it.
    pub fn from_version(version: i64) -> Option<Self> {
        match version {
            2 => Some(Self::Resp2),
            3 => Some(Self::Resp3),
            _ => None,
        }
    }

    /// The `HELLO` version number (`2` or `3`).
    pub fn version(self) -> u8 {
        match self {
            Self::Resp2 => 2,
            Self::Resp3 => 3,
        }
    }
}
