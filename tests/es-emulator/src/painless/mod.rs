//! Native Rust twins of the product's Painless scripts.
//!
//! The emulator cannot interpret Painless, so it runs a script only when the SHA-256 of the
//! stored source matches an entry of [`native_for_source`]: the Rust twin of that text,
//! which must implement the same semantics. The twins are proven by unit and property tests
//! (here and in scanstore's `projection::merge`); the Painless text itself is proven only
//! by a run against a real cluster (`STORAGE_TEST_ES_URL`).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub mod asset_merge;

pub use scanstore::es::painless::{ASSET_MERGE_ID, ASSET_MERGE_SOURCE};

/// The update context a script sees: `ctx.op` and `ctx._source`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptCtx {
    /// `create` for a scripted upsert of a missing document, `index` for an existing one;
    /// the script may set it to `noop`/`none` (nothing written) or `delete`.
    pub op: String,
    /// The document source the script mutates.
    pub source: Map<String, Value>,
}

/// A script failure, reported by the caller as a `script_exception`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScriptError(pub String);

/// A native implementation of one Painless source.
#[derive(Debug, Clone, Copy)]
pub struct NativeScript {
    /// Human-readable name (the stored-script id scanstore uses).
    pub name: &'static str,
    /// Hex SHA-256 of the Painless source this twin implements.
    pub source_sha256: &'static str,
    /// The Painless context the source compiles in.
    pub context: &'static str,
    run: fn(&mut ScriptCtx, &Map<String, Value>) -> Result<(), ScriptError>,
}

impl NativeScript {
    /// Runs the script on `ctx` with the request's `params`.
    pub fn run(&self, ctx: &mut ScriptCtx, params: &Map<String, Value>) -> Result<(), ScriptError> {
        (self.run)(ctx, params)
    }
}

const REGISTRY: &[NativeScript] = &[NativeScript {
    name: ASSET_MERGE_ID,
    source_sha256: asset_merge::SOURCE_SHA256,
    context: "update",
    run: asset_merge::run,
}];

/// Hex SHA-256 of a script source, the registry key.
pub fn source_sha256(source: &str) -> String {
    hex::encode(Sha256::digest(source.as_bytes()))
}

/// The native twin of `source`, if one is registered for exactly this text.
pub fn native_for_source(source: &str) -> Option<NativeScript> {
    let key = source_sha256(source);
    REGISTRY.iter().find(|n| n.source_sha256 == key).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_merge_source_is_registered() {
        let native = native_for_source(ASSET_MERGE_SOURCE);
        assert_eq!(native.map(|n| n.name), Some(ASSET_MERGE_ID));
    }

    #[test]
    fn pinned_hash_matches_the_painless_file() {
        // Editing asset_merge.painless changes this hash: update the Rust twin to the same
        // semantics, then pin the new hash in asset_merge::SOURCE_SHA256.
        assert_eq!(
            source_sha256(ASSET_MERGE_SOURCE),
            asset_merge::SOURCE_SHA256
        );
    }

    #[test]
    fn any_other_source_is_unknown() {
        assert!(native_for_source("ctx._source.x = 1").is_none());
        let edited = format!("{ASSET_MERGE_SOURCE} ");
        assert!(native_for_source(&edited).is_none());
    }
}
