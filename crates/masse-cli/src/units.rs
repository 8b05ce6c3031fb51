//! Parsing and printing of sizes and counts given on the command line.

/// Parse a byte size: `4096`, `64K`, `64KiB`, `64kb`, `256M`, `1G`, `1GiB`, `1.5G`, `2T`.
/// K, M, G and T are binary (powers of 1024), with or without `B`/`iB`;
/// fractional sizes are rounded to the nearest byte.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {unit:?} (use e.g. 4096, 64K, 256MiB, 1.5G)"
            ))
        }
    };
    if num.is_empty() {
        return Err(format!(
            "invalid size {s:?}: no number (use e.g. 4096, 64K, 256MiB, 1.5G)"
        ));
    }
    if !num.contains('.') {
        let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
        return n
            .checked_mul(mult)
            .ok_or_else(|| format!("size {s:?} is too large"));
    }
    let f: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let bytes = (f * mult as f64).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// Parse a count: `1000000`, `1_000_000`, `1,000,000`, `1e6`, `2.5e6`, or with a
/// decimal suffix `k`/`m`/`g` (thousand, million, billion): `200k`, `10M`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t: String = s.trim().chars().filter(|&c| c != '_' && c != ',').collect();
    let lower = t.to_ascii_lowercase();
    let (body, mult) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1e3),
        Some('m') => (&lower[..lower.len() - 1], 1e6),
        Some('g') | Some('b') => (&lower[..lower.len() - 1], 1e9),
        _ => (&lower[..], 1.0),
    };
    if body.is_empty() {
        return Err(format!("invalid count {s:?} (use e.g. 1000000, 1e6, 200k)"));
    }
    if mult == 1.0 && body.chars().all(|c| c.is_ascii_digit()) {
        return body
            .parse()
            .map_err(|_| format!("count {s:?} is too large"));
    }
    let f: f64 = body
        .parse()
        .map_err(|_| format!("invalid count {s:?} (use e.g. 1000000, 1e6, 200k)"))?;
    let v = f * mult;
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 {
        return Err(format!("invalid count {s:?}"));
    }
    if v.fract() != 0.0 {
        return Err(format!("count {s:?} is not a whole number"));
    }
    Ok(v as u64)
}

/// A byte count for humans: `512 B`, `64 KiB`, `1.5 GiB`.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut i = 0;
    let mut v = b as f64;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v.fract() == 0.0 || v >= 100.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("64kb"), Ok(65536));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size(" 8 MiB "), Ok(8 << 20));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("1.2.3K").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("1000000"), Ok(1_000_000));
        assert_eq!(parse_count("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_count("1,000,000"), Ok(1_000_000));
        assert_eq!(parse_count("1e6"), Ok(1_000_000));
        assert_eq!(parse_count("1e7"), Ok(10_000_000));
        assert_eq!(parse_count("2.5e6"), Ok(2_500_000));
        assert_eq!(parse_count("200k"), Ok(200_000));
        assert_eq!(parse_count("10M"), Ok(10_000_000));
        assert!(parse_count("1.5").is_err());
        assert!(parse_count("abc").is_err());
        assert!(parse_count("-1").is_err());
        assert!(parse_count("k").is_err());
    }

    #[test]
    fn bytes_for_humans() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(65536), "64 KiB");
        assert_eq!(fmt_bytes(3 << 29), "1.5 GiB");
        assert_eq!(fmt_bytes(300 << 20), "300 MiB");
    }
}
