//! The `rebuild-assets` commands: rebuild and switch, switch-back, catch-up, drop and
//! status — each a composition of the rounds, comparison and switch in the parent module.

use chrono::{DateTime, Utc};

use crate::app::App;
use crate::es::alias::{self, AssetIndices, View};
use crate::es::setup;
use crate::telemetry::Line;

use super::{
    catch_up_round, converge, publish, source, switch, verify, wait_settled, Ledger, Options,
    RebuildError,
};

/// The outcome of a command, printed by the CLI as `key=value` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub current: u32,
    pub previous: Option<u32>,
    pub executions: usize,
    pub documents_compared: u64,
}

fn exists(app: &App, version: u32) -> Result<bool, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let existing = alias::existing(&app.es, prefix)?;
    Ok(existing.get(&version).is_some_and(|v| v.len() == 2))
}

/// `scanstore rebuild-assets`: builds the next version, verifies it, switches to it.
pub fn rebuild(app: &App, opts: Options) -> Result<Outcome, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    app.ensure_indices()?;
    let live = alias::current(&app.es, prefix)?;
    let next = alias::existing(&app.es, prefix)?
        .keys()
        .copied()
        .chain([live.version])
        .max()
        .unwrap_or(setup::ASSETS_VERSION)
        + 1;
    let target = AssetIndices::version(prefix, next);
    for view in View::BOTH {
        setup::create_assets_index(
            &app.es,
            target.of(view),
            &app.config.elasticsearch.indices.assets,
        )?;
    }
    Line::new("RebuildStarted")
        .field("from", format!("v{}", live.version))
        .field("to", format!("v{next}"))
        .info();
    // Tag changes committed before the first page are in the tags every page looks up.
    let mut ledger = Ledger::default();
    let window = Some(source::now(&app.db)?);
    ledger.tags = source::tag_changes(&app.db, None)?
        .into_iter()
        .map(|r| r.outbox_id)
        .collect();
    catch_up_round(app, &target, &mut ledger, None, "publish")?;
    let (_, compared) = converge(app, &live, &target, &mut ledger, window, opts)?;
    // Anything processed since the rebuild began and not yet published here, as well as
    // anything still in flight, is caught up after the switch.
    switch(app, &live, &target, &mut ledger, window)?;
    Ok(Outcome {
        current: next,
        previous: Some(live.version),
        executions: ledger.executions.len(),
        documents_compared: compared,
    })
}

/// `scanstore rebuild-assets switch-back --to N`: moves the aliases to an existing older
/// version only if it equals the current one document by document.
pub fn switch_back(app: &App, version: u32, opts: Options) -> Result<Outcome, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let live = alias::current(&app.es, prefix)?;
    if version == live.version {
        return Err(RebuildError::Refused(format!(
            "the aliases already point at v{version}"
        )));
    }
    if !exists(app, version)? {
        return Err(RebuildError::Refused(format!(
            "v{version} does not exist (both asset indices are needed)"
        )));
    }
    let target = AssetIndices::version(prefix, version);
    wait_settled(app, opts.settle_timeout)?;
    let at = source::now(&app.db)?;
    publish::refresh(app, &live)?;
    publish::refresh(app, &target)?;
    let diff = verify::compare(&app.es, &live, &target)?;
    if !diff.is_empty() {
        return Err(RebuildError::Mismatch {
            reference: live.version,
            other: version,
            diff,
        });
    }
    let compared = diff.compared;
    switch(app, &live, &target, &mut Ledger::default(), Some(at))?;
    Ok(Outcome {
        current: version,
        previous: Some(live.version),
        executions: 0,
        documents_compared: compared,
    })
}

/// `scanstore rebuild-assets catch-up --to N [--since T]`: re-publishes into an older
/// version what it lacks (every execution and tag change live publication processed at or
/// after `since`, or the whole history), until it equals the current one.
pub fn catch_up(
    app: &App,
    version: u32,
    since: Option<DateTime<Utc>>,
    opts: Options,
) -> Result<Outcome, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let live = alias::current(&app.es, prefix)?;
    if version == live.version {
        return Err(RebuildError::Refused(format!(
            "v{version} is where the aliases point; live publication keeps it current"
        )));
    }
    if !exists(app, version)? {
        return Err(RebuildError::Refused(format!(
            "v{version} does not exist (both asset indices are needed)"
        )));
    }
    let target = AssetIndices::version(prefix, version);
    let mut ledger = Ledger::default();
    let window = Some(source::now(&app.db)?);
    catch_up_round(app, &target, &mut ledger, since, "catch-up")?;
    let (_, compared) = converge(app, &live, &target, &mut ledger, window, opts)?;
    Ok(Outcome {
        current: live.version,
        previous: None,
        executions: ledger.executions.len(),
        documents_compared: compared,
    })
}

/// `scanstore rebuild-assets drop --index NAME`: deletes one physical asset index of this
/// prefix that no alias points at.
pub fn drop_index(app: &App, name: &str) -> Result<(), RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let ours = View::BOTH
        .iter()
        .any(|v| alias::version_of(&v.alias(prefix), name).is_some());
    if !ours {
        return Err(RebuildError::Refused(format!(
            "{name} is not a versioned asset index of prefix {prefix}"
        )));
    }
    let existing = alias::existing(&app.es, prefix)?;
    let Some((_, aliases)) = existing.values().flatten().find(|(n, _)| n == name) else {
        return Err(RebuildError::Refused(format!("{name} does not exist")));
    };
    if !aliases.is_empty() {
        return Err(RebuildError::Refused(format!(
            "{name} is behind alias {}; switch the aliases away first",
            aliases.join(", ")
        )));
    }
    app.es.delete_index(name)?;
    Line::new("AssetIndexDropped").field("index", name).info();
    Ok(())
}

/// `scanstore rebuild-assets status`: where the aliases point and which versions exist.
pub fn status(app: &App) -> Result<Vec<String>, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let mut lines = Vec::new();
    match alias::current(&app.es, prefix) {
        Ok(c) => lines.push(format!("current=v{}", c.version)),
        Err(e) => lines.push(format!("current=unknown ({e})")),
    }
    for (version, indices) in alias::existing(&app.es, prefix)? {
        for (name, aliases) in indices {
            lines.push(format!(
                "version=v{version} index={name} aliases={}",
                if aliases.is_empty() {
                    "-".to_string()
                } else {
                    aliases.join(",")
                }
            ));
        }
    }
    Ok(lines)
}

/// Reads `v3` or `3` as a version number.
pub fn parse_version(text: &str) -> Result<u32, String> {
    text.strip_prefix('v')
        .unwrap_or(text)
        .parse()
        .map_err(|_| format!("{text:?} is not a version (v1, v2, …)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_or_without_v() {
        assert_eq!(parse_version("v2"), Ok(2));
        assert_eq!(parse_version("7"), Ok(7));
        assert!(parse_version("vx").is_err());
    }
}
