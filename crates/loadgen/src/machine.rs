//! The machine a comparison ran on, for the report's header: figures from
//! another machine are not comparable, so every result says where it came
//! from.
//!
//! Everything is read best-effort: a field that cannot be found says
//! `unknown` rather than failing the benchmark that has already run.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread;

use serde::{Deserialize, Serialize};

/// What the header and `results.json` say about the machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// The host name.
    pub hostname: String,
    /// CPUs this process may run on (`nproc`).
    pub cores: usize,
    /// The first `model name` in `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `uname -r`.
    pub kernel: String,
    /// `PRETTY_NAME` from `/etc/os-release`.
    pub os: String,
    /// `redis-server --version`'s `v=`.
    pub redis_version: String,
    /// `orthrus --version`, or `not used` when no orthrus target ran.
    pub orthrus_version: String,
    /// `git rev-parse --short HEAD` of the work tree the binaries were
    /// built in (their target directory lives inside it).
    pub git_commit: String,
}

/// What stands in for a field that could not be read.
pub const UNKNOWN: &str = "unknown";

// === impl Machine ===

impl Machine {
    /// Reads the machine. `orthrus` is the proxy binary when one is used.
    pub fn probe(orthrus: Option<&Path>) -> Machine {
        Machine {
            hostname: hostname(),
            cores: thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpu_model(&fs::read_to_string("/proc/cpuinfo").unwrap_or_default()),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            os: os_name(&fs::read_to_string("/etc/os-release").unwrap_or_default()),
            redis_version: orthrus_devcluster::RedisBin::locate()
                .and_then(|bin| bin.version())
                .unwrap_or_else(|_| UNKNOWN.to_owned()),
            orthrus_version: orthrus.map_or_else(|| "not used".to_owned(), orthrus_version),
            git_commit: git_commit(orthrus),
        }
    }

    /// One line: `2 cores, <CPU>, Linux <kernel> (<OS>)`.
    pub fn summary(&self) -> String {
        format!(
            "{} cores, {}, Linux {} ({})",
            self.cores, self.cpu_model, self.kernel, self.os
        )
    }
}

/// The host name, from the kernel.
pub fn hostname() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
}

/// `orthrus --version` prints `orthrus 0.1.0`; the header says `orthrus`
/// already.
fn orthrus_version(path: &Path) -> String {
    let line = command_line(&path.to_string_lossy(), &["--version"]);
    line.strip_prefix("orthrus ")
        .map_or(line.clone(), str::to_owned)
}

/// The commit checked out where the binaries were built: git runs in the
/// orthrus binary's directory (or this one's), not in whatever directory
/// the comparison was started from.
fn git_commit(orthrus: Option<&Path>) -> String {
    let exe = std::env::current_exe().ok();
    let dir = orthrus
        .and_then(Path::parent)
        .or_else(|| exe.as_deref().and_then(Path::parent))
        .map_or_else(|| ".".to_owned(), |d| d.to_string_lossy().into_owned());
    command_line("git", &["-C", &dir, "rev-parse", "--short", "HEAD"])
}

/// The first line `program args` prints, or [`UNKNOWN`].
fn command_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(|l| l.trim().to_owned())
        })
        .filter(|line| !line.is_empty())
        .unwrap_or_else(|| UNKNOWN.to_owned())
}

fn read_trimmed(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| UNKNOWN.to_owned())
}

fn cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| UNKNOWN.to_owned())
}

fn os_name(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|line| line.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| UNKNOWN.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpuinfo_and_os_release() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(cpu_model(cpuinfo), "Intel(R) Xeon(R) CPU @ 2.20GHz");
        assert_eq!(cpu_model("processor : 0\n"), UNKNOWN);
        let osr = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(os_name(osr), "Debian GNU/Linux 12 (bookworm)");
    }

    #[test]
    fn probe_reads_this_machine() {
        let m = Machine::probe(None);
        assert!(m.cores >= 1);
        assert_ne!(m.kernel, UNKNOWN);
        assert_eq!(m.orthrus_version, "not used");
        assert!(m.summary().contains("cores"));
    }

    #[test]
    fn git_commit_is_read_from_the_build_tree() {
        // Test binaries live in target/<profile>/deps inside the work tree.
        let commit = git_commit(None);
        if Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../.git")
            .exists()
        {
            assert!(
                commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
                "{commit}"
            );
        }
    }

    #[test]
    fn missing_program_is_unknown() {
        assert_eq!(
            command_line("/nonexistent/orthrus", &["--version"]),
            UNKNOWN
        );
    }
}
