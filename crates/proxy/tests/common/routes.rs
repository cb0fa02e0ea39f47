//! Orthrus in front of several upstreams: a configuration file that lives
//! as long as the test, and a start that waits for every upstream.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::Proxy;

/// A configuration file, removed on drop.
pub struct TempFile(pub PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// [`Proxy::start`], then waits until every upstream's topology is known
/// (`Proxy::start` waits for the default one's: a key of another upstream
/// sent before its first discovery gets `-CLUSTERDOWN ... not known yet`).
pub fn start_routed(seeds: &[SocketAddr], extra: &[&str]) -> Proxy {
    let proxy = Proxy::start(seeds, extra);
    orthrus_devcluster::wait_until(Duration::from_secs(20), "every upstream known", || {
        let info = proxy
            .raw_command(&["INFO", "upstreams"])
            .map_err(|e| e.to_string())?;
        let info = String::from_utf8_lossy(&info);
        let lines: Vec<&str> = info
            .lines()
            .filter(|l| l.starts_with("upstream_"))
            .collect();
        if !lines.is_empty() && lines.iter().all(|l| l.contains("slots_covered=16384")) {
            Ok(())
        } else {
            Err(info.into_owned())
        }
    })
    .unwrap();
    proxy
}

pub fn config_file(name: &str, text: &str) -> TempFile {
    let path =
        std::env::temp_dir().join(format!("orthrus-routes-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, text).expect("write config");
    TempFile(path)
}
