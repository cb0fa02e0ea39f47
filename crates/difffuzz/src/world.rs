//! The users mode's world, drawn from the run's seed: the users (Redis
//! ACL rules, the same on both targets but for the script rule below),
//! and the routes orthrus takes (`c:` to a standalone upstream `b`, its
//! prefix removed or not; `m:` to the default cluster, mirrored to a
//! standalone upstream `mir`). The reference redis-server has every key
//! under its full name.
//!
//! orthrus refuses EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL and FCALL_RO
//! to a user whose key patterns do not include `~*`, whose channels are
//! not `&*` or whose command rules deny any (a script may touch any key
//! and call any command; docs/security.md): the reference
//! gets those users with `-eval -evalsha -eval_ro -evalsha_ro -fcall
//! -fcall_ro` appended, so both refuse with `-NOPERM`.

use std::fmt::Write as _;

use crate::rng::Rng;

/// The password of the default user on both targets (orthrus's
/// `client.password`, the reference's `requirepass`).
pub const DEFAULT_PASSWORD: &str = "root-pw";
/// The user with every permission, present in every run.
pub const ROOT: &str = "root";
/// The prefix routed to the standalone upstream `b`.
pub const CUT: &str = "c:";
/// The prefix of the default cluster that is mirrored to `mir`.
pub const MIRRORED: &str = "m:";

/// Key patterns a user may get (keys are `[c:|m:]{t}N` or `[c:|m:]kN`),
/// read-only and write-only ones among them.
const KEY_PATTERNS: &[&str] = &[
    "~*", "~c:*", "~m:*", "~{a}*", "~m:{b}*", "~k*", "~c:{a}*", "%R~*", "%R~c:*", "%R~{b}*",
    "%W~*", "%W~m:*", "%W~{a}*",
];
const CHANNEL_RULES: &[&str] = &["&*", "&ch*", "&c71", "&ch1 &ch2", ""];
const BASE_COMMANDS: &[&str] = &[
    "+@all",
    "+@all -@dangerous",
    "+@read",
    "+@read +@write",
    "+@all -@write",
    "+@all -@scripting",
    "+@all -@keyspace",
    "+@read +@write +@pubsub +@connection +@transaction",
];
const EXTRA_COMMANDS: &[&str] = &[
    "+get",
    "-set",
    "-@scripting",
    "-@keyspace",
    "+@pubsub",
    "-sort",
    "+ping",
    "-@dangerous",
    "+eval",
    "-publish",
    "+subscribe",
    "-mget",
    "+@transaction",
    "-hset",
    "+@connection",
    "-@list",
];
const SCRIPT_RUNNERS: &str = "-eval -evalsha -eval_ro -evalsha_ro -fcall -fcall_ro";

/// One user: its name and password, and its rules as orthrus takes them.
#[derive(Clone, Debug)]
pub struct User {
    pub name: String,
    pub password: String,
    /// Key patterns, channel rules and command rules (no `on`, no password).
    pub rules: String,
    /// Whether scripts are allowed to it by orthrus (`~*`, `&*` and
    /// `+@all` with only allowing rules after it).
    pub scripts: bool,
}

/// What a run configures: its users and whether `c:` is cut.
#[derive(Clone, Debug)]
pub struct World {
    pub users: Vec<User>,
    /// `remove_prefix` of the `c:` route.
    pub cut: bool,
}

// === impl User ===

impl User {
    /// The rules for orthrus's `[client.users.NAME] rules`.
    pub fn orthrus_rules(&self) -> String {
        format!("on >{} {}", self.password, self.rules)
    }

    /// The rules for the reference's `ACL SETUSER NAME ...`, one per word.
    pub fn reference_rules(&self) -> Vec<String> {
        let mut rules = self.orthrus_rules();
        if !self.scripts {
            rules.push(' ');
            rules.push_str(SCRIPT_RUNNERS);
        }
        rules.split_whitespace().map(str::to_string).collect()
    }

    /// Whether it may do everything (CLIENT REPLY is sent only as such).
    pub fn is_root(&self) -> bool {
        self.name == ROOT
    }
}

// === impl World ===

impl World {
    /// `users` users (at least 2: root and one more), drawn from `seed`.
    pub fn draw(seed: u64, users: usize) -> World {
        let mut rng = Rng::new(seed ^ 0x005e_ed0f_0bad_cafe);
        let mut out = vec![User {
            name: ROOT.to_string(),
            password: format!("pw-{ROOT}"),
            rules: "~* &* +@all".to_string(),
            scripts: true,
        }];
        for i in 1..users.max(2) {
            out.push(draw_user(&mut rng, &format!("u{i}")));
        }
        World {
            users: out,
            cut: rng.chance(50),
        }
    }

    /// orthrus's configuration file: the users, the upstreams `b` and
    /// `mir` and the two routes (the default cluster comes by `--seeds`).
    pub fn config(&self, b: &str, mir: &str) -> String {
        let mut text = format!("[client]\npassword = \"{DEFAULT_PASSWORD}\"\n\n");
        for u in &self.users {
            let _ = writeln!(
                text,
                "[client.users.{}]\nrules = \"{}\"\n",
                u.name,
                u.orthrus_rules()
            );
        }
        let _ = write!(
            text,
            "[upstreams.b]\nseeds = [\"{b}\"]\nmode = \"standalone\"\n\n\
             [upstreams.mir]\nseeds = [\"{mir}\"]\nmode = \"standalone\"\n\n\
             [[routes]]\nprefix = \"{CUT}\"\nupstream = \"b\"\nremove_prefix = {}\n\n\
             [[routes]]\nprefix = \"{MIRRORED}\"\nupstream = \"default\"\nmirror = [\"mir\"]\n",
            self.cut
        );
        text
    }

    /// The user called `name`.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// A line per user, for the start of a run's output.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "routes: c: -> b (remove_prefix = {}), m: -> default, mirror mir\n",
            self.cut
        );
        for u in &self.users {
            let _ = writeln!(out, "user {}: {}", u.name, u.rules);
        }
        out
    }
}

fn draw_user(rng: &mut Rng, name: &str) -> User {
    let mut words: Vec<&str> = Vec::new();
    for _ in 0..rng.range(0, 2) {
        let p = *rng.pick(KEY_PATTERNS);
        if !words.contains(&p) {
            words.push(p);
        }
    }
    let all_keys = words.contains(&"~*");
    // Redis refuses a pattern after `~*`: it goes last.
    words.sort_by_key(|w| *w == "~*");
    let channels = *rng.pick(CHANNEL_RULES);
    let mut commands = vec![*rng.pick(BASE_COMMANDS)];
    for _ in 0..rng.range(0, 2) {
        commands.push(*rng.pick(EXTRA_COMMANDS));
    }
    if !channels.is_empty() {
        words.push(channels);
    }
    let all_commands = commands[0] == "+@all"
        && commands
            .iter()
            .flat_map(|c| c.split_whitespace())
            .all(|r| r.starts_with('+'));
    words.extend(commands);
    User {
        name: name.to_string(),
        password: format!("pw-{name}"),
        rules: words.join(" "),
        scripts: all_keys && channels == "&*" && all_commands,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_refused_on_the_reference_as_orthrus_refuses_them() {
        let world = World::draw(7, 12);
        for u in &world.users {
            let refused = u.reference_rules().iter().any(|r| r == "-evalsha");
            assert_eq!(refused, !u.scripts, "{u:?}");
            let has = |w: &str| u.rules.split_whitespace().any(|r| r == w);
            let denies = u.rules.split_whitespace().any(|r| r.starts_with('-'));
            assert_eq!(
                u.scripts,
                has("~*") && has("&*") && has("+@all") && !denies,
                "{u:?}"
            );
        }
    }
}
