//! Redis's glob-style pattern matching (`stringmatchlen` in util.c), on bytes: `*`,
//! `?`, `[abc]`, `[^a-z]`, `\x` escapes. Used by `SCAN MATCH` and `CONFIG GET`.

/// Whether `s` matches `pat`; `nocase` folds ASCII case.
pub fn matches(pat: &[u8], s: &[u8], nocase: bool) -> bool {
    m(pat, s, nocase, 0)
}

fn eq(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

fn m(mut p: &[u8], mut s: &[u8], nocase: bool, depth: u32) -> bool {
    // Redis bounds the recursion of `*` the same way (a pattern of many stars
    // against a long string must not blow the stack or take forever).
    if depth > 1000 {
        return false;
    }
    while let Some(&c) = p.first() {
        match c {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                for i in 0..=s.len() {
                    if m(&p[1..], &s[i..], nocase, depth + 1) {
                        return true;
                    }
                }
                return false;
            }
            b'?' => {
                if s.is_empty() {
                    return false;
                }
                s = &s[1..];
            }
            b'[' => {
                let Some((&ch, rest)) = s.split_first() else {
                    return false;
                };
                let (ok, used) = class(&p[1..], ch, nocase);
                if !ok {
                    return false;
                }
                p = &p[used..];
                s = rest;
            }
            b'\\' if p.len() >= 2 => {
                p = &p[1..];
                if s.first().is_none_or(|&x| !eq(p[0], x, nocase)) {
                    return false;
                }
                s = &s[1..];
            }
            _ => {
                if s.first().is_none_or(|&x| !eq(c, x, nocase)) {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = &p[1..];
        if s.is_empty() {
            return p.iter().all(|&c| c == b'*');
        }
    }
    s.is_empty()
}

/// Matches `ch` against the class whose body starts at `p` (after `[`); returns
/// the match and the offset of the closing `]` from the `[` (or the pattern end).
fn class(p: &[u8], ch: u8, nocase: bool) -> (bool, usize) {
    let mut i = 0;
    let not = p.first() == Some(&b'^');
    if not {
        i += 1;
    }
    let mut hit = false;
    loop {
        match p.get(i) {
            None => {
                i -= 1; // Redis: an unterminated class ends the pattern
                break;
            }
            Some(b']') => break,
            Some(b'\\') if i + 1 < p.len() => {
                i += 1;
                hit |= eq(p[i], ch, nocase);
            }
            Some(&lo) if p.get(i + 1) == Some(&b'-') && i + 2 < p.len() => {
                let (mut a, mut b) = (lo, p[i + 2]);
                if a > b {
                    std::mem::swap(&mut a, &mut b);
                }
                let c = if nocase { ch.to_ascii_lowercase() } else { ch };
                let (a2, b2) = if nocase {
                    (a.to_ascii_lowercase(), b.to_ascii_lowercase())
                } else {
                    (a, b)
                };
                hit |= c >= a2 && c <= b2;
                i += 2;
            }
            Some(&x) => hit |= eq(x, ch, nocase),
        }
        i += 1;
    }
    (hit != not, i + 1)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn like_redis() {
        let t = |p: &str, s: &str| matches(p.as_bytes(), s.as_bytes(), false);
        assert!(t("*", ""));
        assert!(t("*", "anything"));
        assert!(t("key:*", "key:1"));
        assert!(!t("key:*", "kex:1"));
        assert!(t("h?llo", "hello"));
        assert!(!t("h?llo", "hllo"));
        assert!(t("h[ae]llo", "hallo"));
        assert!(!t("h[ae]llo", "hillo"));
        assert!(t("h[^e]llo", "hallo"));
        assert!(!t("h[^e]llo", "hello"));
        assert!(t("h[a-b]llo", "hbllo"));
        assert!(t("h[b-a]llo", "hallo"));
        assert!(t("a\\*b", "a*b"));
        assert!(!t("a\\*b", "axb"));
        assert!(t("*a*b*", "xxaxxbxx"));
        assert!(!t("*a*b", "xxaxxbxx"));
        assert!(t("save", "save"));
        assert!(!t("save", "saves"));
        assert!(matches(b"SAVE", b"save", true));
        let stars = "*".repeat(50) + "x";
        assert!(!t(&stars, &"a".repeat(60)));
    }
}
