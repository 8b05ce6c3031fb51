//! The dump stream of `masse dump` / `masse load`: a portable, checksummed
//! sequence of key-value records (docs/operating.md, "The dump format").
//!
//! All integers are little-endian.
//!
//! ```text
//! header  "MASSEDMP" | version u32 (=1) | meta_len u32 | meta (JSON) | crc32c u32
//! record  0x01 | key_len u16 | value_len u32 | key | value | crc32c u32
//! end     0xFF | records u64 | kv_bytes u64 | chain u32 | crc32c u32
//! ```
//!
//! Each frame's crc32c covers the frame's bytes before it. `chain` is the crc32c
//! of every record's crc in order, so a stream with a record dropped, repeated or
//! moved fails at the end frame even though each record is whole. Nothing may
//! follow the end frame. The stream holds records only: it does not depend on the
//! source pool's geometry or on-disk format version.

use std::io::{self, Read, Write};

pub const MAGIC: &[u8; 8] = b"MASSEDMP";
pub const VERSION: u32 = 1;
const TAG_RECORD: u8 = 0x01;
const TAG_END: u8 = 0xFF;
const MAX_META: u32 = 1 << 20;

/// Why a stream could not be read.
#[derive(Debug)]
pub enum DumpError {
    Io(io::Error),
    /// Damage or truncation, with the record number (0-based) and byte offset where found.
    Bad {
        record: u64,
        offset: u64,
        what: String,
    },
}

impl std::fmt::Display for DumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpError::Io(e) => write!(f, "{e}"),
            DumpError::Bad {
                record,
                offset,
                what,
            } => write!(f, "{what} (record {record}, byte offset {offset})"),
        }
    }
}

/// Writes a stream; [`DumpWriter::finish`] writes the end frame.
pub struct DumpWriter<W: Write> {
    out: W,
    records: u64,
    kv_bytes: u64,
    chain: u32,
}

impl<W: Write> DumpWriter<W> {
    /// Start a stream with `meta` (a JSON object describing the source) in its header.
    pub fn new(mut out: W, meta: &serde_json::Value) -> io::Result<DumpWriter<W>> {
        let meta = serde_json::to_vec(meta)?;
        let mut h = Vec::with_capacity(20 + meta.len());
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        h.extend_from_slice(&meta);
        h.extend_from_slice(&crc32c::crc32c(&h).to_le_bytes());
        out.write_all(&h)?;
        Ok(DumpWriter {
            out,
            records: 0,
            kv_bytes: 0,
            chain: 0,
        })
    }

    pub fn record(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let mut h = [0u8; 7];
        h[0] = TAG_RECORD;
        h[1..3].copy_from_slice(&(key.len() as u16).to_le_bytes());
        h[3..7].copy_from_slice(&(value.len() as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&h), key), value);
        self.out.write_all(&h)?;
        self.out.write_all(key)?;
        self.out.write_all(value)?;
        self.out.write_all(&crc.to_le_bytes())?;
        self.chain = crc32c::crc32c_append(self.chain, &crc.to_le_bytes());
        self.records += 1;
        self.kv_bytes += (key.len() + value.len()) as u64;
        Ok(())
    }

    /// Write the end frame and flush; the records and key+value bytes written.
    pub fn finish(mut self) -> io::Result<(u64, u64, W)> {
        let mut e = Vec::with_capacity(25);
        e.push(TAG_END);
        e.extend_from_slice(&self.records.to_le_bytes());
        e.extend_from_slice(&self.kv_bytes.to_le_bytes());
        e.extend_from_slice(&self.chain.to_le_bytes());
        e.extend_from_slice(&crc32c::crc32c(&e).to_le_bytes());
        self.out.write_all(&e)?;
        self.out.flush()?;
        Ok((self.records, self.kv_bytes, self.out))
    }
}

/// Reads a stream record by record, verifying as it goes.
pub struct DumpReader<R: Read> {
    inp: R,
    pub meta: serde_json::Value,
    /// Bytes consumed so far.
    pub offset: u64,
    /// Records returned so far.
    pub records: u64,
    kv_bytes: u64,
    chain: u32,
    ended: bool,
}

/// One item of the stream.
pub enum Item {
    Record(Vec<u8>, Vec<u8>),
    /// The end frame matched everything read.
    End,
}

impl<R: Read> DumpReader<R> {
    pub fn new(mut inp: R) -> Result<DumpReader<R>, DumpError> {
        let bad = |what: &str| DumpError::Bad {
            record: 0,
            offset: 0,
            what: what.to_string(),
        };
        let mut h = [0u8; 16];
        read_exact(&mut inp, &mut h).map_err(|_| bad("not a masse dump: too short"))?;
        if &h[..8] != MAGIC {
            return Err(bad("not a masse dump: bad magic"));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(bad(&format!(
                "dump format version {version}, this masse reads version {VERSION}"
            )));
        }
        let mlen = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
        if mlen > MAX_META {
            return Err(bad("header metadata too long"));
        }
        let mut meta = vec![0u8; mlen as usize + 4];
        read_exact(&mut inp, &mut meta).map_err(|_| bad("truncated header"))?;
        let (m, c) = meta.split_at(mlen as usize);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h), m);
        if crc.to_le_bytes() != c {
            return Err(bad("header checksum mismatch"));
        }
        let meta = serde_json::from_slice(m).map_err(|_| bad("header metadata is not JSON"))?;
        Ok(DumpReader {
            inp,
            meta,
            offset: 20 + mlen as u64,
            records: 0,
            kv_bytes: 0,
            chain: 0,
            ended: false,
        })
    }

    fn bad(&self, what: impl Into<String>) -> DumpError {
        DumpError::Bad {
            record: self.records,
            offset: self.offset,
            what: what.into(),
        }
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<(), DumpError> {
        match read_exact(&mut self.inp, buf) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(self.bad(format!("stream truncated in {what}")))
            }
            Err(e) => Err(DumpError::Io(e)),
        }
    }

    /// The next record, or `End` once the end frame checked out.
    pub fn next_item(&mut self) -> Result<Item, DumpError> {
        if self.ended {
            return Ok(Item::End);
        }
        let mut tag = [0u8; 1];
        self.fill(&mut tag, "a frame tag (no end frame)")?;
        match tag[0] {
            TAG_RECORD => self.read_record(),
            TAG_END => self.read_end(),
            t => Err(self.bad(format!("unknown frame tag 0x{t:02x}"))),
        }
    }

    fn read_record(&mut self) -> Result<Item, DumpError> {
        let mut h = [0u8; 7];
        h[0] = TAG_RECORD;
        self.fill(&mut h[1..], "a record header")?;
        let klen = u16::from_le_bytes([h[1], h[2]]) as usize;
        let vlen = u32::from_le_bytes(h[3..7].try_into().expect("4 bytes")) as usize;
        if klen == 0 || klen > masse::MAX_KEY_LEN || vlen > masse::MAX_VALUE_LEN {
            return Err(self.bad(format!("impossible record size: key {klen}, value {vlen}")));
        }
        let mut kv = vec![0u8; klen + vlen + 4];
        self.fill(&mut kv, "a record")?;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h), &kv[..klen + vlen]);
        if crc.to_le_bytes() != kv[klen + vlen..] {
            return Err(self.bad("record checksum mismatch"));
        }
        self.chain = crc32c::crc32c_append(self.chain, &crc.to_le_bytes());
        self.offset += (7 + klen + vlen + 4) as u64;
        self.records += 1;
        self.kv_bytes += (klen + vlen) as u64;
        kv.truncate(klen + vlen);
        let v = kv.split_off(klen);
        Ok(Item::Record(kv, v))
    }

    fn read_end(&mut self) -> Result<Item, DumpError> {
        let mut e = [0u8; 25];
        e[0] = TAG_END;
        self.fill(&mut e[1..], "the end frame")?;
        let crc = crc32c::crc32c(&e[..21]);
        if crc.to_le_bytes() != e[21..] {
            return Err(self.bad("end frame checksum mismatch"));
        }
        let records = u64::from_le_bytes(e[1..9].try_into().expect("8 bytes"));
        let bytes = u64::from_le_bytes(e[9..17].try_into().expect("8 bytes"));
        let chain = u32::from_le_bytes(e[17..21].try_into().expect("4 bytes"));
        if (records, bytes, chain) != (self.records, self.kv_bytes, self.chain) {
            return Err(self.bad(format!(
                "end frame says {records} records / {bytes} bytes, the stream held {} / {} \
                 (or records were reordered)",
                self.records, self.kv_bytes
            )));
        }
        self.offset += 25;
        let mut more = [0u8; 1];
        if self.inp.read(&mut more).map_err(DumpError::Io)? != 0 {
            return Err(self.bad("data after the end frame"));
        }
        self.ended = true;
        Ok(Item::End)
    }
}

fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> io::Result<()> {
    r.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(n: u32) -> Vec<u8> {
        let mut w = DumpWriter::new(Vec::new(), &serde_json::json!({"t": 1})).unwrap();
        for i in 0..n {
            w.record(format!("k{i}").as_bytes(), &vec![i as u8; i as usize])
                .unwrap();
        }
        w.finish().unwrap().2
    }

    fn read_all(b: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, DumpError> {
        let mut r = DumpReader::new(b)?;
        let mut v = Vec::new();
        loop {
            match r.next_item()? {
                Item::Record(k, x) => v.push((k, x)),
                Item::End => return Ok(v),
            }
        }
    }

    #[test]
    fn round_trips_records_in_order() {
        let v = read_all(&stream(50)).unwrap();
        assert_eq!(v.len(), 50);
        assert_eq!(v[7], (b"k7".to_vec(), vec![7u8; 7]));
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let s = stream(5);
        for cut in 0..s.len() {
            assert!(read_all(&s[..cut]).is_err(), "truncated at {cut} accepted");
        }
        for i in 0..s.len() {
            let mut d = s.clone();
            d[i] ^= 0x10;
            assert!(read_all(&d).is_err(), "flip at byte {i} accepted");
        }
        let mut extra = s.clone();
        extra.push(0);
        assert!(read_all(&extra).is_err());
    }

    #[test]
    fn a_dropped_whole_record_is_caught_by_the_end_frame() {
        let s = stream(3);
        // Record 1 is "k1" with a 1-byte value: 7 + 2 + 1 + 4 = 14 bytes, after record 0 (13).
        let hdr = 20
            + serde_json::to_vec(&serde_json::json!({"t": 1}))
                .unwrap()
                .len();
        let mut d = s[..hdr + 13].to_vec();
        d.extend_from_slice(&s[hdr + 13 + 14..]);
        let e = read_all(&d).unwrap_err().to_string();
        assert!(e.contains("end frame says 3 records"), "{e}");
    }
}
