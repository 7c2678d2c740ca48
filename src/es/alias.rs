//! The current-asset aliases and the physical indices behind them: where each alias points
//! now (publication writes there), the versioned indices that exist, and the one atomic
//! `_aliases` request that moves both aliases together.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::client::EsClient;
use super::error::EsError;
use super::index;

/// The two asset views, each an alias over a versioned physical index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Global,
    User,
}

impl View {
    pub const BOTH: [View; 2] = [View::Global, View::User];

    pub fn alias(self, prefix: &str) -> String {
        match self {
            View::Global => index::assets_global_alias(prefix),
            View::User => index::assets_user_alias(prefix),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            View::Global => "global",
            View::User => "user",
        }
    }
}

/// The physical asset indices of one version: what publication and a rebuild write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetIndices {
    pub version: u32,
    pub global: String,
    pub user: String,
}

impl AssetIndices {
    pub fn version(prefix: &str, version: u32) -> AssetIndices {
        AssetIndices {
            version,
            global: index::versioned(&index::assets_global_alias(prefix), version),
            user: index::versioned(&index::assets_user_alias(prefix), version),
        }
    }

    pub fn of(&self, view: View) -> &str {
        match view {
            View::Global => &self.global,
            View::User => &self.user,
        }
    }
}

/// The version number of a physical asset index name (`<alias>-v<N>`), if it is one.
pub fn version_of(alias: &str, physical: &str) -> Option<u32> {
    physical
        .strip_prefix(alias)?
        .strip_prefix("-v")?
        .parse()
        .ok()
}

/// Where both asset aliases point now, read in one request (publication asks at every
/// tick). Both must point at exactly one index each, of the same version; anything else (a
/// half-done manual change) is refused, never guessed.
pub fn current(es: &EsClient, prefix: &str) -> Result<AssetIndices, EsError> {
    let aliases = View::BOTH.map(|v| v.alias(prefix));
    let r = es.request(
        "GET",
        &format!("/_alias/{}", index::encode_path(&aliases.join(","))),
        None,
    )?;
    // A missing alias is a 404 whose body still lists the aliases that exist.
    let r = if r.status == 404 { r } else { r.ok()? };
    let none = serde_json::Map::new();
    let indices = r.body.as_object().unwrap_or(&none);
    let mut versions = Vec::new();
    for alias in &aliases {
        let mut t: Vec<&String> = indices
            .iter()
            .filter(|(_, v)| v["aliases"].get(alias).is_some())
            .map(|(name, _)| name)
            .collect();
        t.sort();
        let [one] = t.as_slice() else {
            return Err(EsError::BadResponse(format!(
                "alias {alias} points at {} indices ({}), expected exactly one",
                t.len(),
                t.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
            )));
        };
        let Some(v) = version_of(alias, one) else {
            return Err(EsError::BadResponse(format!(
                "alias {alias} points at {one}, which is not a versioned {alias}-vN index"
            )));
        };
        versions.push(v);
    }
    if versions[0] != versions[1] {
        return Err(EsError::BadResponse(format!(
            "the asset aliases point at different versions (global v{}, user v{})",
            versions[0], versions[1]
        )));
    }
    Ok(AssetIndices::version(prefix, versions[0]))
}

/// Physical indices by version, each with the aliases on it.
pub type Versions = BTreeMap<u32, Vec<(String, Vec<String>)>>;

/// Every existing physical asset index per version, with the aliases on it.
pub fn existing(es: &EsClient, prefix: &str) -> Result<Versions, EsError> {
    let mut out = Versions::new();
    for view in View::BOTH {
        let alias = view.alias(prefix);
        let pattern = format!("{alias}-v*");
        let r = es.request(
            "GET",
            &format!(
                "/{}?allow_no_indices=true&ignore_unavailable=true",
                index::encode_path(&pattern)
            ),
            None,
        )?;
        if r.status == 404 {
            continue;
        }
        let r = r.ok()?;
        for (name, body) in r.body.as_object().into_iter().flatten() {
            if let Some(v) = version_of(&alias, name) {
                let aliases = body["aliases"]
                    .as_object()
                    .map(|a| a.keys().cloned().collect())
                    .unwrap_or_default();
                out.entry(v).or_default().push((name.clone(), aliases));
            }
        }
    }
    Ok(out)
}

/// The body of the one `_aliases` request that moves both aliases from `from` to `to`.
pub fn switch_actions(prefix: &str, from: &AssetIndices, to: &AssetIndices) -> Value {
    let mut actions = Vec::new();
    for view in View::BOTH {
        let alias = view.alias(prefix);
        actions
            .push(json!({"remove": {"index": from.of(view), "alias": alias, "must_exist": true}}));
        actions.push(json!({"add": {"index": to.of(view), "alias": alias}}));
    }
    json!({ "actions": actions })
}

/// Moves both aliases atomically with one `POST /_aliases`, then reads back where they
/// point and fails unless it is exactly `to`.
pub fn switch(
    es: &EsClient,
    prefix: &str,
    from: &AssetIndices,
    to: &AssetIndices,
) -> Result<(), EsError> {
    let r = es
        .json("POST", "/_aliases", &switch_actions(prefix, from, to))?
        .ok()?;
    if r.body["acknowledged"].as_bool() != Some(true) {
        return Err(EsError::BadResponse(format!(
            "_aliases was not acknowledged: {}",
            r.body
        )));
    }
    let now = current(es, prefix)?;
    if &now != to {
        return Err(EsError::BadResponse(format!(
            "after the switch the aliases point at v{} instead of v{}",
            now.version, to.version
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_names() {
        assert_eq!(version_of("s-assets-user", "s-assets-user-v12"), Some(12));
        assert_eq!(version_of("s-assets-user", "s-assets-user-vx"), None);
        assert_eq!(version_of("s-assets-user", "s-assets-global-v1"), None);
    }

    #[test]
    fn one_request_removes_old_and_adds_new_for_both_views() {
        let body = switch_actions(
            "s",
            &AssetIndices::version("s", 1),
            &AssetIndices::version("s", 2),
        );
        let actions = body["actions"].as_array().unwrap();
        assert_eq!(actions.len(), 4);
        assert_eq!(actions[0]["remove"]["index"], "s-assets-global-v1");
        assert_eq!(actions[0]["remove"]["must_exist"], true);
        assert_eq!(actions[1]["add"]["index"], "s-assets-global-v2");
        assert_eq!(actions[3]["add"]["alias"], "s-assets-user");
    }
}
