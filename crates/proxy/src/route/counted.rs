//! The names INFO commandstats counts, each given a small number once for
//! the life of the process, so that counting a request is an index into a
//! per-worker array instead of parsing its name and a hash lookup.
//!
//! A command-table entry gets its number when the table is built (`get`,
//! `client|list`); the same name keeps its number when the table is learnt
//! again. Containers (`client`, `config`, ...) get none: Redis counts them
//! per subcommand, so a request that stops at the container (a wrong
//! arity, an unknown subcommand) is counted by the name it sent.

use std::sync::{Mutex, OnceLock};

use rustc_hash::FxHashMap as HashMap;

/// Most names numbered (Redis 7.0 has about 240 commands and 200
/// subcommands; modules add some). Past it, names are counted the slow way.
pub const MAX_NAMES: usize = 4096;

#[derive(Default)]
struct Names {
    ids: HashMap<Box<str>, u16>,
    names: Vec<Box<str>>,
}

fn names() -> &'static Mutex<Names> {
    static NAMES: OnceLock<Mutex<Names>> = OnceLock::new();
    NAMES.get_or_init(Mutex::default)
}

/// Whether Redis 7.0 counts `name` per subcommand (`cmdstat_client|list`).
/// A match, not a list search: it runs for requests counted by name.
pub fn is_container(name: &[u8]) -> bool {
    matches!(
        name,
        b"acl"
            | b"client"
            | b"cluster"
            | b"command"
            | b"config"
            | b"function"
            | b"latency"
            | b"memory"
            | b"module"
            | b"object"
            | b"pubsub"
            | b"script"
            | b"slowlog"
            | b"xgroup"
            | b"xinfo"
    )
}

/// The number of the (lower-case) command name `name`, given on first
/// use; `None` for a container, or once `MAX_NAMES` are numbered.
pub fn id(name: &str) -> Option<u16> {
    if is_container(name.as_bytes()) {
        return None;
    }
    let mut names = names().lock().ok()?;
    if let Some(&id) = names.ids.get(name) {
        return Some(id);
    }
    if names.names.len() >= MAX_NAMES {
        return None;
    }
    let id = u16::try_from(names.names.len()).ok()?;
    names.names.push(name.into());
    names.ids.insert(name.into(), id);
    Some(id)
}

/// Whether `name` (lower case) is a command or subcommand some command
/// table has numbered, or a container: what Redis has a commandstats line
/// for. A name no table knows is an unknown command, which Redis counts
/// only among the errors.
pub fn known(name: &[u8]) -> bool {
    if is_container(name) {
        return true;
    }
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    names()
        .lock()
        .is_ok_and(|names| names.ids.contains_key(name))
}

/// The name numbered `id`.
pub fn name(id: usize) -> Option<Box<str>> {
    names().lock().ok()?.names.get(id).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_number_and_containers_have_none() {
        let get = id("get").unwrap();
        assert_eq!(id("get"), Some(get));
        assert_ne!(id("client|list"), Some(get));
        assert_eq!(name(usize::from(get)).as_deref(), Some("get"));
        assert_eq!(id("client"), None);
        assert_eq!(id("config"), None);
        assert!(known(b"get") && known(b"client|list") && known(b"client"));
        assert!(!known(b"nosuchcommand") && !known(b"\xff"));
    }
}
