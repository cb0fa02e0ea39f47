//! Strict decimal parsing, shared by request and reply headers so both
//! sides agree on what a number is.

/// Parses a signed decimal the way Redis's `string2ll` does: an optional
/// `-`, then digits with no leading zero (except `0` itself), no `+`, no
/// spaces, no overflow. `-0` is refused, as in Redis.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some(_) => (false, s),
        None => return None,
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    // Accumulate as a negative number so that i64::MIN fits.
    let mut acc: i64 = 0;
    for &b in digits {
        let d = match b {
            b'0'..=b'9' => i64::from(b - b'0'),
            _ => return None,
        };
        acc = acc.checked_mul(10)?.checked_sub(d)?;
    }
    if negative {
        Some(acc)
    } else {
        acc.checked_neg()
    }
}

/// Parses a non-negative length/count (the hot path of both parsers).
/// `None` for anything `parse_i64` refuses and for negatives, which callers
/// that care about `-1` check for first.
pub(crate) fn parse_len(s: &[u8]) -> Option<u64> {
    match s {
        [b'0'] => return Some(0),
        [b'1'..=b'9', ..] if s.len() <= 19 => {}
        _ => return None,
    }
    let mut acc: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        // 19 digits cannot overflow a u64.
        acc = acc * 10 + u64::from(b - b'0');
    }
    Some(acc)
}

/// A length of one to nine digits with no leading zero (or `0`) followed
/// by CRLF at the start of `line`: the number and the bytes it took, CRLF
/// included. `None` for anything else, longer numbers too: the one-pass
/// readers leave every other case to the general ones.
#[inline]
pub(crate) fn short_len(line: &[u8]) -> Option<(usize, usize)> {
    // One and two digits, what nearly every request's lengths are, by
    // pattern; the loop for the rest.
    match *line {
        [d @ b'0'..=b'9', b'\r', b'\n', ..] => return Some((usize::from(d - b'0'), 3)),
        [t @ b'1'..=b'9', d @ b'0'..=b'9', b'\r', b'\n', ..] => {
            return Some((usize::from(t - b'0') * 10 + usize::from(d - b'0'), 4));
        }
        _ => {}
    }
    let mut n = 0;
    for (i, &b) in line.iter().enumerate().take(10) {
        match b {
            b'0'..=b'9' => n = n * 10 + usize::from(b - b'0'),
            b'\r' => {
                let well_formed = i > 0
                    && (i == 1 || line.first() != Some(&b'0'))
                    && line.get(i + 1) == Some(&b'\n');
                return well_formed.then_some((n, i + 2));
            }
            _ => return None,
        }
    }
    None
}

/// A RESP3 double, as Rust reads it (`inf`, `-inf`, `nan` included).
pub(crate) fn parse_double(s: &[u8]) -> Option<f64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_follows_string2ll() {
        for (s, v) in [
            (&b"0"[..], Some(0)),
            (b"1", Some(1)),
            (b"-1", Some(-1)),
            (b"123456", Some(123_456)),
            (b"9223372036854775807", Some(i64::MAX)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"-9223372036854775809", None),
            (b"", None),
            (b"-", None),
            (b"-0", None),
            (b"01", None),
            (b"+1", None),
            (b" 1", None),
            (b"1 ", None),
            (b"1a", None),
            (b"99999999999999999999999", None),
        ] {
            assert_eq!(parse_i64(s), v, "{:?}", s.escape_ascii().to_string());
        }
    }

    #[test]
    fn parse_len_refuses_what_string2ll_refuses() {
        assert_eq!(parse_len(b"0"), Some(0));
        assert_eq!(parse_len(b"42"), Some(42));
        assert_eq!(
            parse_len(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(parse_len(b"10000000000000000000"), None);
        assert_eq!(parse_len(b"00"), None);
        assert_eq!(parse_len(b"-1"), None);
        assert_eq!(parse_len(b""), None);
        assert_eq!(parse_len(b"1x"), None);
    }

    #[test]
    fn short_len_takes_only_plain_short_lengths() {
        assert_eq!(short_len(b"0\r\n"), Some((0, 3)));
        assert_eq!(short_len(b"42\r\nxx"), Some((42, 4)));
        assert_eq!(short_len(b"7\r\n"), Some((7, 3)));
        assert_eq!(short_len(b"10\r\n"), Some((10, 4)));
        assert_eq!(short_len(b"99\r\n$"), Some((99, 4)));
        assert_eq!(short_len(b"123\r\n"), Some((123, 5)));
        assert_eq!(short_len(b"999999999\r\n"), Some((999_999_999, 11)));
        for refused in [
            &b"1234567890\r\n"[..],
            b"01\r\n",
            b"00\r\n",
            b"0\r",
            b"12\r",
            b"1\n\r",
            b"-1\r\n",
            b"\r\n",
            b"1\r",
            b"1\rx",
            b"1x\r\n",
            b"12",
        ] {
            assert_eq!(short_len(refused), None, "{}", refused.escape_ascii());
        }
    }

    #[test]
    fn doubles() {
        assert_eq!(parse_double(b"1.5"), Some(1.5));
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
        assert!(parse_double(b"nan").is_some_and(f64::is_nan));
        assert_eq!(parse_double(b"x"), None);
        assert_eq!(parse_double(b"\xff"), None);
    }
}
