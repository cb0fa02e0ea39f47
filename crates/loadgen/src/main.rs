//! `orthrus-bench`: see the library's documentation for the layout.

fn main() -> std::process::ExitCode {
    orthrus_loadgen::cli::main()
}
