//! Go `fmt` pieces that `gtmpl` gets wrong or lacks.
//!
//! gtmpl 0.7's `printf` prints `%q` strings without quotes (and with Rust
//! `\u{…}` escapes), keeps `%%` as two characters and cannot format floats with
//! `%v`. Policy templates use `printf "%q"` to build JSON strings
//! (reference.md §1.2), so [`printf`] parses the format itself, handles `%%`,
//! `%q`, `%s`/`%v` the Go way and hands only the remaining numeric verbs to
//! gtmpl, one verb at a time.

use gtmpl::{FuncError, Value};

/// Go's `strconv.Quote`: double quotes, C escapes, `\xNN` for other ASCII
/// controls, `\uNNNN`/`\UNNNNNNNN` for non-printable runes. Note that `\x1b`
/// and `\a` are not valid JSON, exactly as in Go.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Approximates Go's `unicode.IsPrint`: letters, marks, numbers, punctuation,
/// symbols and the ASCII space. Controls, other spaces and the common format
/// characters (zero-width, bidi marks, BOM) are not printable.
fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F
        | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF)
}

/// Go's `%v` text for a number: integers as is, floats shortest with an
/// exponent below 1e-4 or from 1e21 (`1e+21`, `1e-05`).
pub(crate) fn go_number(n: &gtmpl_value::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        Some(f) => go_float(f),
        None => n.to_string(),
    }
}

fn go_float(f: f64) -> String {
    let a = f.abs();
    if f == 0.0 || !f.is_finite() || (1e-4..1e21).contains(&a) {
        if f.is_nan() {
            return "NaN".into();
        }
        if f.is_infinite() {
            return if f > 0.0 {
                "+Inf".into()
            } else {
                "-Inf".into()
            };
        }
        return f.to_string();
    }
    let e = format!("{f:e}");
    match e.split_once('e') {
        Some((mant, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mant}e{sign}{digits:0>2}")
        }
        None => e,
    }
}

/// Go's `%v` text for any template value (`<nil>` for nil / no value).
pub(crate) fn go_text(v: &Value) -> String {
    match v {
        Value::NoValue | Value::Nil => "<nil>".into(),
        Value::Number(n) => go_number(n),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `printf` template function with Go semantics for `%%`, `%q`, `%s` and
/// `%v`; other verbs (`%d`, `%x`, `%f`, …) are delegated to gtmpl.
pub(crate) fn printf(args: &[Value]) -> Result<Value, FuncError> {
    let Some(Value::String(format)) = args.first() else {
        return Err(FuncError::Generic(
            "printf needs a format string as its first argument".into(),
        ));
    };
    let rest = &args[1..];
    let mut out = String::new();
    let mut next = 0;
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flags = String::new();
        let verb = loop {
            match chars.next() {
                None => break None,
                Some(ch) if ch.is_ascii_alphabetic() || (ch == '%' && flags.is_empty()) => {
                    break Some(ch)
                }
                Some(ch) => flags.push(ch),
            }
        };
        let Some(verb) = verb else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        if flags.contains('*') || flags.contains('[') {
            return Err(FuncError::Generic(format!(
                "printf: `*` widths and `[n]` argument indexes are not supported (in `%{flags}{verb}`)"
            )));
        }
        // A huge width or precision would allocate (or, in gtmpl, panic) before
        // anything checks it: refuse it with the limit.
        let too_big = flags
            .split(|c: char| !c.is_ascii_digit())
            // The `0` flag is written before the width (`%010000d`): leading
            // zeros are not part of the number.
            .map(|d| d.trim_start_matches('0'))
            .filter(|d| !d.is_empty())
            .any(|d| d.len() > 5 || d.parse::<usize>().is_ok_and(|n| n > super::MAX_PAD));
        if too_big {
            return Err(FuncError::Generic(format!(
                "printf: widths and precisions are at most {} (in `%{flags}{verb}`)",
                super::MAX_PAD
            )));
        }
        let Some(arg) = rest.get(next) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        next += 1;
        out.push_str(&format_one(&flags, verb, arg)?);
    }
    for extra in &rest[next.min(rest.len())..] {
        out.push_str(&format!("%!(EXTRA {})", go_text(extra)));
    }
    Ok(Value::String(out))
}

/// Format one argument. Text verbs are formatted here (gtmpl pads `%5s` on
/// the wrong side); numeric verbs are delegated to gtmpl.
fn format_one(flags: &str, verb: char, arg: &Value) -> Result<String, FuncError> {
    let text = match (verb, arg) {
        ('q', Value::String(s)) => go_quote(s),
        ('s' | 'v', Value::String(s)) => s.clone(),
        ('s' | 'v', Value::Number(_) | Value::Bool(_) | Value::Nil | Value::NoValue) => {
            go_text(arg)
        }
        _ => return delegate(flags, verb, arg),
    };
    Ok(pad(flags, verb, text))
}

/// Apply Go's width (`%5s`, right-aligned; `%-5s` left), and for `%s` a
/// precision (`%.3s` keeps 3 characters).
fn pad(flags: &str, verb: char, text: String) -> String {
    let left = flags.contains('-');
    let (width, precision) = match flags.split_once('.') {
        Some((w, p)) => (w, p.parse::<usize>().ok()),
        None => (flags, None),
    };
    let width: usize = width
        .trim_start_matches(['-', '+', '#', ' ', '0'])
        .parse()
        .unwrap_or(0);
    let text = match precision {
        Some(p) if verb != 'q' => text.chars().take(p).collect(),
        _ => text,
    };
    let len = text.chars().count();
    if len >= width {
        return text;
    }
    let fill = " ".repeat(width - len);
    if left {
        text + &fill
    } else {
        fill + &text
    }
}

fn delegate(flags: &str, verb: char, arg: &Value) -> Result<String, FuncError> {
    let spec = Value::String(format!("%{flags}{verb}"));
    match gtmpl::funcs::printf(&[spec, arg.clone()])? {
        Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf(args: Vec<Value>) -> String {
        match printf(&args) {
            Ok(Value::String(s)) => s,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn quote_matches_go() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("line\nnext\ttab"), r#""line\nnext\ttab""#);
        assert_eq!(go_quote("\u{1b}[0m"), r#""\x1b[0m""#);
        assert_eq!(go_quote("café ✓"), "\"café ✓\"");
        assert_eq!(go_quote("nb\u{a0}sp\u{200b}"), r#""nb\u00a0sp\u200b""#);
    }

    #[test]
    fn printf_verbs() {
        let s = |x: &str| Value::from(x);
        assert_eq!(pf(vec![s("%q"), s("hi \"x\"")]), r#""hi \"x\"""#);
        assert_eq!(pf(vec![s("%s|%v|100%%"), s("a"), s("b")]), "a|b|100%");
        assert_eq!(
            pf(vec![
                s("%d-%v-%v"),
                Value::from(5i64),
                Value::from(1.5f64),
                Value::from(true)
            ]),
            "5-1.5-true"
        );
        assert_eq!(
            pf(vec![
                s("%5s|%-3s|%.2s|%6q"),
                s("ab"),
                s("c"),
                s("xyz"),
                s("q")
            ]),
            "   ab|c  |xy|   \"q\""
        );
        assert_eq!(pf(vec![s("%s %s"), s("only")]), "only %!s(MISSING)");
        assert_eq!(pf(vec![s("x"), s("extra")]), "x%!(EXTRA extra)");
        assert_eq!(pf(vec![s("%v"), Value::NoValue]), "<nil>");
        assert!(printf(&[s("%*d"), Value::from(1i64)]).is_err());
        assert!(printf(&[Value::from(1i64)]).is_err());
    }

    #[test]
    fn floats_like_go() {
        assert_eq!(go_float(4.0), "4");
        assert_eq!(go_float(0.25), "0.25");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1.5e-5), "1.5e-05");
    }
}
