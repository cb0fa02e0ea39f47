//! Users with permissions, in Redis's ACL terms: a user's rules (Redis's
//! `ACL SETUSER` syntax, the subset in [`rules`]) parsed into a [`User`],
//! and the checks a request must pass: may this user run this command
//! (by name or category), touch these keys (read or write), use these
//! channels. Pure: no I/O and no command table; the caller passes a
//! command's full name, its category bits ([`category`]) and its keys.
//!
//! - [`rules`]: the rule parser.
//! - [`category`]: category names and bits.
//! - `glob`: Redis's pattern matching, for keys and channels.
//! - `users`: the users of a configuration, parsed once.

use ring::digest::{SHA256, digest};

pub mod category;
mod glob;
pub mod rules;
mod users;

pub use rules::{RuleError, parse};
pub use users::Users;

/// One user: whether it may log in, with what, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    /// Any password is accepted.
    pub nopass: bool,
    /// SHA-256 digests of the passwords accepted.
    passwords: Vec<[u8; 32]>,
    /// `+`/`-` rules in the order given; the last one that concerns a
    /// command decides.
    commands: Vec<CommandRule>,
    keys: Vec<KeyPattern>,
    channels: Vec<Box<[u8]>>,
}

/// What is done to a key, as bits: a command's key specification asks
/// for some (none at all for EXISTS, which reads no value), a key pattern
/// grants some (`%R~`, `%W~`, `~`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u8);

/// Why a request is refused, for the `-NOPERM` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    Command,
    Key,
    Channel,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum CommandRule {
    /// Every command with one of these category bits.
    Category(u32, bool),
    /// `cmd` (and its subcommands) or `cmd|sub`.
    Command(Box<str>, bool),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyPattern {
    pattern: Box<[u8]>,
    access: Access,
}

// === impl User ===

impl User {
    /// A new user, as `ACL SETUSER name` makes it: off, no password, no
    /// command, key or channel.
    pub fn new(name: &str) -> User {
        User {
            name: name.to_owned(),
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            commands: Vec::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// A password-only user (`[client.users] alice = "pw"`, or the default
    /// user's `client.password`): `on >pw +@all ~* &*`.
    pub fn with_password(name: &str, password: &str) -> User {
        let mut user = User::new(name);
        user.enabled = true;
        user.passwords.push(sha256(password.as_bytes()));
        user.commands
            .push(CommandRule::Category(category::ALL, true));
        user.keys.push(KeyPattern::all());
        user.channels.push(b"*".to_vec().into());
        user
    }

    /// Whether `given` logs this user in. The digests are compared without
    /// an early exit, so the time taken says nothing about the password.
    pub fn accepts(&self, given: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        let got = sha256(given);
        let mut any = self.nopass;
        for want in &self.passwords {
            let diff = want.iter().zip(&got).fold(0u8, |acc, (a, b)| acc | (a ^ b));
            any |= std::hint::black_box(diff) == 0;
        }
        any
    }

    /// Whether every command, key and channel is allowed: the checks can
    /// be skipped, and a script or function run for the user (on the node,
    /// as orthrus's backend user) stays within the rules whatever it calls.
    pub fn is_unrestricted(&self) -> bool {
        let all = |r: &CommandRule| matches!(r, CommandRule::Category(bits, true) if *bits == category::ALL);
        self.commands.iter().any(all)
            && self.commands.iter().all(|r| match r {
                CommandRule::Category(bits, allow) => *allow || *bits == 0,
                CommandRule::Command(_, allow) => *allow,
            })
            && self.has_all_keys_and_channels()
    }

    /// Whether every key may be read and written and every channel used
    /// (`~* &*`).
    fn has_all_keys_and_channels(&self) -> bool {
        self.has_all_keys(Access::READ_WRITE) && self.channels.iter().any(|c| &**c == b"*")
    }

    /// Whether every key may be accessed as `access` (`~*`, or `%R~*` for
    /// reading): SORT's BY and GET patterns, which name keys a pattern
    /// builds, need it to read, as in Redis.
    pub fn has_all_keys(&self, access: Access) -> bool {
        self.keys
            .iter()
            .any(|k| &*k.pattern == b"*" && k.access.covers(access))
    }

    /// Whether the command `full_name` (`get`, `client|kill`) with
    /// categories `categories` may run.
    pub fn may_run(&self, full_name: &str, categories: u32) -> bool {
        let container = full_name.split('|').next().unwrap_or(full_name);
        let mut allowed = false;
        for rule in &self.commands {
            match rule {
                CommandRule::Category(bits, allow) => {
                    if *bits == category::ALL || categories & bits != 0 {
                        allowed = *allow;
                    }
                }
                CommandRule::Command(name, allow) => {
                    if **name == *full_name || **name == *container {
                        allowed = *allow;
                    }
                }
            }
        }
        allowed
    }

    /// Whether `key` may be accessed as `access`: one pattern must match
    /// it and allow all of that access.
    pub fn may_access_key(&self, key: &[u8], access: Access) -> bool {
        self.keys
            .iter()
            .any(|k| k.access.covers(access) && glob::matches(&k.pattern, key))
    }

    /// Whether `channel` may be used; a pattern (PSUBSCRIBE) must be one
    /// of the user's patterns exactly, or the user must have `&*`.
    pub fn may_use_channel(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.channels.iter().any(|c| {
            &**c == b"*"
                || if is_pattern {
                    **c == *channel
                } else {
                    glob::matches(c, channel)
                }
        })
    }

    /// The user as `ACL LIST` shows it (passwords as `#<sha256>`).
    pub fn describe(&self) -> String {
        let mut out = format!(
            "user {} {}",
            self.name,
            if self.enabled { "on" } else { "off" }
        );
        if self.nopass {
            out.push_str(" nopass");
        }
        for hash in &self.passwords {
            out.push_str(" #");
            for b in hash {
                out.push_str(&format!("{b:02x}"));
            }
        }
        for k in &self.keys {
            let prefix = match k.access {
                Access::READ => "%R~",
                Access::WRITE => "%W~",
                _ => "~",
            };
            out.push_str(&format!(" {prefix}{}", String::from_utf8_lossy(&k.pattern)));
        }
        out.push_str(" resetchannels");
        for c in &self.channels {
            out.push_str(&format!(" &{}", String::from_utf8_lossy(c)));
        }
        if self.commands.is_empty() {
            out.push_str(" -@all");
        }
        for rule in &self.commands {
            let sign = |allow: &bool| if *allow { '+' } else { '-' };
            match rule {
                CommandRule::Category(bits, allow) if *bits == category::ALL => {
                    out.push_str(&format!(" {}@all", sign(allow)));
                }
                CommandRule::Category(bits, allow) => {
                    let name = category::NAMES
                        .iter()
                        .enumerate()
                        .find(|(i, _)| bits & (1 << i) != 0)
                        .map_or("", |(_, n)| n);
                    out.push_str(&format!(" {}@{name}", sign(allow)));
                }
                CommandRule::Command(name, allow) => {
                    out.push_str(&format!(" {}{name}", sign(allow)));
                }
            }
        }
        out
    }
}

// === impl Access ===

impl Access {
    pub const NONE: Access = Access(0);
    pub const READ: Access = Access(1);
    pub const WRITE: Access = Access(2);
    pub const READ_WRITE: Access = Access(3);
    /// Not a key: a channel in a key's place (SSUBSCRIBE, SPUBLISH; Redis's
    /// `NOT_KEY` flag), routed as a key and checked as a channel.
    pub const CHANNEL: Access = Access(4);

    /// What a key specification's flags ask for, as Redis decides it:
    /// `ACCESS` (the value is read or returned) asks to read, `INSERT`,
    /// `DELETE` and `UPDATE` to write; `RO`, `RW`, `OW` and `RM` alone ask
    /// for nothing. A spec whose flags vary with the arguments
    /// (`VARIABLE_FLAGS`) gives its widest here; SET's and BITFIELD's,
    /// the ones a rule can tell apart, are decided per request by their
    /// arguments (`route::table::keyspec::ByArguments`).
    pub fn of_key_spec<'a>(flags: impl IntoIterator<Item = &'a str>) -> Access {
        flags.into_iter().fold(Access::NONE, |acc, flag| {
            let bits = match flag.to_ascii_uppercase().as_str() {
                "ACCESS" => Access::READ.0,
                "INSERT" | "DELETE" | "UPDATE" => Access::WRITE.0,
                "NOT_KEY" => return Access::CHANNEL,
                _ => 0,
            };
            match acc {
                Access::CHANNEL => acc,
                _ => Access(acc.0 | bits),
            }
        })
    }

    /// Whether this is a channel in a key's place ([`Access::CHANNEL`]).
    pub fn is_channel(self) -> bool {
        self == Access::CHANNEL
    }

    /// What a command asks for when its key specifications are not known
    /// (the built-in table, Redis 6): a read-only command reads, any
    /// other writes.
    pub fn of_command(readonly: bool) -> Access {
        if readonly {
            Access::READ
        } else {
            Access::WRITE
        }
    }

    fn covers(self, wanted: Access) -> bool {
        self.0 & wanted.0 == wanted.0
    }
}

// === impl KeyPattern ===

impl KeyPattern {
    fn new(pattern: &str, access: Access) -> KeyPattern {
        KeyPattern {
            pattern: pattern.as_bytes().into(),
            access,
        }
    }

    fn all() -> KeyPattern {
        KeyPattern::new("*", Access::READ_WRITE)
    }
}

// === impl Denied ===

impl Denied {
    /// Redis 7.2's `-NOPERM` text for this refusal of `user` running
    /// `command`.
    pub fn message(self, user: &str, command: &str) -> String {
        match self {
            Denied::Command => {
                format!("NOPERM User {user} has no permissions to run the '{command}' command")
            }
            Denied::Key => "NOPERM No permissions to access a key".to_owned(),
            Denied::Channel => "NOPERM No permissions to access a channel".to_owned(),
        }
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

#[cfg(test)]
mod tests;
