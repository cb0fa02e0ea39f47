//! What the load driver's end-to-end tests share.

use std::path::PathBuf;

/// target/<profile>/orthrus, if built; when it is not, a warning that
/// says what the test does instead (`instead`), or a failure when
/// `ORTHRUS_BENCH_REQUIRE_PROXY` is set (CI).
pub(crate) fn orthrus_binary(instead: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/orthrus
    let path = exe.parent()?.parent()?.join("orthrus");
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("ORTHRUS_BENCH_REQUIRE_PROXY").is_none(),
        "ORTHRUS_BENCH_REQUIRE_PROXY is set but {} does not exist: build it with `cargo build -p orthrus-proxy` first",
        path.display()
    );
    eprintln!(
        "\n*** WARNING: {} is missing: {instead}. Build orthrus-proxy (CI sets \
         ORTHRUS_BENCH_REQUIRE_PROXY) to test the real thing. ***\n",
        path.display()
    );
    None
}
