//! Redis's glob (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a-z]`, and `\`
//! to take the next byte literally. Case-sensitive, byte-wise.

/// Whether `text` matches `pattern`. One `*` is backtracked at a time, so
/// the work is at most `pattern.len() * text.len()` steps whatever the
/// input.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Where to resume after the last `*`: (pattern after it, text offset).
    let mut star: Option<(usize, usize)> = None;
    while let Some(&ch) = text.get(t) {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, ch),
            Some(b'\\') if p + 1 < pattern.len() => {
                (pattern.get(p + 1) == Some(&ch)).then_some(p + 2)
            }
            Some(&c) => (c == ch).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((after, from))) => {
                p = after;
                t = from + 1;
                star = Some((after, from + 1));
            }
            (None, None) => return false,
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

/// A `[...]` class starting at `at` against `c`: where the pattern goes on
/// if `c` is in it. An unclosed class runs to the end of the pattern, as
/// in Redis.
fn class(pattern: &[u8], at: usize, c: u8) -> Option<usize> {
    let mut i = at + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while let Some(&b) = pattern.get(i) {
        match b {
            b']' => break,
            b'\\' if i + 1 < pattern.len() => {
                hit |= pattern.get(i + 1) == Some(&c);
                i += 2;
            }
            _ if pattern.get(i + 1) == Some(&b'-') && i + 2 < pattern.len() => {
                let end = pattern.get(i + 2).copied().unwrap_or(b);
                let (lo, hi) = (b.min(end), b.max(end));
                hit |= (lo..=hi).contains(&c);
                i += 3;
            }
            _ => {
                hit |= b == c;
                i += 1;
            }
        }
    }
    (hit != negate).then_some((i + 1).min(pattern.len()))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_as_redis() {
        let yes = [
            ("*", ""),
            ("*", "anything"),
            ("app:*", "app:1"),
            ("app:*", "app:"),
            ("a?c", "abc"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-c]llo", "hbllo"),
            ("a\\*b", "a*b"),
            ("*:*:end", "x:y:z:end"),
            ("user:*:name", "user:42:name"),
        ];
        for (p, t) in yes {
            assert!(matches(p.as_bytes(), t.as_bytes()), "{p} ~ {t}");
        }
        let no = [
            ("app:*", "ap:1"),
            ("app:*", "bob:app:1"),
            ("a?c", "ac"),
            ("h[^e]llo", "hello"),
            ("h[a-c]llo", "hdllo"),
            ("a\\*b", "axb"),
            ("alice:*", "alice"),
            ("", "x"),
        ];
        for (p, t) in no {
            assert!(!matches(p.as_bytes(), t.as_bytes()), "{p} !~ {t}");
        }
    }

    #[test]
    fn many_stars_stay_linear_enough() {
        let pattern = "*a".repeat(50) + "b";
        let text = "a".repeat(5000);
        assert!(!matches(pattern.as_bytes(), text.as_bytes()));
    }
}
