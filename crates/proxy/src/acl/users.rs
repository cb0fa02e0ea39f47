//! Every user a client may log in as, parsed once per configuration (at
//! start-up and on each reload), so that AUTH only looks a name up.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::User;

/// The default user and the named ones.
#[derive(Debug)]
pub struct Users {
    /// `default` as ACL LIST shows it: with a client password, that
    /// password and every permission; without one, `nopass`, and `off`
    /// once named users exist.
    default: Arc<User>,
    /// Whether the default user has a password (logs in by AUTH).
    default_has_password: bool,
    named: BTreeMap<String, Arc<User>>,
}

// === impl Users ===

impl Users {
    /// The users of a configuration: the default user's password, if any,
    /// and the named users (their rules already checked).
    pub fn new(password: Option<&str>, named: impl IntoIterator<Item = User>) -> Users {
        let named: BTreeMap<String, Arc<User>> = named
            .into_iter()
            .map(|user| (user.name.clone(), Arc::new(user)))
            .collect();
        let default = match password {
            Some(password) => User::with_password("default", password),
            None => {
                let mut open = super::parse("default", "on nopass allkeys allchannels allcommands")
                    .unwrap_or_else(|_| User::new("default"));
                open.enabled = named.is_empty();
                open
            }
        };
        Users {
            default: Arc::new(default),
            default_has_password: password.is_some(),
            named,
        }
    }

    /// The user `AUTH name password` checks the password against: a named
    /// user, or `default` when it has a password.
    pub fn login(&self, name: &[u8]) -> Option<&Arc<User>> {
        if name == b"default" {
            return self.default_has_password.then_some(&self.default);
        }
        std::str::from_utf8(name)
            .ok()
            .and_then(|name| self.named.get(name))
    }

    /// No password and no named user: every client is served as
    /// `default` without AUTH.
    pub fn open(&self) -> bool {
        !self.default_has_password && self.named.is_empty()
    }

    /// `default` first, then the named users by name.
    pub fn all(&self) -> impl Iterator<Item = &Arc<User>> {
        std::iter::once(&self.default).chain(self.named.values())
    }
}
