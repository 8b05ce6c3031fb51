//! Redis's glob-style pattern matching (`stringmatchlen` in util.c), on bytes: `*`,
//! `?`, `[abc]`, `[^a-z]`, `\x` escapes. Used by `SCAN MATCH` and `CONFIG GET`.
//!
//! Why not Redis's algorithm. Redis tries, for every `*`, every split of the rest
//! of the string, recursively: `*a*a*a…*b` against a long key is exponential
//! (CVE-2022-36021; Redis 7.0.9 prunes it). Here the pattern is first cut into
//! tokens that each match exactly one byte (a byte, `?`, a class) or any run (`*`),
//! then matched with the classic greedy two-pointer algorithm that only ever
//! remembers the last `*`: at most `(len(s) + 1) × (tokens + 1)` steps, whatever
//! the pattern. Cutting into tokens does not change Redis's meaning, because how
//! Redis reads a pattern (where a class ends, what a `\` escapes) never depends on
//! the string; the tests compare with a transcription of Redis's code.
//!
//! Redis's quirks kept on purpose (clients may rely on them): an empty string is
//! matched only by the empty pattern (even `*` does not match it); an unterminated
//! `[` ends the pattern (its class is the bytes up to the end); `[a-]` is the range
//! from `a` to `]`; a `\` escape inside a class is compared case-sensitively even
//! with `nocase`; ranges compare bytes as C's `char` on x86-64 (signed, so
//! `[a-\xff]` is the range from -1 to `a`). The one difference: Redis gives up on a
//! match that nests more than 1000 `*`, masse does not.

/// One token of a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    /// Any run of bytes (consecutive `*` are one).
    Star,
    /// `?`: any one byte.
    Any,
    /// A literal byte (escaped or not).
    Byte(u8),
    /// A class: index into [`Glob::sets`].
    Set(u32),
}

/// The 256 bytes a class matches, one bit each.
type ByteSet = [u64; 4];

/// A compiled pattern: compile once per request, match every key against it.
#[derive(Debug, Clone)]
pub struct Glob {
    toks: Vec<Tok>,
    sets: Vec<ByteSet>,
    nocase: bool,
}

/// Whether `s` matches `pat`; `nocase` folds ASCII case.
pub fn matches(pat: &[u8], s: &[u8], nocase: bool) -> bool {
    Glob::new(pat, nocase).matches(s)
}

/// C's `tolower` in the C locale, on a `char` widened to `int`.
fn lower(c: i32) -> i32 {
    if (b'A' as i32..=b'Z' as i32).contains(&c) {
        c + 32
    } else {
        c
    }
}

/// A byte as x86-64's signed `char`, widened (how Redis compares range ends).
fn signed(b: u8) -> i32 {
    b as i8 as i32
}

fn has(set: &ByteSet, b: u8) -> bool {
    set[(b >> 6) as usize] >> (b & 63) & 1 == 1
}

fn add(set: &mut ByteSet, b: u8) {
    set[(b >> 6) as usize] |= 1 << (b & 63);
}

/// Adds the bytes `a..=b` (unsigned, `a <= b`), a word at a time.
fn add_span(set: &mut ByteSet, a: usize, b: usize) {
    for (w, word) in set.iter_mut().enumerate() {
        let (lo, hi) = (a.max(w * 64), b.min(w * 64 + 63));
        if lo <= hi {
            let n = hi - lo + 1;
            let m = if n == 64 {
                !0
            } else {
                ((1u64 << n) - 1) << (lo - w * 64)
            };
            *word |= m;
        }
    }
}

/// Adds the bytes whose signed value `v` (folded by `lower` when `nocase`) lies
/// in `lo..=hi`: Redis's `c >= start && c <= end`. O(1) per range, so a long class
/// costs no more than its length.
fn add_range(set: &mut ByteSet, lo: i32, hi: i32, nocase: bool) {
    if lo > hi {
        return;
    }
    let mut t: ByteSet = [0; 4];
    // Signed -128..=-1 are the bytes 0x80..=0xff.
    let ub = |v: i32| (v as i8 as u8) as usize;
    if lo >= 0 || hi < 0 {
        add_span(&mut t, ub(lo), ub(hi));
    } else {
        add_span(&mut t, ub(lo), 255);
        add_span(&mut t, 0, ub(hi));
    }
    if nocase {
        // An upper-case byte is folded before the comparison: it matches iff its
        // lower-case form is in range ('a' - 'A' = 32 bits, all within word 1).
        let (mut upper, mut lowers): (ByteSet, ByteSet) = ([0; 4], [0; 4]);
        add_span(&mut upper, b'A' as usize, b'Z' as usize);
        add_span(&mut lowers, b'a' as usize, b'z' as usize);
        let folded = (t[1] & lowers[1]) >> 32;
        t[1] = (t[1] & !upper[1]) | folded;
    }
    for (w, x) in set.iter_mut().zip(t) {
        *w |= x;
    }
}

/// Adds a plain class member `x`: with `nocase`, both of its cases.
fn add_member(set: &mut ByteSet, x: u8, nocase: bool) {
    add(set, x);
    if nocase && x.is_ascii_alphabetic() {
        add(set, x ^ 0x20);
    }
}

/// Reads the class whose body starts at `p[i]` (just after `[`), as Redis does;
/// returns its bytes and the index just past it (past `]`, or the pattern end).
fn class(p: &[u8], mut i: usize, nocase: bool) -> (ByteSet, usize) {
    let mut set: ByteSet = [0; 4];
    let not = p.get(i) == Some(&b'^');
    if not {
        i += 1;
    }
    loop {
        let left = p.len().saturating_sub(i);
        match p.get(i) {
            Some(b'\\') if left >= 2 => {
                add(&mut set, p[i + 1]); // Redis: exact, even with nocase
                i += 2;
            }
            Some(b']') => {
                i += 1;
                break;
            }
            None => break, // unterminated: the class ends the pattern
            Some(&a) if left >= 3 && p[i + 1] == b'-' => {
                let (mut lo, mut hi) = (signed(a), signed(p[i + 2]));
                if lo > hi {
                    std::mem::swap(&mut lo, &mut hi);
                }
                if nocase {
                    (lo, hi) = (lower(lo), lower(hi));
                }
                add_range(&mut set, lo, hi, nocase);
                i += 3;
            }
            Some(&x) => {
                add_member(&mut set, x, nocase);
                i += 1;
            }
        }
    }
    if not {
        set.iter_mut().for_each(|w| *w = !*w);
    }
    (set, i)
}

impl Glob {
    /// Cuts `pat` into tokens, in one pass (O(len(pat)) time and tokens).
    pub fn new(pat: &[u8], nocase: bool) -> Glob {
        let mut g = Glob {
            toks: Vec::new(),
            sets: Vec::new(),
            nocase,
        };
        let mut i = 0;
        while i < pat.len() {
            let (t, next) = match pat[i] {
                b'*' if g.toks.last() == Some(&Tok::Star) => {
                    i += 1;
                    continue;
                }
                b'*' => (Tok::Star, i + 1),
                b'?' => (Tok::Any, i + 1),
                b'[' => {
                    let (set, next) = class(pat, i + 1, nocase);
                    g.sets.push(set);
                    (Tok::Set(g.sets.len() as u32 - 1), next)
                }
                b'\\' if i + 1 < pat.len() => (Tok::Byte(pat[i + 1]), i + 2),
                c => (Tok::Byte(c), i + 1),
            };
            g.toks.push(t);
            i = next;
        }
        g
    }

    /// Whether `s` matches.
    pub fn matches(&self, s: &[u8]) -> bool {
        self.run(s, &mut 0)
    }

    /// The most steps [`Glob::matches`] can take on a string of `len` bytes: each
    /// step moves a token forward or backs off to the last `*`, and a run between
    /// two back-offs passes at most one `*` and one byte per token matched.
    pub fn max_steps(&self, len: usize) -> u64 {
        let per_try = self.toks.len().min(2 * len + 1) as u64 + 1;
        (len as u64 + 1) * per_try + 1
    }

    fn hits(&self, t: Tok, b: u8) -> bool {
        match t {
            Tok::Star => false,
            Tok::Any => true,
            Tok::Byte(x) if self.nocase => x.eq_ignore_ascii_case(&b),
            Tok::Byte(x) => x == b,
            Tok::Set(k) => has(&self.sets[k as usize], b),
        }
    }

    /// The greedy match, counting its steps in `steps`. On a mismatch it only
    /// lets the last `*` seen take one more byte: an earlier `*` taking more could
    /// only move the part after the last `*` further right, which the last `*`
    /// covers by itself.
    fn run(&self, s: &[u8], steps: &mut u64) -> bool {
        if s.is_empty() {
            return self.toks.is_empty(); // Redis: only the empty pattern
        }
        let (mut p, mut i) = (0, 0);
        // (token after the last `*`, where in `s` that `*`'s run ends now)
        let mut star: Option<(usize, usize)> = None;
        loop {
            *steps += 1;
            if i == s.len() {
                return self.toks[p..].iter().all(|&t| t == Tok::Star);
            }
            match self.toks.get(p) {
                Some(Tok::Star) => {
                    p += 1;
                    star = Some((p, i));
                    continue;
                }
                Some(&t) if self.hits(t, s[i]) => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let Some((sp, si)) = star else {
                return false;
            };
            (p, i) = (sp, si + 1);
            star = Some((sp, si + 1));
        }
    }
}

#[cfg(test)]
mod tests;
