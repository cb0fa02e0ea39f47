//! `orthrus-difffuzz`: random command sequences against one redis-server
//! and through orthrus, for a bounded time; every difference shrunk and
//! printed as a redis-cli script. The last line is
//! `N commands, M differences`; the exit code is 1 when any remain.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use orthrus_difffuzz::generate::{self, Shape};
use orthrus_difffuzz::script::redis_cli_script;
use orthrus_difffuzz::shrink::shrink;
use orthrus_difffuzz::world::World;
use orthrus_difffuzz::{Difference, Sequence, Targets, check, targets, users};

/// Candidates the shrinker may try for one difference.
const SHRINK_BUDGET: usize = 400;
/// Distinct differences shrunk in one run; later ones are only counted.
const MAX_SHRUNK: usize = 20;

/// Differential fuzzing: random command sequences run against one
/// redis-server and through orthrus, replies compared.
#[derive(Parser, Debug)]
#[command(name = "orthrus-difffuzz", version)]
struct Cli {
    /// How long to generate new sequences (shrinking may take longer).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The run's seed; sequence i of seed S is always the same.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A redis-server to compare with (not a cluster); with --proxy.
    #[arg(long, requires = "proxy")]
    single: Option<String>,
    /// orthrus, in front of a cluster; with --single.
    #[arg(long, requires = "single")]
    proxy: Option<String>,
    /// Run only sequence number N of the seed (to reproduce one).
    #[arg(long)]
    only: Option<u64>,
    /// Run the sequence in this file (its text form) once and report.
    #[arg(long)]
    replay: Option<std::path::PathBuf>,
    /// Print the text form of every sequence run.
    #[arg(long)]
    verbose: bool,
    /// The users mode: N users (at least 2; `root` may do everything, the
    /// others get random ACL rules from the seed), a route `c:` to a
    /// standalone upstream (its prefix removed or not, from the seed) and
    /// a route `m:` mirrored to another; sequences log in as users, and
    /// the data both sides end with is compared too. Starts its own
    /// targets.
    #[arg(long, conflicts_with_all = ["single", "proxy"])]
    users: Option<usize>,
    /// Databases to use (default 1): the cluster is started with
    /// `cluster-databases N` (Valkey 9; REDIS_SERVER names its
    /// valkey-server) and sequences SELECT among them and MOVE and COPY
    /// keys between them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    databases: u32,
    /// The orthrus it starts has its reply cache on (`[cache] enabled`):
    /// answers served from memory are compared too; the cache's counters
    /// are printed at the end.
    #[arg(long)]
    cache: bool,
}

/// Runs one sequence on both sides: a difference, or none.
type Check<'a> = dyn Fn(&Sequence) -> Result<Option<Difference>, String> + 'a;

fn main() -> ExitCode {
    match fuzz(Cli::parse()) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("orthrus-difffuzz: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn resolve(s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .with_context(|| format!("resolving {s:?} (expected HOST:PORT)"))?
        .next()
        .with_context(|| format!("{s:?} resolves to no address"))
}

fn fuzz(cli: Cli) -> Result<usize> {
    use std::sync::atomic::Ordering;
    orthrus_difffuzz::fill::DATABASES.store(cli.databases, Ordering::Relaxed);
    targets::CACHE.store(cli.cache, Ordering::Relaxed);
    if let Some(n) = cli.users {
        let world = World::draw(cli.seed, n);
        eprintln!(
            "users mode: starting a redis-server with {} users, a 3-master cluster, \
             upstreams b and mir, and orthrus",
            world.users.len()
        );
        eprint!("{}", world.describe());
        let started = users::start(world.clone())?;
        let t = &started.targets;
        eprintln!(
            "single {}, orthrus {}, seed {}, {} s",
            t.single, t.proxy, cli.seed, cli.seconds
        );
        let check = |seq: &Sequence| users::check(t, seq);
        let make = |index| {
            let seq = generate::sequence_in(cli.seed, index, Shape::default(), Some(&world));
            for_cache(&cli, seq)
        };
        let found = drive(&cli, &check, &make)?;
        let password = orthrus_difffuzz::world::DEFAULT_PASSWORD;
        report_cache(&cli, t.proxy, Some(password));
        return Ok(found);
    }
    // Processes this run started, stopped when it returns.
    let started = match (&cli.single, &cli.proxy) {
        (Some(_), Some(_)) => None,
        _ => {
            eprintln!("starting a redis-server, a 3-master cluster and orthrus");
            Some(targets::start(cli.databases)?)
        }
    };
    let targets = match (&cli.single, &cli.proxy, &started) {
        (Some(s), Some(p), _) => Targets {
            single: resolve(s)?,
            proxy: resolve(p)?,
        },
        (_, _, Some(started)) => started.targets,
        _ => anyhow::bail!("no targets"),
    };
    eprintln!(
        "single {}, orthrus {}, seed {}, {} s",
        targets.single, targets.proxy, cli.seed, cli.seconds
    );
    let check = |seq: &Sequence| check(targets, seq);
    let make = |index| for_cache(&cli, generate::sequence(cli.seed, index, Shape::default()));
    let found = drive(&cli, &check, &make)?;
    report_cache(&cli, targets.proxy, None);
    Ok(found)
}

/// `seq` as run: with `--cache`, its cached reads sent twice.
fn for_cache(cli: &Cli, seq: Sequence) -> Sequence {
    if cli.cache {
        seq.with_reads_repeated()
    } else {
        seq
    }
}

/// With `--cache`, prints the reply cache's counters of orthrus at `proxy`.
fn report_cache(cli: &Cli, proxy: SocketAddr, password: Option<&str>) {
    if cli.cache {
        if let Some(line) = targets::cache_line(proxy, password) {
            println!("{line}");
        }
    }
}

/// The run: sequences made by `make` checked by `check` for the run's
/// time (or the one of `--only`, or the `--replay` file), a summary.
fn drive(cli: &Cli, check: &Check<'_>, make: &dyn Fn(u64) -> Sequence) -> Result<usize> {
    if let Some(path) = &cli.replay {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let seq = Sequence::parse(&text).map_err(anyhow::Error::msg)?;
        let diff = check(&seq).map_err(anyhow::Error::msg)?;
        if let Some(d) = &diff {
            println!("{d}");
        }
        println!(
            "{} commands, {} differences",
            seq.command_count(),
            usize::from(diff.is_some())
        );
        return Ok(usize::from(diff.is_some()));
    }
    let begun = Instant::now();
    let deadline = begun + Duration::from_secs(cli.seconds);
    let mut last_report = begun;
    let (mut commands, mut sequences) = (0usize, 0u64);
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    let mut index = cli.only.unwrap_or(0);
    while Instant::now() < deadline || (cli.only.is_some() && sequences == 0) {
        let seq = make(index);
        if cli.verbose {
            println!("# sequence {index}\n{}", seq.to_text());
        }
        commands += seq.command_count();
        sequences += 1;
        if let Some(diff) = check(&seq).map_err(anyhow::Error::msg)? {
            examine(check, cli, index, &seq, diff, &mut found)?;
        }
        if cli.only.is_some() {
            break;
        }
        index += 1;
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "{:.0} s: {sequences} sequences, {commands} commands, {} differences",
                begun.elapsed().as_secs_f64(),
                found.len()
            );
        }
    }
    for (sig, n) in &found {
        println!("difference {sig}: {n} sequences");
    }
    println!(
        "seed {}: {sequences} sequences in {:.1} s",
        cli.seed,
        begun.elapsed().as_secs_f64()
    );
    println!("{commands} commands, {} differences", found.len());
    Ok(found.len())
}

/// Confirms a difference by running the sequence again, then (when it is a
/// new one) shrinks it and prints the script.
fn examine(
    check: &Check<'_>,
    cli: &Cli,
    index: u64,
    seq: &Sequence,
    diff: Difference,
    found: &mut BTreeMap<String, usize>,
) -> Result<()> {
    let Some(again) = check(seq).map_err(anyhow::Error::msg)? else {
        eprintln!("sequence {index}: a difference that did not happen again: {diff}");
        return Ok(());
    };
    let sig = again.signature();
    let seen = found.entry(sig.clone()).or_insert(0);
    *seen += 1;
    if *seen > 1 || found.len() > MAX_SHRUNK {
        return Ok(());
    }
    eprintln!("sequence {index}: {again}\nshrinking...");
    let mut fails = |candidate: &Sequence| match check(candidate) {
        Ok(Some(d)) => d.signature() == sig,
        _ => false,
    };
    let mut small = shrink(seq, SHRINK_BUDGET, &mut fails);
    let last = match check(&small).map_err(anyhow::Error::msg)? {
        Some(last) => last,
        None => {
            eprintln!("sequence {index}: the shrunk sequence no longer differs; printing it whole");
            small = seq.clone();
            again
        }
    };
    let mut users = cli
        .users
        .map(|n| format!(" --users {n}"))
        .unwrap_or_default();
    if cli.databases > 1 {
        users.push_str(&format!(" --databases {}", cli.databases));
    }
    if cli.cache {
        users.push_str(" --cache");
    }
    let mut header = vec![
        format!("orthrus-difffuzz{users} --seed {} --only {index}", cli.seed),
        format!(
            "{} commands, shrunk from {}",
            small.command_count(),
            seq.command_count()
        ),
    ];
    header.extend(last.to_string().lines().map(str::to_string));
    println!("=== difference {sig}");
    println!("{}", redis_cli_script(&small, &header));
    println!(
        "--- as a sequence (for a regression test)\n{}",
        small.to_text()
    );
    Ok(())
}
