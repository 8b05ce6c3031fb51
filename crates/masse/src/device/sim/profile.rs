//! Drive profiles: the parameters of each emulated drive class and where the
//! figures come from.
//!
//! Figures marked "seed" are from the project's seed documents: Table 1 of
//! "Toward Ultra-Low Latency SSDs" (`000_…`: PM963, P4800X, SZ985) and §2.1 of
//! the MASSé paper (`002_…`: P4800X 2200 MB/s symmetric; QLC 1600 MB/s
//! sequential, 16/64 KiB IU). Everything else (NAND timings, die counts, erase
//! block sizes) is an assumption chosen so the model reproduces the seed
//! figures; `docs/media.md` lists which is which.

use crate::device::Media;

/// Which drive class a profile models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ProfileKind {
    /// Intel Optane DC P4800X (3D XPoint): write in place, ~10 µs, symmetric.
    Optane,
    /// Samsung Z-SSD SZ985 (Z-NAND): low-latency SLC-like NAND with an FTL.
    Znand,
    /// Samsung PM963-class data-center TLC NAND SSD.
    Tlc,
    /// Intel P4320-class QLC NAND SSD: 64 KiB indirection unit.
    Qlc,
}

impl ProfileKind {
    /// Name used in `sim:NAME:SIZE` paths.
    pub fn name(self) -> &'static str {
        match self {
            ProfileKind::Optane => "optane",
            ProfileKind::Znand => "znand",
            ProfileKind::Tlc => "tlc",
            ProfileKind::Qlc => "qlc",
        }
    }

    /// Parse a profile name (a few aliases accepted).
    pub fn parse(s: &str) -> Option<ProfileKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "optane" | "xpoint" | "3dxpoint" | "p4800x" | "scm" => ProfileKind::Optane,
            "znand" | "z-nand" | "zssd" | "sz985" => ProfileKind::Znand,
            "tlc" | "pm963" => ProfileKind::Tlc,
            "qlc" | "p4320" => ProfileKind::Qlc,
            _ => return None,
        })
    }

    /// Every profile.
    pub const ALL: [ProfileKind; 4] = [
        ProfileKind::Optane,
        ProfileKind::Znand,
        ProfileKind::Tlc,
        ProfileKind::Qlc,
    ];
}

/// The parameters of an emulated drive. Times are in nanoseconds, bandwidths
/// in bytes per second.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Profile {
    /// Drive class.
    pub kind: ProfileKind,
    /// Model the profile stands for.
    pub model: &'static str,
    /// Media class reported in `DeviceInfo`.
    pub media: Media,
    /// Write in place (3D XPoint): no FTL, no GC, no erase.
    pub in_place: bool,
    /// Indirection unit: the FTL maps logical space in units of this size;
    /// smaller writes are read-modify-written.
    pub iu: u32,
    /// Erase block per die (bytes); the drive erases this much at once.
    pub erase_block: u64,
    /// Over-provisioning: physical space beyond the user capacity, as a
    /// fraction of the user capacity.
    pub op: f64,
    /// Flash channels.
    pub channels: u32,
    /// Dies (or 3D XPoint media units) per channel.
    pub dies_per_channel: u32,
    /// Bytes one die programs in one operation (page × planes × bits).
    pub program_unit: u32,
    /// Array read (sense) time of one page on one die.
    pub t_read: u64,
    /// Program time of one `program_unit` on one die.
    pub t_prog: u64,
    /// Erase time of one erase block.
    pub t_erase: u64,
    /// Fixed controller/firmware time added to every command.
    pub t_overhead: u64,
    /// Time to acknowledge a write accepted into the (power-safe) write buffer.
    pub t_write_ack: u64,
    /// Bytes of power-safe write buffer: writes are acknowledged from it until
    /// the NAND falls this far behind.
    pub write_buffer: u64,
    /// Per-channel transfer bandwidth (NAND bus).
    pub channel_bw: u64,
    /// Host link bandwidth (PCIe), shared by all transfers.
    pub link_bw: u64,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
const US: u64 = 1000;

impl Profile {
    /// The built-in parameters of a profile.
    pub fn of(kind: ProfileKind) -> Profile {
        match kind {
            ProfileKind::Optane => Profile::optane(),
            ProfileKind::Znand => Profile::znand(),
            ProfileKind::Tlc => Profile::tlc(),
            ProfileKind::Qlc => Profile::qlc(),
        }
    }

    /// Seed: P4800X typical latency 10/10 µs, 550 K/500 K 4 KB IOPS,
    /// 2.4/2.0 GB/s (Table 1); 2200 MB/s random = sequential (§2.1).
    /// Model: 4 media units, each busy 7 µs per 4 KiB + 3 µs controller
    /// time: QD1 = 10 µs, 4/7 µs = 571 K IOPS ≈ 2.3 GB/s either way.
    fn optane() -> Profile {
        Profile {
            kind: ProfileKind::Optane,
            model: "Intel Optane DC P4800X (3D XPoint)",
            media: Media::Scm,
            in_place: true,
            iu: 4096,
            erase_block: 0,
            op: 0.0,
            channels: 1,
            dies_per_channel: 4,
            program_unit: 4096,
            t_read: 7 * US,
            t_prog: 7 * US,
            t_erase: 0,
            t_overhead: 3 * US,
            t_write_ack: 0,
            write_buffer: 0,
            channel_bw: 64 << 30,
            link_bw: 2_400_000_000,
        }
    }

    /// Seed: SZ985 typical 12–20 µs read / 16 µs write, 750 K / 170 K
    /// 4 KB IOPS, 3.2 / 3.0 GB/s (Table 1). Model: 16 dies of SLC-like
    /// Z-NAND (3 µs sense), 16 KiB program unit in 87 µs → 3.0 GB/s.
    fn znand() -> Profile {
        Profile {
            kind: ProfileKind::Znand,
            model: "Samsung Z-SSD SZ985 (Z-NAND)",
            media: Media::Scm,
            in_place: false,
            iu: 4096,
            erase_block: 2 * MIB,
            op: 0.145,
            channels: 8,
            dies_per_channel: 2,
            program_unit: 16 * KIB as u32,
            t_read: 3 * US,
            t_prog: 87 * US,
            t_erase: 1500 * US,
            t_overhead: 9 * US,
            t_write_ack: 16 * US,
            write_buffer: 4 * MIB,
            channel_bw: 800_000_000,
            link_bw: 3_200_000_000,
        }
    }

    /// Seed: PM963 typical 79 µs read / 22 µs write, 430 K / 40 K 4 KB
    /// IOPS, 2.0 / 1.2 GB/s (Table 1); 3.84 TB on 4 TiB of NAND → 14.5 %
    /// over-provisioning. Model: 32 TLC dies, 64 KiB program in 1.75 ms
    /// → 1.2 GB/s; 60 µs sense + transfer + overhead ≈ 79 µs.
    fn tlc() -> Profile {
        Profile {
            kind: ProfileKind::Tlc,
            model: "Samsung PM963 (TLC V-NAND)",
            media: Media::Tlc,
            in_place: false,
            iu: 4096,
            erase_block: 4 * MIB,
            op: 0.145,
            channels: 8,
            dies_per_channel: 4,
            program_unit: 64 * KIB as u32,
            t_read: 60 * US,
            t_prog: 1750 * US,
            t_erase: 5000 * US,
            t_overhead: 12 * US,
            t_write_ack: 22 * US,
            write_buffer: 8 * MIB,
            channel_bw: 533_000_000,
            link_bw: 2_000_000_000,
        }
    }

    /// Seed: P4320-class QLC: 64 KiB IU, 1600 MB/s sequential write,
    /// 4 KB random write 11 K IOPS (§2.1). 7.68 TB on 8 TiB → 14.5 %
    /// over-provisioning. Model: 32 QLC dies, 64 KiB program in 1.31 ms
    /// → 1.6 GB/s; 120 µs sense (assumption: QLC tR, not in the seeds).
    fn qlc() -> Profile {
        Profile {
            kind: ProfileKind::Qlc,
            model: "Intel D5-P4320 (QLC 3D NAND)",
            media: Media::Qlc,
            in_place: false,
            iu: 64 * KIB as u32,
            erase_block: 8 * MIB,
            op: 0.145,
            channels: 8,
            dies_per_channel: 4,
            program_unit: 64 * KIB as u32,
            t_read: 120 * US,
            t_prog: 1310 * US,
            t_erase: 15_000 * US,
            t_overhead: 12 * US,
            t_write_ack: 25 * US,
            write_buffer: 16 * MIB,
            channel_bw: 533_000_000,
            link_bw: 3_200_000_000,
        }
    }

    /// Dies in the drive.
    pub fn dies(&self) -> u32 {
        self.channels * self.dies_per_channel
    }

    /// Sequential write bandwidth the NAND can sustain (bytes/s).
    pub fn nand_write_bw(&self) -> f64 {
        self.dies() as f64 * self.program_unit as f64 / (self.t_prog.max(1) as f64 / 1e9)
    }
}
