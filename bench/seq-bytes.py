#!/usr/bin/env python3
"""Bytes that sequence numbers take in the segments of a format-3 or -4 capacity file.

    bench/seq-bytes.py CAPACITY_FILE [BASE]

Finds every segment footer (docs/format.md §7.6.4: magic "SEGF", version 3 or 4, at
the end of a 4 KiB-aligned slot), decodes its summary entries and prints, per kind
of segment, the bytes per record of

* the record's seq trailer as stored (record length − BASE, the length of a record
  without trailer: 8 + key + value; default 124, 16-byte keys and 100-byte values as
  `masse demo` writes them);
* the summary entry's seq delta as stored, and what it would take under each rule
  of format.md §7.6.1 (version 3: E = max(E, seq + 1); version 4: E = seq + 1).

Segments whose seqs span more than 4 per record ("wide": GC moves, cold user writes)
are counted apart from the rest ("narrow": user writes in seq order). Stale footers
of slots reused since count too; it is a statistic of the file, not of live data.
"""
import mmap
import struct
import sys
from collections import Counter


def leb(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return v, i


def leb_len(v):
    return max(1, (v.bit_length() + 6) // 7)


def zigzag(d):
    return d << 1 if d >= 0 else ((-d) << 1) - 1


def unzigzag(z):
    return (z >> 1) ^ -(z & 1)


def delta_bytes(seqs, follow):
    e = total = 0
    for s in seqs:
        if s != e:
            total += leb_len(zigzag(s - e))
        e = s + 1 if follow else max(e, s + 1)
    return total


def main():
    path = sys.argv[1]
    base = int(sys.argv[2]) if len(sys.argv) > 2 else 124
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    footers = {struct.pack("<II", 0x46474553, v): v for v in (3, 4)}
    t = Counter()
    pos = 4096 - 64
    while pos + 64 <= len(m):
        version = footers.get(bytes(m[pos : pos + 8]))
        if version:
            nrec, _, _, sum_len = struct.unpack_from("<IIII", m, pos + 32)
            lo, hi = struct.unpack_from("<QQ", m, pos + 48)
            i, e, seqs, trailer, stored = pos - sum_len, 0, [], 0, 0
            for _ in range(nrec):
                code, i = leb(m, i + 10)
                s = e
                if code & 8:
                    j = i
                    z, i = leb(m, i)
                    s = e + unzigzag(z)
                    stored += i - j
                seqs.append(s)
                e = max(e, s + 1) if version == 3 else s + 1
                trailer += (code >> 4) - base
            k = "wide" if hi - lo > 4 * nrec else "narrow"
            t[k, "segments"] += 1
            t[k, "records"] += nrec
            t[k, "trailer"] += trailer
            t[k, "stored"] += stored
            t[k, "v3"] += delta_bytes(seqs, False)
            t[k, "v4"] += delta_bytes(seqs, True)
            t["versions", version] += 1
        pos += 4096
    print(f"{path}: footers of version 3: {t['versions', 3]}, of version 4: {t['versions', 4]}")
    for k in ("narrow", "wide"):
        r = t[k, "records"]
        if r:
            print(
                f"{k:6} {t[k, 'segments']:6} segments {r:9} records; bytes per record: "
                f"trailer {t[k, 'trailer'] / r:.2f}, summary seq {t[k, 'stored'] / r:.2f} "
                f"(version 3's rule {t[k, 'v3'] / r:.2f}, version 4's {t[k, 'v4'] / r:.2f})"
            )


if __name__ == "__main__":
    main()
