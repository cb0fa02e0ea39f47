//! A shrunk sequence as a bash script of redis-cli processes, one per
//! connection of the sequence, fed the commands in the sequence's order,
//! so that a difference can be seen by running it against each target.

use std::fmt::Write as _;

use crate::sequence::{Action, Proto, Sequence, quote_args};

/// The script; `header` lines are written as comments at its top.
pub fn redis_cli_script(seq: &Sequence, header: &[String]) -> String {
    let mut out = String::from("#!/usr/bin/env bash\n");
    for line in header {
        let _ = writeln!(out, "# {line}");
    }
    out.push_str(
        "# Usage: bash repro.sh HOST PORT   (once against redis-server, once against orthrus)\n\
         h=${1:-127.0.0.1}; p=${2:-6379}\n\
         # Flushed first, as the fuzzer does.\n\
         redis-cli -h \"$h\" -p \"$p\" FLUSHALL >/dev/null; redis-cli -h \"$h\" -p \"$p\" SCRIPT FLUSH >/dev/null\n\
         redis-cli -h \"$h\" -p \"$p\" FUNCTION FLUSH >/dev/null\n",
    );
    for (i, proto) in seq.conns.iter().enumerate() {
        let resp3 = if *proto == Proto::Resp3 { " -3" } else { "" };
        let _ = writeln!(
            out,
            "exec {}> >(redis-cli{resp3} -h \"$h\" -p \"$p\" | sed -u 's/^/[conn {i}] /')",
            i + 3
        );
    }
    out.push_str("say() { printf '%s\\n' \"$2\" >&\"$1\"; sleep 0.1; }\n");
    for step in &seq.steps {
        let fd = step.conn + 3;
        for cmd in step.action.commands() {
            let line = quote_args(cmd).replace('\'', "'\\''");
            let _ = writeln!(out, "say {fd} '{line}'");
        }
        if matches!(step.action, Action::Send(_)) {
            out.push_str("# (the command above blocks; the next connection wakes it)\n");
        }
    }
    let fds: Vec<String> = (0..seq.conns.len())
        .map(|i| format!("{}>&-", i + 3))
        .collect();
    let _ = writeln!(out, "sleep 1; exec {}; wait", fds.join(" "));
    out
}
