//! The grammar of [`crate::spec::COMMANDS`]: parsing a spec into a tree
//! once, and expanding a tree into arguments with a [`Fill`] that supplies
//! the placeholders.

use crate::rng::Rng;

/// A part of a spec.
#[derive(Debug)]
pub enum Node {
    Word(String),
    Optional(Vec<Node>),
    Choice(Vec<Vec<Node>>),
    Repeat(Vec<Node>),
}

/// A parsed entry of the command table.
#[derive(Debug)]
pub struct Entry {
    pub weight: u32,
    /// Never queued inside MULTI.
    pub no_multi: bool,
    pub body: Vec<Node>,
}

/// Supplies a placeholder's arguments; `None` means the word is literal.
pub trait Fill {
    fn fill(&mut self, word: &str, rng: &mut Rng) -> Option<Vec<Vec<u8>>>;
}

/// Parses one spec; the table is fixed, so a malformed one is a bug that
/// the unit tests catch.
pub fn parse(weight: u32, spec: &str) -> Result<Entry, String> {
    let (no_multi, spec) = match spec.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let tokens = tokenize(spec)?;
    let mut at = 0;
    let body = parse_seq(&tokens, &mut at)?;
    if at != tokens.len() {
        return Err(format!("unbalanced {spec:?}"));
    }
    Ok(Entry {
        weight,
        no_multi,
        body,
    })
}

/// Expands `nodes` into `out`.
pub fn expand(nodes: &[Node], rng: &mut Rng, fill: &mut dyn Fill, out: &mut Vec<Vec<u8>>) {
    for node in nodes {
        match node {
            Node::Word(w) => match fill.fill(w, rng) {
                Some(args) => out.extend(args),
                None => out.push(w.as_bytes().to_vec()),
            },
            Node::Optional(inner) => {
                if rng.chance(50) {
                    expand(inner, rng, fill, out);
                }
            }
            Node::Choice(alts) => {
                let alt = rng.pick(alts);
                expand(alt, rng, fill, out);
            }
            Node::Repeat(inner) => {
                for _ in 0..rng.range(1, 3) {
                    expand(inner, rng, fill, out);
                }
            }
        }
    }
}

fn tokenize(spec: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                for c in chars.by_ref() {
                    if c == '"' {
                        break;
                    }
                    word.push(c);
                }
            }
            ' ' | '[' | ']' | '(' | ')' | '{' | '}' | '|' => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                if c != ' ' {
                    out.push(c.to_string());
                }
            }
            _ => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    if out.is_empty() {
        return Err("empty spec".into());
    }
    Ok(out)
}

fn parse_seq(tokens: &[String], at: &mut usize) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    while let Some(t) = tokens.get(*at) {
        match t.as_str() {
            "]" | ")" | "}" | "|" => break,
            open @ ("[" | "{") => {
                *at += 1;
                let inner = parse_seq(tokens, at)?;
                let close = if open == "[" { "]" } else { "}" };
                expect(tokens, at, close)?;
                nodes.push(if open == "[" {
                    Node::Optional(inner)
                } else {
                    Node::Repeat(inner)
                });
            }
            "(" => {
                *at += 1;
                let mut alts = vec![parse_seq(tokens, at)?];
                while tokens.get(*at).map(String::as_str) == Some("|") {
                    *at += 1;
                    alts.push(parse_seq(tokens, at)?);
                }
                expect(tokens, at, ")")?;
                nodes.push(Node::Choice(alts));
            }
            _ => {
                nodes.push(Node::Word(t.clone()));
                *at += 1;
            }
        }
    }
    Ok(nodes)
}

fn expect(tokens: &[String], at: &mut usize, close: &str) -> Result<(), String> {
    if tokens.get(*at).map(String::as_str) != Some(close) {
        return Err(format!("expected {close} at token {at}"));
    }
    *at += 1;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_of_the_table_parses() {
        for (w, spec) in crate::spec::COMMANDS {
            parse(*w, spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        }
    }

    #[test]
    fn a_quoted_word_is_one_argument() {
        let e = parse(1, "EVAL \"return 1\" 0").unwrap();
        assert!(matches!(&e.body[1], Node::Word(w) if w == "return 1"));
    }
}
