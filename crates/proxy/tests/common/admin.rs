//! The admin endpoint of a test's orthrus: started on a free port, read
//! with one plain HTTP/1.1 GET per connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use orthrus_devcluster::free_port;

use super::Proxy;

/// Starts orthrus with `--metrics` on a free port (plus `extra` flags and
/// `env`) and waits until the admin endpoint accepts connections.
pub fn spawn_with_admin(
    seeds: &[SocketAddr],
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Proxy, SocketAddr) {
    let port = free_port().expect("free port");
    let admin: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let flag = admin.to_string();
    let mut args = vec!["--metrics", flag.as_str()];
    args.extend_from_slice(extra);
    let proxy = Proxy::spawn(seeds, &args, env);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(admin).is_err() {
        assert!(
            Instant::now() < deadline,
            "admin endpoint did not listen:\n{}",
            proxy.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (proxy, admin)
}

/// `GET path`: the status code and the body.
pub fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(admin).expect("connect to the admin endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: orthrus\r\n\r\n").as_bytes())
        .expect("send request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read until close");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    (status, body.to_owned())
}

/// The value of the sample `series` (name and labels exactly as orthrus
/// writes them, e.g. `orthrus_cluster_nodes{role="master",health="failed"}`)
/// in a `/metrics` text.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// Polls `GET path` until its status is `status`; panics with the last
/// answer after `timeout`.
pub fn wait_status(admin: SocketAddr, path: &str, status: u16, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let (got, body) = get(admin, path);
        if got == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} still {got} after {timeout:?}: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One sample of the exposition: `name{labels} value`.
#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// Whether this is the sample with this name and exactly these labels.
    pub fn is(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.name == name
            && self.labels.len() == labels.len()
            && labels
                .iter()
                .all(|(k, v)| self.labels.iter().any(|(sk, sv)| sk == k && sv == v))
    }
}

/// Parses one sample line of the Prometheus text format, asserting its
/// form (a float value, a valid metric name, quoted label values).
pub fn parse_sample(line: &str) -> Sample {
    let (series, value) = line.rsplit_once(' ').expect("series and value");
    let value: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("value is not a float: {line:?}"));
    let (name, labels) = match series.split_once('{') {
        None => (series, Vec::new()),
        Some((name, rest)) => {
            let inner = rest.strip_suffix('}').expect("closing brace");
            let labels = inner
                .split(',')
                .map(|pair| {
                    let (k, v) = pair.split_once('=').expect("label=value");
                    let v = v
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .expect("quoted label value");
                    (k.to_owned(), v.to_owned())
                })
                .collect();
            (name, labels)
        }
    };
    assert!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit()),
        "bad metric name: {line:?}"
    );
    Sample {
        name: name.to_owned(),
        labels,
        value,
    }
}
