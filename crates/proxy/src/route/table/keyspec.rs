//! A command's key specification: where its keys start and how to find
//! the rest (Redis 7's `begin_search` and `find_keys`, simplified to what
//! routing needs), read from COMMAND's reply or made from the built-in table.

use orthrus_resp::{Request, Value};

use crate::acl::Access;

/// Where a command's keys start (a Redis 7 key specification, simplified to
/// what routing needs), and what the command does to them (for ACL key
/// patterns).
#[derive(Clone, Debug)]
pub(super) struct KeySpec {
    pub begin: Begin,
    pub find: Find,
    pub access: Access,
}

#[derive(Clone, Debug)]
pub(super) enum Begin {
    Index(i64),
    Keyword { keyword: Box<[u8]>, start_from: i64 },
}

#[derive(Clone, Debug)]
pub(super) enum Find {
    Range {
        last_key: i64,
        step: usize,
        limit: usize,
    },
    KeyNum {
        num_idx: usize,
        first_key: usize,
        step: usize,
    },
}

// === impl KeySpec ===

impl KeySpec {
    /// Parses one key specification (a map in RESP3, a flat array in RESP2).
    pub fn from_reply(spec: &Value) -> Option<KeySpec> {
        let begin = spec.field("begin_search")?;
        let begin_spec = begin.field("spec")?;
        let begin = match begin.field("type")?.as_str()? {
            "index" => Begin::Index(begin_spec.field("index")?.as_int()?),
            "keyword" => Begin::Keyword {
                keyword: begin_spec.field("keyword")?.as_bytes()?.into(),
                start_from: begin_spec.field("startfrom")?.as_int()?,
            },
            _ => return None,
        };
        let find = spec.field("find_keys")?;
        let find_spec = find.field("spec")?;
        let as_usize = |v: &Value| v.as_int().and_then(|n| usize::try_from(n).ok());
        let find = match find.field("type")?.as_str()? {
            "range" => Find::Range {
                last_key: find_spec.field("lastkey")?.as_int()?,
                step: as_usize(find_spec.field("keystep")?)?.max(1),
                limit: as_usize(find_spec.field("limit")?)?,
            },
            "keynum" => Find::KeyNum {
                num_idx: as_usize(find_spec.field("keynumidx")?)?,
                first_key: as_usize(find_spec.field("firstkey")?)?,
                step: as_usize(find_spec.field("keystep")?)?.max(1),
            },
            _ => return None,
        };
        let flags = spec
            .field("flags")
            .and_then(Value::as_array)
            .unwrap_or_default();
        let access = Access::of_key_spec(flags.iter().filter_map(Value::as_str));
        Some(KeySpec {
            begin,
            find,
            access,
        })
    }

    /// Whether a key specification of a `COMMAND` reply begins its search
    /// in a way only the command's own code knows (`unknown`: SORT's
    /// `STORE`, MIGRATE's keys).
    pub fn is_unknown(spec: &Value) -> bool {
        spec.field("begin_search")
            .and_then(|b| b.field("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t == "unknown")
    }

    /// First and last argument index of this spec's keys, and the step.
    pub fn positions(&self, req: &Request, argc: usize) -> Option<(usize, usize, usize)> {
        let argc_i = i64::try_from(argc).ok()?;
        let start = match &self.begin {
            Begin::Index(i) => usize::try_from(*i).ok()?,
            Begin::Keyword {
                keyword,
                start_from,
            } => {
                let (from, backwards) = if *start_from >= 0 {
                    (*start_from, false)
                } else {
                    (argc_i.checked_add(*start_from)?, true)
                };
                let from = usize::try_from(from).ok()?;
                let hit = |i: &usize| req.arg(*i).is_some_and(|a| a.eq_ignore_ascii_case(keyword));
                let pos = if backwards {
                    (1..=from).rev().find(hit)?
                } else {
                    (from..argc).find(hit)?
                };
                pos.checked_add(1)?
            }
        };
        if start >= argc {
            return None;
        }
        match self.find {
            Find::Range {
                last_key,
                step,
                limit,
            } => {
                let last = if last_key >= 0 {
                    start.checked_add(usize::try_from(last_key).ok()?)?
                } else if last_key == -1 && limit > 1 {
                    let remaining = argc.checked_sub(start)?;
                    start
                        .checked_add(remaining.checked_div(limit)?)?
                        .checked_sub(1)?
                } else {
                    usize::try_from(argc_i.checked_add(last_key)?).ok()?
                };
                (last >= start).then_some((start, last.min(argc.checked_sub(1)?), step))
            }
            Find::KeyNum {
                num_idx,
                first_key,
                step,
            } => {
                let n: usize = std::str::from_utf8(req.arg(start.checked_add(num_idx)?)?)
                    .ok()?
                    .parse()
                    .ok()?;
                if n == 0 {
                    return None;
                }
                // `n` is the client's: a count past the arguments (as
                // large as it likes) finds no keys, and the node answers
                // with its own error, as Redis words it.
                let first = start.checked_add(first_key)?;
                let last = n.checked_sub(1)?.checked_mul(step)?.checked_add(first)?;
                (last < argc).then_some((first, last, step))
            }
        }
    }
}

/// The commands whose key spec flags vary with their arguments (Redis's
/// `VARIABLE_FLAGS`) in a way a user's `%R~`/`%W~` rules see: what they
/// do to their key is decided as Redis's `setGetKeys` and
/// `bitfieldGetKeys` decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByArguments {
    /// SET writes its key without reading it, unless given `GET`.
    Set,
    /// BITFIELD of only `GET type offset` and `OVERFLOW how` reads its
    /// key; anything else (a `SET`, an `INCRBY`, a word cut short) reads
    /// and writes it.
    Bitfield,
}

impl ByArguments {
    /// The rule of the command `name` (lower case), if it has one.
    pub fn of(name: &str) -> Option<ByArguments> {
        match name {
            "set" => Some(ByArguments::Set),
            "bitfield" => Some(ByArguments::Bitfield),
            _ => None,
        }
    }

    /// What the command `req` does to its key.
    pub fn access(self, req: &Request) -> Access {
        let argc = req.arg_count();
        let is = |i: usize, word: &[u8]| req.arg(i).is_some_and(|a| a.eq_ignore_ascii_case(word));
        match self {
            ByArguments::Set => {
                if (3..argc).any(|i| is(i, b"get")) {
                    Access::READ_WRITE
                } else {
                    Access::WRITE
                }
            }
            ByArguments::Bitfield => {
                let mut i = 2usize;
                while i < argc {
                    let left = argc.saturating_sub(i).saturating_sub(1);
                    let step = if is(i, b"get") && left >= 2 {
                        3
                    } else if is(i, b"overflow") && left >= 1 {
                        2
                    } else {
                        return Access::READ_WRITE;
                    };
                    i = i.saturating_add(step);
                }
                Access::READ
            }
        }
    }
}
