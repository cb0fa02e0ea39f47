//! The command table: for every command, its arity, whether it only reads,
//! where its keys are, and how orthrus handles it.
//!
//! Key positions come from the cluster's own `COMMAND` reply (Redis 7 key
//! specifications, so new commands and module commands route correctly);
//! a built-in table covers the common commands until that reply is known,
//! or when a node refuses `COMMAND`. How a command is *handled* (answered
//! locally, sent to any node, refused) is orthrus's own decision and always
//! comes from the built-in rules in [`crate::route::kind`].

use std::ops::ControlFlow;
use std::sync::Arc;

use orthrus_cluster::Slot;
use orthrus_resp::{Request, Value};

use crate::acl::{Access, category};
use crate::route::counted;
use crate::route::kind::{self, Family, Kind};
use crate::route::prefix::{Place, Prefixes, Upstream};
use keyspec::{Begin, Find, KeySpec};
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

/// Where a request's keys were found to span slots: every key before key
/// `at` (0 is the first) hashes to `first`, key `at` to `then`, another
/// slot. A split starts from it instead of hashing those keys again; it
/// numbers keys as the command's key specs visit them, every argument from
/// the first (every second, MSET), as the built-in table and Redis's
/// COMMAND both say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrossSlot {
    pub first: Slot,
    pub at: usize,
    pub then: Slot,
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

    /// Decides where `req` goes.
    #[cfg(test)]
    pub fn route(&self, req: &Request) -> Route {
        self.route_info(req).0
    }

    /// [`CommandTable::route_info`] with routes by key prefix: a keyed
    /// request goes to the upstream its keys are routed to, and is refused
    /// when they are routed to several (a split command is split per key,
    /// each to its own upstream, where it is sent).
    #[inline]
    pub fn route_info_by(
        &self,
        req: &Request,
        prefixes: &Prefixes,
    ) -> (Route, Option<&Arc<CommandInfo>>) {
        let (route, info) = self.route_info(req);
        if prefixes.is_empty() {
            return (route, info);
        }
        (routed(route, req, info, prefixes), info)
    }

    /// Decides where `req` goes, and gives the entry of the command (or
    /// subcommand) it names, if the table has one.
    pub fn route_info(&self, req: &Request) -> (Route, Option<&Arc<CommandInfo>>) {
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
        (route_command(info, req), Some(info))
    }
}

/// Commands Redis 7.0 flags `may_replicate` (CLIENT PAUSE WRITE holds
/// them), which its COMMAND reply leaves out.
const MAY_REPLICATE: &[&str] = &["eval", "evalsha", "fcall", "pfcount", "publish", "spublish"];

/// `route`, its place's upstream the one every key of `req` is routed to.
#[cold]
fn routed(
    route: Route,
    req: &Request,
    info: Option<&Arc<CommandInfo>>,
    prefixes: &Prefixes,
) -> Route {
    let Some(info) = info else {
        return route;
    };
    // Keys in several slots of several upstreams: the upstreams are what
    // the client must change.
    if matches!(route, Route::Reject(Rejection::CrossSlot))
        && info.upstream_of_keys(req, prefixes).is_err()
    {
        return Route::Reject(Rejection::CrossRoute);
    }
    let (Route::Slot(place) | Route::Blocking(place)) = &route else {
        return route;
    };
    let Ok(upstream) = info.upstream_of_keys(req, prefixes) else {
        return Route::Reject(Rejection::CrossRoute);
    };
    let place = Place {
        upstream: upstream.unwrap_or(place.upstream),
        slot: place.slot,
    };
    match route {
        Route::Blocking(_) => Route::Blocking(place),
        _ => Route::Slot(place),
    }
}

/// Where a request for the command `info` goes.
fn route_command(info: &Arc<CommandInfo>, req: &Request) -> Route {
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
        Kind::Blocking => match info.slot(req) {
            Ok(Some(slot)) => Route::Blocking(Place::of(slot)),
            // No key (`BZMPOP 1 0 ...`, a numkeys that is not a number):
            // the node refuses it at once with its own error, never blocks.
            Ok(None) => Route::AnyNode,
            Err(_) => Route::Reject(Rejection::CrossSlot),
        },
        Kind::Keyed if info.blocks_with_block_option && has_block_option(req) => {
            match info.slot(req) {
                Ok(Some(slot)) => Route::Blocking(Place::of(slot)),
                Ok(None) => Route::AnyNode,
                Err(_) => Route::Reject(Rejection::CrossSlot),
            }
        }
        Kind::Keyed => match info.slot(req) {
            Ok(Some(slot)) => Route::Slot(Place::of(slot)),
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
        let access = Access::of_command(entry.flags.contains('r'));
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
            acl_categories: builtin_categories(entry.flags),
            family,
            arity: entry.arity,
            name,
            split: kind::split_merge(entry.name),
            stat: counted::id(entry.name),
            blocks_with_block_option: is_xread(entry.name),
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
        let mut key_specs: Vec<KeySpec> = fields
            .get(8)
            .and_then(Value::as_array)
            .map(|specs| specs.iter().filter_map(KeySpec::from_reply).collect())
            .unwrap_or_default();
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

    /// The key of a command with one key at a fixed place (GET, SET, ...), found without
    /// the walk over key specs; `Some((None, _))` if the request lacks it, `None` otherwise.
    #[inline]
    pub fn fixed_key<'r>(&self, req: &'r Request) -> Option<(Option<&'r [u8]>, Access)> {
        let (at, access) = self.fixed_key_at()?;
        Some((at.and_then(|at| req.arg(at)), access))
    }

    /// Which argument is the one key of a command with one key at a fixed
    /// place (`Some((None, _))` for a place beyond `usize`), and what the
    /// command does to it; `None` for any other command.
    #[inline]
    pub fn fixed_key_at(&self) -> Option<(Option<usize>, Access)> {
        if let [
            KeySpec {
                begin: Begin::Index(at),
                find: Find::Range { last_key: 0, .. },
                access,
            },
        ] = self.key_specs.as_slice()
        {
            return Some((usize::try_from(*at).ok(), *access));
        }
        None
    }

    /// The slot all of the request's keys hash to: `Ok(None)` if it has no
    /// keys, `Err` with where they left it if they span slots.
    pub fn slot(&self, req: &Request) -> Result<Option<Slot>, CrossSlot> {
        if let Some((key, _)) = self.fixed_key(req) {
            return Ok(key.map(Slot::for_key));
        }
        let mut slot = None;
        let mut at = 0usize;
        let mut cross = None;
        // Stops at the first key of another slot, which a split starts
        // from: no key is hashed twice.
        let _ = self.for_each_key(req, |key, _| {
            let s = Slot::for_key(key);
            match slot {
                None => slot = Some(s),
                Some(first) if first != s => {
                    cross = Some(CrossSlot { first, at, then: s });
                    return ControlFlow::Break(());
                }
                Some(_) => {}
            }
            at = at.saturating_add(1);
            ControlFlow::Continue(())
        });
        match cross {
            Some(cross) => Err(cross),
            None => Ok(slot),
        }
    }

    /// The upstream every key of `req` is routed to (`None` without a
    /// key); `Err` when they are routed to several.
    pub fn upstream_of_keys(
        &self,
        req: &Request,
        prefixes: &Prefixes,
    ) -> Result<Option<Upstream>, ()> {
        let mut upstream = None;
        let mut several = false;
        let _ = self.for_each_key(req, |key, _| {
            let this = prefixes.upstream_of(key);
            match upstream {
                Some(first) if first != this => {
                    several = true;
                    return ControlFlow::Break(());
                }
                _ => upstream = Some(this),
            }
            ControlFlow::Continue(())
        });
        if several { Err(()) } else { Ok(upstream) }
    }

    /// Calls `f` with every key of `req`, in order, and what the command
    /// does to it, until it breaks.
    pub fn for_each_key(
        &self,
        req: &Request,
        mut f: impl FnMut(&[u8], Access) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if let Some((key, access)) = self.fixed_key(req) {
            return match key {
                Some(key) => f(key, access),
                None => ControlFlow::Continue(()),
            };
        }
        let argc = req.arg_count();
        for spec in &self.key_specs {
            if let Some((first, last, step)) = spec.positions(req, argc) {
                let mut i = first;
                while i <= last {
                    if let Some(key) = req.arg(i) {
                        f(key, spec.access)?;
                    }
                    let Some(next) = i.checked_add(step) else {
                        break;
                    };
                    i = next;
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// The entry of `req`'s subcommand, when this is a container the
    /// table lists subcommands for (`client|kill` for CLIENT KILL).
    pub fn subcommand(&self, req: &Request) -> Option<&Arc<CommandInfo>> {
        req.arg(1).and_then(|sub| self.subcommands.get(sub))
    }

    /// Lower-case name used in error texts (`get`, `client|setname`).
    pub fn full_name(&self) -> &str {
        &self.name
    }
}

/// A built-in entry's categories, from its flags (`a` admin, `r` read).
fn builtin_categories(flags: &str) -> u32 {
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

mod keyspec;
mod names;
mod rejection;
pub mod strip;

#[cfg(test)]
mod tests;
