//! `[client.users]`: the users clients may log in as, by password alone or
//! by Redis ACL rules, and the parsed form every worker reads.

use serde::{Deserialize, Serialize};

use super::ClientConfig;

impl ClientConfig {
    /// The users this configuration defines, parsed (entries whose rules
    /// do not parse are left out: `validate` refuses them first).
    pub fn parsed_users(&self) -> crate::acl::Users {
        crate::acl::Users::new(
            self.password.as_deref(),
            self.users
                .iter()
                .filter_map(|(name, spec)| spec.to_user(name).ok()),
        )
    }
}

/// One `[client.users]` entry.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum UserConfig {
    /// `alice = "pw"`: this password, every permission.
    Password(String),
    /// `[client.users.alice] rules = "..."`.
    Rules(UserRules),
}

/// `[client.users.NAME]`: a user defined by Redis ACL rules.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserRules {
    /// Redis ACL rules, in `ACL SETUSER` syntax: `on`/`off`, `>password`,
    /// `#sha256`, `~keys`, `%R~keys`, `%W~keys`, `&channels`, `+cmd`,
    /// `-cmd`, `+@category`, `-@category`, `allkeys`, `allchannels`,
    /// `allcommands`, `nocommands`, `resetkeys`, ... A user starts off,
    /// with no password and no permission. No default.
    pub rules: String,
}

impl UserConfig {
    /// The user this entry defines, as user `name`.
    pub fn to_user(&self, name: &str) -> Result<crate::acl::User, crate::acl::RuleError> {
        match self {
            UserConfig::Password(password) => Ok(crate::acl::User::with_password(name, password)),
            UserConfig::Rules(rules) => crate::acl::parse(name, &rules.rules),
        }
    }
}
