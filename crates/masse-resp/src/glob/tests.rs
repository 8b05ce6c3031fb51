//! The matcher against a transcription of Redis's `stringmatchlen_impl`, and its
//! work on hostile patterns counted in steps.

use super::{lower, matches, signed, Glob};
use proptest::prelude::*;

/// Redis's `stringmatchlen_impl` (util.c), transcribed without its pruning (so
/// exponential: small inputs only). Bytes past the pattern read as 0, as C reads
/// the NUL after an sds string.
fn redis(p: &[u8], s: &[u8], nocase: bool) -> bool {
    let at = |i: usize| p.get(i).copied().unwrap_or(0);
    let (mut pi, mut plen) = (0usize, p.len());
    let (mut si, mut slen) = (0usize, s.len());
    while plen > 0 && slen > 0 {
        match at(pi) {
            b'*' => {
                while plen > 0 && at(pi + 1) == b'*' {
                    pi += 1;
                    plen -= 1;
                }
                if plen == 1 {
                    return true;
                }
                while slen > 0 {
                    if redis(&p[pi + 1..], &s[si..], nocase) {
                        return true;
                    }
                    si += 1;
                    slen -= 1;
                }
                return false;
            }
            b'?' => {}
            b'[' => {
                pi += 1;
                plen -= 1;
                if !redis_class(p, &mut pi, &mut plen, s[si], nocase) {
                    return false;
                }
            }
            c0 => {
                if c0 == b'\\' && plen >= 2 {
                    pi += 1;
                    plen -= 1;
                }
                let x = at(pi);
                let eq = if nocase {
                    lower(signed(x)) == lower(signed(s[si]))
                } else {
                    x == s[si]
                };
                if !eq {
                    return false;
                }
            }
        }
        si += 1;
        slen -= 1;
        pi += 1;
        plen -= 1;
        if slen == 0 {
            while at(pi) == b'*' {
                pi += 1;
                plen -= 1;
            }
            break;
        }
    }
    plen == 0 && slen == 0
}

/// The `case '['` of Redis's matcher: `pi` starts after `[` and ends on `]` (or
/// on the last byte of an unterminated class).
fn redis_class(p: &[u8], pi: &mut usize, plen: &mut usize, c: u8, nocase: bool) -> bool {
    let at = |i: usize| p.get(i).copied().unwrap_or(0);
    let not = at(*pi) == b'^';
    if not {
        *pi += 1;
        *plen -= 1;
    }
    let mut hit = false;
    loop {
        if at(*pi) == b'\\' && *plen >= 2 {
            *pi += 1;
            *plen -= 1;
            hit |= at(*pi) == c;
        } else if at(*pi) == b']' {
            break;
        } else if *plen == 0 {
            *pi -= 1;
            *plen += 1;
            break;
        } else if *plen >= 3 && at(*pi + 1) == b'-' {
            let (mut a, mut b, mut x) = (signed(at(*pi)), signed(at(*pi + 2)), signed(c));
            if a > b {
                std::mem::swap(&mut a, &mut b);
            }
            if nocase {
                (a, b, x) = (lower(a), lower(b), lower(x));
            }
            *pi += 2;
            *plen -= 2;
            hit |= x >= a && x <= b;
        } else if nocase {
            hit |= lower(signed(at(*pi))) == lower(signed(c));
        } else {
            hit |= at(*pi) == c;
        }
        *pi += 1;
        *plen -= 1;
    }
    hit != not
}

#[test]
fn like_redis() {
    let t = |p: &str, s: &str| matches(p.as_bytes(), s.as_bytes(), false);
    assert!(
        !t("*", ""),
        "Redis: an empty string matches only the empty pattern"
    );
    assert!(t("", ""));
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
    assert!(t("a[bc", "ac"), "an unterminated class ends the pattern");
    assert!(t("[a-]x", "]"), "[a-] is the range a..]");
    assert!(matches(b"SAVE", b"save", true));
    assert!(
        !matches(b"[\\S]", b"s", true),
        "an escape in a class ignores nocase"
    );
    assert!(
        matches(b"[a-\xff]", b"\xff", false),
        "ranges are signed chars"
    );
    assert!(!matches(b"[a-\xff]", b"b", false));
    let stars = "*".repeat(50) + "x";
    assert!(!t(&stars, &"a".repeat(60)));
}

/// Patterns built from pieces that mean something to Redis's parser (classes,
/// ranges, escapes, both cases, high bytes for the signed ranges), so that the
/// rare shapes (`[\\A]`, `[a-]`, unterminated `[`) come up often.
fn pat_bytes() -> impl Strategy<Value = Vec<u8>> {
    let pieces: Vec<&'static [u8]> = vec![
        b"a",
        b"b",
        b"A",
        b"*",
        b"?",
        b"[",
        b"]",
        b"^",
        b"-",
        b"\\",
        b"\xff",
        b"[ab]",
        b"[^a]",
        b"[a-b]",
        b"[B-a]",
        b"[\\A]",
        b"[a-]",
        b"[^",
        b"\\a",
        b"[A-\xff]",
        b"[\x80-b]",
        b"[]",
        b"[^]",
        b"**",
    ];
    prop::collection::vec(prop::sample::select(pieces), 0..7).prop_map(|v| v.concat())
}

fn str_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(b"abAB-]^\\*\x80\xff".to_vec()), 0..9)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]
    #[test]
    fn agrees_with_redis(p in pat_bytes(), s in str_bytes(), nocase in any::<bool>()) {
        let g = Glob::new(&p, nocase);
        let mut steps = 0;
        let got = g.run(&s, &mut steps);
        prop_assert_eq!(got, redis(&p, &s, nocase), "pattern {:?} string {:?} nocase {}",
            String::from_utf8_lossy(&p), String::from_utf8_lossy(&s), nocase);
        prop_assert!(steps <= g.max_steps(s.len()), "{} steps", steps);
    }
}

/// CVE-2022-36021's shape: 40 bytes of `*a…*b` against a long run of `a`, and a
/// long literal after one `*`: the work is counted in steps, not timed.
#[test]
fn hostile_patterns_take_bounded_steps() {
    let key = vec![b'a'; 1024];
    let cve = "*a".repeat(19) + "*b";
    assert_eq!(cve.len(), 40);
    let long = "*".to_string() + &"a".repeat(1022) + "b";
    let classes = "*[a-z]".repeat(30) + "*[^a]";
    for pat in [cve, long, classes] {
        let g = Glob::new(pat.as_bytes(), false);
        let mut steps = 0;
        assert!(!g.run(&key, &mut steps));
        let bound = g.max_steps(key.len());
        println!(
            "{} bytes of pattern vs a 1024-byte key: {steps} steps (bound {bound})",
            pat.len()
        );
        assert!(steps <= bound, "{steps} > {bound}");
        assert!(steps <= 1100 * 1100, "{steps} steps");
    }
    // The same keys still match when they should.
    assert!(matches(("*a".repeat(19) + "*").as_bytes(), &key, false));
}
