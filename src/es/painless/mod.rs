//! The product's Painless scripts. A real cluster runs the source; the ES emulator runs a
//! native twin it keeps for exactly this text (pinned by its SHA-256), so the Painless text
//! itself is proven only by a run against a real cluster (`STORAGE_TEST_ES_URL`).

/// Stored-script id under which scanstore registers [`ASSET_MERGE_SOURCE`].
pub const ASSET_MERGE_ID: &str = "scanstore-asset-merge";
/// Painless source of the asset merge (a `scripted_upsert` update script).
pub const ASSET_MERGE_SOURCE: &str = include_str!("asset_merge.painless");
