//! Parsing a user's rules, in Redis's `ACL SETUSER` syntax, into a
//! [`User`]. The subset orthrus reads:
//!
//! - `on`, `off`; `reset` (back to a new user: off, no password, no
//!   command, no key, no channel)
//! - passwords: `>pw`, `<pw`, `#<sha256 hex>`, `!<sha256 hex>`, `nopass`,
//!   `resetpass`
//! - keys: `~pattern` (read and write), `%R~pattern`, `%W~pattern`,
//!   `%RW~pattern`, `allkeys` (`~*`), `resetkeys`
//! - channels: `&pattern`, `allchannels` (`&*`), `resetchannels`
//! - commands: `+cmd`, `-cmd`, `+cmd|sub`, `-cmd|sub`, `+@category`,
//!   `-@category`, `allcommands` (`+@all`), `nocommands` (`-@all`)
//!
//! Not read (an error names the rule): selectors `(...)`, `clearselectors`,
//! and first-argument rules such as `+select|0`.

use super::category;
use super::{Access, CommandRule, KeyPattern, User};

/// A rule orthrus does not understand, with Redis's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Error in ACL SETUSER modifier '{rule}': {reason}")]
pub struct RuleError {
    pub rule: String,
    pub reason: &'static str,
}

/// Builds user `name` from its rules, applied left to right on a new
/// user (off, no password, no permission).
pub fn parse(name: &str, rules: &str) -> Result<User, RuleError> {
    let mut user = User::new(name);
    for rule in rules.split_ascii_whitespace() {
        apply(&mut user, rule).map_err(|reason| RuleError {
            rule: rule.to_owned(),
            reason,
        })?;
    }
    Ok(user)
}

fn apply(user: &mut User, rule: &str) -> Result<(), &'static str> {
    let lower = rule.to_ascii_lowercase();
    match lower.as_str() {
        "on" => user.enabled = true,
        "off" => user.enabled = false,
        "nopass" => {
            user.nopass = true;
            user.passwords.clear();
        }
        "resetpass" => {
            user.nopass = false;
            user.passwords.clear();
        }
        "allkeys" => user.keys.push(KeyPattern::all()),
        "resetkeys" => user.keys.clear(),
        "allchannels" => user.channels.push(b"*".to_vec().into()),
        "resetchannels" => user.channels.clear(),
        "allcommands" => user.commands = vec![CommandRule::Category(category::ALL, true)],
        "nocommands" => user.commands = vec![CommandRule::Category(category::ALL, false)],
        "reset" => *user = User::new(&user.name),
        "clearselectors" => return Err("selectors are not supported by orthrus"),
        _ => return apply_prefixed(user, rule),
    }
    Ok(())
}

fn apply_prefixed(user: &mut User, rule: &str) -> Result<(), &'static str> {
    let (first, rest) = rule.split_at(rule.chars().next().map_or(0, char::len_utf8));
    match first {
        ">" => {
            user.nopass = false;
            let hash = super::sha256(rest.as_bytes());
            if !user.passwords.contains(&hash) {
                user.passwords.push(hash);
            }
        }
        "<" => {
            let hash = super::sha256(rest.as_bytes());
            user.passwords.retain(|h| *h != hash);
        }
        "#" => {
            user.nopass = false;
            let hash = hex_hash(rest)?;
            if !user.passwords.contains(&hash) {
                user.passwords.push(hash);
            }
        }
        "!" => {
            let hash = hex_hash(rest)?;
            user.passwords.retain(|h| *h != hash);
        }
        "~" => user.keys.push(KeyPattern::new(rest, Access::READ_WRITE)),
        "%" => {
            let (flags, pattern) = rest.split_once('~').ok_or("Syntax error")?;
            let access = match flags.to_ascii_uppercase().as_str() {
                "R" => Access::READ,
                "W" => Access::WRITE,
                "RW" | "WR" => Access::READ_WRITE,
                _ => return Err("Syntax error"),
            };
            user.keys.push(KeyPattern::new(pattern, access));
        }
        "&" => user.channels.push(rest.as_bytes().into()),
        "+" | "-" => command_rule(user, rest, first == "+")?,
        "(" => return Err("selectors are not supported by orthrus"),
        _ => return Err("Syntax error"),
    }
    Ok(())
}

fn command_rule(user: &mut User, name: &str, allow: bool) -> Result<(), &'static str> {
    if let Some(cat) = name.strip_prefix('@') {
        let bits = category::bits(cat).ok_or("Unknown command or category name in ACL")?;
        user.commands.push(CommandRule::Category(bits, allow));
        return Ok(());
    }
    let name = name.to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.split('|').count() <= 2
        && name.bytes().all(|b| b.is_ascii_graphic());
    if !valid {
        return Err("Unknown command or category name in ACL");
    }
    user.commands.push(CommandRule::Command(name.into(), allow));
    Ok(())
}

/// A `#`/`!` argument: 64 hex digits of a SHA-256.
fn hex_hash(hex: &str) -> Result<[u8; 32], &'static str> {
    const BAD: &str = "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters";
    let bytes = hex.as_bytes();
    if bytes.len() != 64 || !bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(BAD);
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let digit = |c: u8| {
            if c.is_ascii_digit() {
                c - b'0'
            } else {
                c - b'a' + 10
            }
        };
        if let [high, low] = pair {
            *byte = digit(*high) << 4 | digit(*low);
        }
    }
    Ok(out)
}
