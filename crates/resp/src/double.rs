//! Formats a double the way Redis 7.0's `addReplyDouble` does: C's `%.17g`
//! (17 significant digits, trailing zeros dropped, exponent form below 1e-4
//! and from 1e17 up), with `inf`, `-inf` and `nan` spelled out.
//!
//! Rust's `{:.16e}` gives the same 17 correctly rounded digits as glibc;
//! only the layout is `%g`'s. No allocation: the text lives on the stack.

use std::fmt::Write;

/// `%g` precision Redis uses.
const PRECISION: i32 = 17;

/// The formatted text, at most 24 bytes (`-2.2250738585072014e-308`).
pub(crate) struct DoubleText {
    buf: [u8; 32],
    len: usize,
}

/// Formats `f` like `%.17g`.
pub(crate) fn format_double(f: f64) -> DoubleText {
    let mut out = DoubleText {
        buf: [0; 32],
        len: 0,
    };
    if f.is_nan() {
        out.push_all(b"nan");
        return out;
    }
    if f.is_infinite() {
        out.push_all(if f > 0.0 { b"inf" } else { b"-inf" });
        return out;
    }
    // d.dddddddddddddddde[-]x: 17 significant digits, exactly rounded.
    let mut sci = DoubleText {
        buf: [0; 32],
        len: 0,
    };
    if write!(sci, "{f:.16e}").is_err() {
        return out;
    }
    let text = sci.as_bytes();
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let Some(e) = text.iter().position(|&b| b == b'e') else {
        return out;
    };
    let (mantissa, exponent) = text.split_at(e);
    let exponent: i32 = std::str::from_utf8(exponent.get(1..).unwrap_or(&[]))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut digits = [b'0'; PRECISION as usize];
    for (slot, &d) in digits
        .iter_mut()
        .zip(mantissa.iter().filter(|b| b.is_ascii_digit()))
    {
        *slot = d;
    }
    if negative {
        out.push(b'-');
    }
    if (-4..PRECISION).contains(&exponent) {
        fixed(&mut out, &digits, exponent);
    } else {
        scientific(&mut out, &digits, exponent);
    }
    out
}

/// `%g`'s fixed layout: 17 significant digits around the point, trailing
/// zeros (and a bare point) dropped.
fn fixed(out: &mut DoubleText, digits: &[u8], exponent: i32) {
    let significant = trim_zeros(digits);
    if let Some(int_len) = usize::try_from(exponent).ok().map(|e| e + 1) {
        let (int, frac) = digits.split_at(int_len.min(digits.len()));
        out.push_all(int);
        let frac = frac
            .get(..significant.len().saturating_sub(int_len))
            .unwrap_or(&[]);
        if !frac.is_empty() {
            out.push(b'.');
            out.push_all(frac);
        }
    } else {
        out.push_all(b"0.");
        for _ in 0..(-exponent - 1) {
            out.push(b'0');
        }
        out.push_all(significant);
    }
}

/// `%g`'s exponent layout: `d.ddde+XX`, at least two exponent digits.
fn scientific(out: &mut DoubleText, digits: &[u8], exponent: i32) {
    let significant = trim_zeros(digits);
    if let Some((first, rest)) = significant.split_first() {
        out.push(*first);
        if !rest.is_empty() {
            out.push(b'.');
            out.push_all(rest);
        }
    }
    out.push(b'e');
    out.push(if exponent < 0 { b'-' } else { b'+' });
    let magnitude = exponent.unsigned_abs();
    if magnitude < 10 {
        out.push(b'0');
    }
    let mut buf = itoa::Buffer::new();
    out.push_all(buf.format(magnitude).as_bytes());
}

/// The digits without trailing zeros (at least one digit kept).
fn trim_zeros(digits: &[u8]) -> &[u8] {
    let keep = digits.iter().rposition(|&d| d != b'0').map_or(1, |i| i + 1);
    digits.get(..keep).unwrap_or(digits)
}

// === impl DoubleText ===

impl DoubleText {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn push_all(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.push(b);
        }
    }
}

impl Write for DoubleText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.len + s.len() > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.push_all(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
#[path = "double_tests.rs"]
mod tests;
