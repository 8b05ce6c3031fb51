//! Media identification for `masse probe` and `masse create`. The facts and
//! the rules live in the library ([`masse::device::media`]), so a library
//! caller classifies a device the same way; this module keeps the path the
//! CLI's integration tests use.

pub use masse::device::media::{
    advise, classify, classify_measured, facts_for_path, known_model, sysfs_facts, Advice, Class,
    KnownModel, Measured, SysfsFacts, Verdict, KNOWN_MODELS,
};
