//! Rates as people write them: `1G`, `100Mbit`, `400Gb/s` (bits per second), `12.5MB` or
//! `12.5MB/s` (bytes per second), a plain number in bits per second. Network rates are bits
//! per second; a `B` says bytes.

/// A rate in bits per second from its written form; the error names the forms that work.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || {
        format!(
            "{text:?} is not a rate; write bits per second as 1G, 100Mbit, 400Gb/s or 1000000000, or bytes per second as 12.5MB"
        )
    };
    let v: f64 = num.replace('_', "").parse().map_err(|_| bad())?;
    let unit = unit.trim();
    let unit = unit.strip_suffix("/s").unwrap_or(unit);
    let unit = unit.strip_suffix("ps").unwrap_or(unit);
    let (prefix, bytes) = match unit {
        u if u.ends_with("bit") => (&u[..u.len() - 3], false),
        u if u.ends_with('b') => (&u[..u.len() - 1], false),
        u if u.ends_with('B') => (&u[..u.len() - 1], true),
        u => (u, false),
    };
    let scale = match prefix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bits = v * scale * if bytes { 8.0 } else { 1.0 };
    if bits.is_finite() && bits > 0.0 {
        Ok(bits)
    } else {
        Err(format!(
            "{text:?}: a rate must be above 0 (e.g. 1G for 1 Gb/s)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_rate;

    #[test]
    fn bits_by_default_bytes_with_a_capital_b() {
        for (text, bits) in [
            ("1000", 1e3),
            ("1G", 1e9),
            ("100M", 100e6),
            ("100Mbit", 100e6),
            ("400Gb/s", 400e9),
            ("400Gbps", 400e9),
            ("12.5MB", 100e6),
            ("12.5MB/s", 100e6),
            ("1GiB", 8.0 * 1024.0 * 1024.0 * 1024.0),
            ("10k", 1e4),
            ("1_000_000", 1e6),
        ] {
            assert_eq!(parse_rate(text), Ok(bits), "{text}");
        }
    }

    #[test]
    fn nonsense_and_zero_are_refused_with_the_forms_that_work() {
        for text in ["", "fast", "10 furlongs", "1X", "G"] {
            let e = parse_rate(text).unwrap_err();
            assert!(e.contains("100Mbit"), "{text}: {e}");
        }
        assert!(parse_rate("0").unwrap_err().contains("above 0"));
    }
}
