//! The command table: for every command, its arity, whether it only reads,
//! where its keys are, and how orthrus handles it.
//!
//! Key positions come from the cluster's own `COMMAND` reply (Redis 7 key
//! specifications, so new commands and module commands route correctly);
//! a built-in table covers the common commands until that reply is known,
//! or when a node refuses `COMMAND`. How a command is *handled* (answered
//! locally, sent to any node, refused) is orthrus's own decision and always
//! comes from the built-in rules in [`crate::route::kind`].

use std::borrow::Cow;
use std::sync::Arc;

use orthrus_resp::{Request, Value};

use crate::acl::{Access, category};
use crate::route::counted;
use crate::route::kind::{self, Family, Kind};
use crate::route::prefix::{Place, Prefixes};
use keyspec::{Begin, ByArguments, Find, KeySpec};
use names::Names;
pub use rejection::Rejection;

/// One command (or `container|subcommand`).
#[derive(Debug)]
pub struct CommandInfo {
    /// Lower-case name as Redis reports it (`get`, `client|setname`).
    pub name: Box<str>,
    /// Redis arity: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i32,
    /// The command never writes (safe to resend when its outcome is unknown).
    pub readonly: bool,
    /// Redis refuses it inside MULTI (`no_multi`: SAVE, SHUTDOWN, ...);
    /// known from the cluster's `COMMAND` reply only.
    pub no_multi: bool,
    /// It writes or may replicate (`write`, `may_replicate`: EVAL,
    /// PUBLISH): what CLIENT PAUSE WRITE holds. Built-in entries: every
    /// command not marked read-only.
    pub may_write: bool,
    /// How orthrus handles it.
    pub kind: Kind,
    /// What it works on (latency figures are kept per family).
    pub family: Family,
    /// Set for the multi-key commands orthrus splits across slots.
    pub split: Option<kind::Merge>,
    /// Its number in INFO commandstats (`None` for a container).
    pub stat: Option<u16>,
    /// Its ACL categories as `acl::category` bits, from the cluster's
    /// `COMMAND` reply; the built-in table guesses `@read`, `@write` or
    /// `@admin @dangerous` from its flags until the reply is learnt.
    pub acl_categories: u32,
    /// XREAD and XREADGROUP block only when given `BLOCK`.
    blocks_with_block_option: bool,
    /// SORT: its `STORE` key is found by Redis's own rule, which its key
    /// specs leave out ([`CommandInfo::for_each_key`] follows it).
    sort_store: bool,
    /// SET and BITFIELD: what they do to their key depends on their
    /// arguments (key spec flag `VARIABLE_FLAGS`), decided as Redis does
    /// by [`CommandInfo::for_each_key`].
    by_arguments: Option<ByArguments>,
    /// A key spec of the cluster's `COMMAND` reply that orthrus cannot
    /// follow (begin search `unknown`, other than SORT's): not every key
    /// is known, so a user with key rules may not run it.
    pub keys_incomplete: bool,
    /// A container (SCRIPT, CLUSTER, ...) whose subcommands this table does
    /// not list: the subcommand's rule is looked up per request.
    rules_by_subcommand: bool,
    key_specs: Vec<KeySpec>,
    subcommands: Names<Arc<CommandInfo>>,
}

/// Everything orthrus knows about commands; cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct CommandTable {
    commands: Names<Arc<CommandInfo>>,
}

/// Where a request goes.
#[derive(Debug)]
pub enum Route {
    /// Answered by orthrus itself.
    Local(kind::Local),
    /// To the master that owns this slot (of the upstream its keys are
    /// routed to).
    Slot(Place),
    /// Key-less and the same on every node: any master will do.
    AnyNode,
    /// Key-less, to the master that holds orthrus's subscriptions.
    SubscriptionNode,
    /// Keys in several slots, split per slot and merged; where the keys
    /// were found to leave their first slot.
    Split(kind::Merge, CrossSlot),
    /// To every master, merged.
    FanOut(kind::FanOut),
    /// SCAN across the masters.
    Scan,
    /// A blocking command for the master of this slot.
    Blocking(Place),
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH (arity checked where run).
    Transaction,
    /// (S|P)SUBSCRIBE and their UN-forms (arity checked where run).
    Subscription(Arc<CommandInfo>),
    /// An administrative command: refused unless `admin.passthrough`.
    Admin(Arc<CommandInfo>),
    /// A RESP error for the client, connection stays usable.
    Reject(Rejection),
}

/// Where a request's keys were found to span places (slots, or
/// upstreams): every key before key `at` (0 is the first) goes to `first`,
/// key `at` to `then`, another place. A split starts from it instead of
/// placing those keys again; it numbers keys as the command's key specs
/// visit them, every argument from the first (every second, MSET), as the
/// built-in table and Redis's COMMAND both say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrossSlot {
    pub first: Place,
    pub at: usize,
    pub then: Place,
}

// === impl CommandTable ===

impl CommandTable {
    /// The built-in table: the common commands with their key positions.
    pub fn builtin() -> CommandTable {
        let mut commands = Names::default();
        for &(family, entries) in kind::BUILTIN {
            for entry in entries {
                let info = Arc::new(CommandInfo::from_builtin(entry, family));
                commands.insert(info.name.as_bytes(), Arc::clone(&info));
            }
        }
        CommandTable { commands }
    }

    /// The table learnt from a node's `COMMAND` reply. Commands missing from
    /// the reply but known to the built-in table are kept from it.
    pub fn from_command_reply(reply: &Value) -> Option<CommandTable> {
        let mut table = CommandTable::builtin();
        let entries = reply.as_array()?;
        let mut learnt = 0usize;
        for entry in entries {
            if let Some(mut info) = CommandInfo::from_reply(entry, None) {
                if info.family == Family::Other {
                    // COMMAND without categories (before Redis 6): keep
                    // the built-in family.
                    if let Some(known) = table.get(info.name.as_bytes()) {
                        info.family = known.family;
                    }
                }
                let info = Arc::new(info);
                table
                    .commands
                    .insert(info.name.as_bytes(), Arc::clone(&info));
                learnt = learnt.saturating_add(1);
            }
        }
        (learnt > 0).then_some(table)
    }

    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether `req`'s command may write or replicate (its `write` and
    /// `may_replicate` flags). What a script declares is for
    /// `Scripts::may_write`, which holds the bodies and functions.
    pub fn may_write(&self, req: &Request) -> bool {
        let name = req.arg(0).unwrap_or_default();
        self.get(name).is_some_and(|info| info.may_write)
    }

    /// Looks a command up by its (any-case) name.
    /// The full names of the commands and subcommands in one of the
    /// categories `bits` (ACL CAT's answer), sorted.
    pub fn in_categories(&self, bits: u32) -> Vec<String> {
        let mut names: Vec<String> = self
            .commands
            .values()
            .flat_map(|info| std::iter::once(info).chain(info.subcommands.values()))
            .filter(|info| info.acl_categories & bits != 0)
            .map(|info| info.name.to_string())
            .collect();
        names.sort_unstable();
        names
    }

    pub fn get(&self, name: &[u8]) -> Option<&Arc<CommandInfo>> {
        self.commands.get(name)
    }

    /// Decides where `req` goes (with no routes by prefix).
    #[cfg(test)]
    pub fn route(&self, req: &Request) -> Route {
        self.route_info(req, &Prefixes::default()).0
    }

    /// Decides where `req` goes, and gives the entry of the command (or
    /// subcommand) it names, if the table has one. Its keys are placed by
    /// [`CommandInfo::place`]: with routes by prefix, each key at its
    /// route's upstream, in the slot of the key as that upstream will see
    /// it; keys of several places are split when the command splits, and
    /// refused otherwise (`-CROSSROUTE` when the places are of several
    /// upstreams).
    #[inline]
    pub fn route_info(
        &self,
        req: &Request,
        prefixes: &Prefixes,
    ) -> (Route, Option<&Arc<CommandInfo>>) {
        let Some(name) = req.arg(0) else {
            return (Route::Reject(Rejection::UnknownCommand), None);
        };
        let Some(mut info) = self.get(name) else {
            return (Route::Reject(Rejection::UnknownCommand), None);
        };
        if !info.subcommands.is_empty() && !matches!(info.kind, Kind::Local(_)) {
            match req.arg(1).and_then(|sub| info.subcommands.get(sub)) {
                Some(sub) => info = sub,
                None if req.arg_count() < 2 => {
                    return (
                        Route::Reject(Rejection::WrongArity(info.clone())),
                        Some(info),
                    );
                }
                None => return (Route::Reject(Rejection::UnknownSubcommand), Some(info)),
            }
        }
        let route = route_command(info, req, prefixes);
        if prefixes.is_empty() {
            return (route, Some(info));
        }
        (routed(route, req, info, prefixes), Some(info))
    }
}

/// Commands Redis 7.0 flags `may_replicate` (CLIENT PAUSE WRITE holds
/// them), which its COMMAND reply leaves out.
const MAY_REPLICATE: &[&str] = &["eval", "evalsha", "fcall", "pfcount", "publish", "spublish"];

/// `route` with routes by prefix: keys that span slots of several
/// upstreams are the upstreams the client must change, and commands that
/// would lose a prefix the way they cannot are refused.
#[cold]
fn routed(route: Route, req: &Request, info: &Arc<CommandInfo>, prefixes: &Prefixes) -> Route {
    if matches!(route, Route::Reject(Rejection::CrossSlot))
        && info.upstream_of_keys(req, prefixes).is_err()
    {
        return Route::Reject(Rejection::CrossRoute);
    }
    if prefixes.strips() {
        if let Some(rejection) = cut::refusal(&route, req, info, prefixes) {
            return Route::Reject(rejection);
        }
    }
    route
}

/// Where a request for the command `info` goes.
fn route_command(info: &Arc<CommandInfo>, req: &Request, prefixes: &Prefixes) -> Route {
    // Transaction and subscription commands check their arity where they run.
    let checked_later = || matches!(info.kind, Kind::Transaction | Kind::Subscription);
    if !info.arity_ok(req.arg_count()) && !checked_later() {
        return Route::Reject(Rejection::WrongArity(Arc::clone(info)));
    }
    let mut kind = info.kind;
    if info.rules_by_subcommand {
        // A container the built-in table knows only as a whole: its
        // subcommand may have a rule of its own (SCRIPT LOAD).
        if let Some(sub) = req.arg(1) {
            let full = format!(
                "{}|{}",
                info.name,
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            );
            kind = kind::kind_of(&full, false, false, false);
        }
    }
    match kind {
        Kind::Local(local) => Route::Local(local),
        Kind::AnyNode => Route::AnyNode,
        Kind::SubscriptionNode => Route::SubscriptionNode,
        Kind::Admin => Route::Admin(Arc::clone(info)),
        Kind::Unsupported(why) => Route::Reject(Rejection::Unsupported(Arc::clone(info), why)),
        Kind::Transaction => Route::Transaction,
        Kind::Subscription => Route::Subscription(Arc::clone(info)),
        Kind::FanOut(how) => Route::FanOut(how),
        Kind::Scan => Route::Scan,
        Kind::Blocking => match info.place(req, prefixes) {
            Ok(Some(place)) => Route::Blocking(place),
            // No key (`BZMPOP 1 0 ...`, a numkeys that is not a number):
            // the node refuses it at once with its own error, never blocks.
            Ok(None) => Route::AnyNode,
            Err(_) => Route::Reject(Rejection::CrossSlot),
        },
        Kind::Keyed if info.blocks_with_block_option && has_block_option(req) => {
            match info.place(req, prefixes) {
                Ok(Some(place)) => Route::Blocking(place),
                Ok(None) => Route::AnyNode,
                Err(_) => Route::Reject(Rejection::CrossSlot),
            }
        }
        Kind::Keyed => match info.place(req, prefixes) {
            Ok(Some(place)) => Route::Slot(place),
            Ok(None) => Route::AnyNode,
            Err(cross) => match info.split {
                Some(merge) => Route::Split(merge, cross),
                None => Route::Reject(Rejection::CrossSlot),
            },
        },
    }
}

// === impl CommandInfo ===

impl CommandInfo {
    fn from_builtin(entry: &kind::Builtin, family: Family) -> CommandInfo {
        let access = match entry.name {
            "ssubscribe" | "sunsubscribe" | "spublish" => Access::CHANNEL,
            _ => Access::of_command(entry.flags.contains('r')),
        };
        let key_specs = match entry.keys {
            kind::Keys::None => Vec::new(),
            kind::Keys::Range(first, last, step) => vec![KeySpec {
                begin: Begin::Index(first),
                find: Find::Range {
                    last_key: if last < 0 {
                        last
                    } else {
                        last.saturating_sub(first)
                    },
                    step,
                    limit: 0,
                },
                access,
            }],
            kind::Keys::KeyCount { at, first } => vec![KeySpec {
                begin: Begin::Index(at),
                find: Find::KeyNum {
                    num_idx: 0,
                    first_key: first,
                    step: 1,
                },
                access,
            }],
            kind::Keys::AfterKeyword(word) => vec![KeySpec {
                begin: Begin::Keyword {
                    keyword: word.as_bytes().into(),
                    start_from: 1,
                },
                find: Find::Range {
                    last_key: -1,
                    step: 1,
                    limit: 2,
                },
                access,
            }],
        };
        let name: Box<str> = entry.name.into();
        CommandInfo {
            kind: kind::kind_of(
                &name,
                entry.flags.contains('b'),
                entry.flags.contains('a'),
                !key_specs.is_empty(),
            ),
            readonly: entry.flags.contains('r'),
            no_multi: false,
            may_write: !entry.flags.contains('r'),
            acl_categories: builtin_categories(entry.name, entry.flags),
            family,
            arity: entry.arity,
            name,
            split: kind::split_merge(entry.name),
            stat: counted::id(entry.name),
            blocks_with_block_option: is_xread(entry.name),
            sort_store: entry.name == "sort",
            by_arguments: ByArguments::of(entry.name),
            keys_incomplete: false,
            rules_by_subcommand: kind::CONTAINERS.contains(&entry.name),
            key_specs,
            subcommands: Names::default(),
        }
    }

    /// One entry of a `COMMAND` reply: `[name, arity, flags, first, last,
    /// step, acl, tips, key_specs, subcommands]` (Redis 7; Redis 6 stops at
    /// `acl`, earlier at `step`).
    /// `parent` is the family of the container of a subcommand.
    fn from_reply(entry: &Value, parent: Option<Family>) -> Option<CommandInfo> {
        let fields = entry.as_array()?;
        let name = fields.first()?.as_str()?.to_ascii_lowercase();
        let arity = i32::try_from(fields.get(1)?.as_int()?).ok()?;
        let flags: Vec<&str> = fields
            .get(2)?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let has = |f: &str| flags.iter().any(|x| x.eq_ignore_ascii_case(f));
        let acl_categories = fields.get(6).and_then(Value::as_array).map_or(0, |names| {
            category::from_names(names.iter().filter_map(Value::as_str))
        });
        let family = fields
            .get(6)
            .and_then(Value::as_array)
            .and_then(|categories| {
                Family::from_categories(categories.iter().filter_map(Value::as_str))
            })
            .or(parent)
            .unwrap_or(Family::Other);
        let first = fields.get(3)?.as_int()?;
        let last = fields.get(4)?.as_int()?;
        let step = usize::try_from(fields.get(5)?.as_int()?)
            .unwrap_or(1)
            .max(1);
        let specs = fields.get(8).and_then(Value::as_array).unwrap_or_default();
        let mut key_specs: Vec<KeySpec> = specs.iter().filter_map(KeySpec::from_reply).collect();
        let unknown = specs.iter().any(KeySpec::is_unknown);
        if key_specs.is_empty() && first > 0 {
            key_specs.push(KeySpec {
                begin: Begin::Index(first),
                find: Find::Range {
                    last_key: if last < 0 {
                        last
                    } else {
                        last.saturating_sub(first)
                    },
                    step,
                    limit: 0,
                },
                access: Access::of_command(has("readonly")),
            });
        }
        let subcommands: Names<Arc<CommandInfo>> = fields
            .get(9)
            .and_then(Value::as_array)
            .map(|subs| {
                subs.iter()
                    .filter_map(|sub| CommandInfo::from_reply(sub, Some(family)))
                    .map(|info| {
                        let sub = info.name.rsplit('|').next().unwrap_or("").as_bytes().into();
                        (sub, Arc::new(info))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let kind = kind::kind_of(&name, has("blocking"), has("admin"), !key_specs.is_empty());
        // Redis 7.0's COMMAND does not show `may_replicate`.
        let may_write =
            has("write") || has("may_replicate") || MAY_REPLICATE.contains(&name.as_str());
        Some(CommandInfo {
            split: kind::split_merge(&name),
            stat: counted::id(&name),
            blocks_with_block_option: is_xread(&name),
            sort_store: name == "sort",
            by_arguments: ByArguments::of(&name),
            // SORT's and SORT_RO's unknown specs are BY and GET patterns,
            // and SORT's STORE: followed where they are checked.
            keys_incomplete: unknown && name != "sort" && name != "sort_ro",
            rules_by_subcommand: subcommands.is_empty()
                && kind::CONTAINERS.contains(&name.as_str()),
            name: name.into(),
            arity,
            readonly: has("readonly"),
            no_multi: has("no_multi"),
            may_write,
            acl_categories,
            kind,
            family,
            key_specs,
            subcommands,
        })
    }

    fn arity_ok(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= arity.saturating_neg()
        }
    }

    /// The entry of `req`'s subcommand, when this is a container the
    /// table lists subcommands for (`client|kill` for CLIENT KILL).
    pub fn subcommand(&self, req: &Request) -> Option<&Arc<CommandInfo>> {
        req.arg(1).and_then(|sub| self.subcommands.get(sub))
    }

    /// What a user's rules see of `req`: the full name of its command
    /// (`client|list` for CLIENT LIST) and that command's categories. A
    /// container whose subcommands the table does not list (the built-in
    /// table's CLIENT, SLOWLOG, ...) gives its subcommand's name with
    /// Redis 7.0's categories for it.
    pub fn acl_view(&self, req: &Request) -> (Cow<'_, str>, u32) {
        if let Some(sub) = self.subcommand(req) {
            return (Cow::Borrowed(sub.full_name()), sub.acl_categories);
        }
        if let (true, Some(sub)) = (self.subcommands.is_empty(), req.arg(1)) {
            if let Some((full, names)) = categories::of_subcommand(&self.name, sub) {
                return (Cow::Owned(full), category::from_names(names.split(' ')));
            }
        }
        (Cow::Borrowed(self.full_name()), self.acl_categories)
    }

    /// Lower-case name used in error texts (`get`, `client|setname`).
    pub fn full_name(&self) -> &str {
        &self.name
    }
}

/// A built-in entry's categories: Redis 7.0's for the command, else (a
/// command Redis 7.0 does not know) guessed from its flags (`a` admin, `r`
/// read).
fn builtin_categories(name: &str, flags: &str) -> u32 {
    if let Some(names) = categories::of(name) {
        return category::from_names(names.split(' '));
    }
    let bit = |name| category::bits(name).unwrap_or(0);
    if flags.contains('a') {
        bit("admin") | bit("dangerous")
    } else if flags.contains('r') {
        bit("read")
    } else {
        bit("write")
    }
}

fn is_xread(name: &str) -> bool {
    name == "xread" || name == "xreadgroup"
}

fn has_block_option(req: &Request) -> bool {
    req.args().skip(1).any(|a| a.eq_ignore_ascii_case(b"block"))
}

mod categories;
pub mod cut;
mod keys;
mod keyspec;
mod names;
mod rejection;

#[cfg(test)]
mod tests;
