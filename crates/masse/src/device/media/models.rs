//! The table of known drive models: the drives whose model string alone
//! tells the media class (and, when the vendor documents it, the indirection
//! unit), so they need no measurement.

use super::{Class, K};

/// An entry of the known-model table.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct KnownModel {
    /// Substring matched (case-insensitive) against the model string.
    pub pattern: &'static str,
    /// Marketing name printed by `masse probe`.
    pub name: &'static str,
    /// Media class of the model.
    pub class: Class,
    /// Indirection unit when the vendor documents one (0 = not known).
    pub iu: u32,
}

/// Known drive models. Order matters: the first match wins.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        pattern: "P5800X",
        name: "Intel Optane P5800X",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "P4800X",
        name: "Intel Optane DC P4800X",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "P4801X",
        name: "Intel Optane DC P4801X",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "905P",
        name: "Intel Optane 905P",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "900P",
        name: "Intel Optane 900P",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "OPTANE",
        name: "Intel Optane",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "SZ985",
        name: "Samsung Z-SSD SZ985",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "MZPZ",
        name: "Samsung Z-SSD",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "983 ZET",
        name: "Samsung 983 ZET (Z-NAND)",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "FL6",
        name: "KIOXIA FL6 (XL-Flash)",
        class: Class::Scm,
        iu: 0,
    },
    KnownModel {
        pattern: "P4320",
        name: "Intel D5-P4320 (QLC)",
        class: Class::Qlc,
        iu: 64 * K,
    },
    KnownModel {
        pattern: "P4326",
        name: "Intel D5-P4326 (QLC)",
        class: Class::Qlc,
        iu: 64 * K,
    },
    KnownModel {
        pattern: "P5316",
        name: "Solidigm D5-P5316 (QLC)",
        class: Class::Qlc,
        iu: 64 * K,
    },
    KnownModel {
        pattern: "P5336",
        name: "Solidigm D5-P5336 (QLC)",
        class: Class::Qlc,
        iu: 16 * K,
    },
    KnownModel {
        pattern: "P5430",
        name: "Solidigm D5-P5430 (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "660P",
        name: "Intel 660p (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "670P",
        name: "Intel 670p (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "QVO",
        name: "Samsung QVO (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "5210",
        name: "Micron 5210 ION (QLC)",
        class: Class::Qlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM963",
        name: "Samsung PM963 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM983",
        name: "Samsung PM983 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM9A3",
        name: "Samsung PM9A3 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM1725",
        name: "Samsung PM1725 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM1733",
        name: "Samsung PM1733 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "PM1735",
        name: "Samsung PM1735 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P4510",
        name: "Intel DC P4510 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P4610",
        name: "Intel DC P4610 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P5510",
        name: "Intel D7-P5510 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P5520",
        name: "Solidigm D7-P5520 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "P5620",
        name: "Solidigm D7-P5620 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "MICRON_7300",
        name: "Micron 7300 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "MICRON_7450",
        name: "Micron 7450 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "MICRON_9300",
        name: "Micron 9300 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "KCD6",
        name: "KIOXIA CD6 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "KCM6",
        name: "KIOXIA CM6 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "SN640",
        name: "WD Ultrastar DC SN640 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
    KnownModel {
        pattern: "SN650",
        name: "WD Ultrastar DC SN650 (TLC)",
        class: Class::Tlc,
        iu: 0,
    },
];

/// The table entry matching a model string.
pub fn known_model(model: &str) -> Option<&'static KnownModel> {
    let m = model.to_ascii_uppercase().replace(' ', "_");
    let plain = model.to_ascii_uppercase();
    KNOWN_MODELS.iter().find(|k| {
        let p = k.pattern.to_ascii_uppercase();
        plain.contains(&p) || m.contains(&p.replace(' ', "_"))
    })
}
