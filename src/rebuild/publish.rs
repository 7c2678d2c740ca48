//! Re-publication into a chosen asset version, with exactly the pieces live publication
//! uses (`projection::page`: the same page reads, merge script, document ids and tag
//! updates) — only the target differs. Every bulk is verified item by item. No database
//! connection is held across Elasticsearch I/O.

use crate::app::App;
use crate::db::Stage;
use crate::es::alias::AssetIndices;
use crate::es::index;
use crate::es::writer::{WritePolicy, Writer};
use crate::projection::{page, worker::OUTBOX_BACKOFF};
use crate::tags;

use super::source::{ExecutionRow, TagRow};
use super::RebuildError;

/// Attempts per bulk request: a rebuild is interactive, so transient trouble is retried a
/// few times before the command fails (and is simply run again).
const ATTEMPTS: u32 = 5;

fn writer<'a>(app: &'a App, trace_id: &'a str) -> Writer<'a> {
    let cfg = &app.config.elasticsearch;
    Writer {
        es: &app.es,
        limiter: &app.limiter,
        policy: WritePolicy {
            max_ops: cfg.bulk_batch_size,
            max_bytes: cfg.projection_bulk_max_bytes,
            attempts: ATTEMPTS,
            backoff: OUTBOX_BACKOFF,
        },
        cancel: None,
        trace_id,
    }
}

/// Publishes every endpoint of one execution into `target`, page by page from the
/// execution projection; returns the number of endpoints.
pub fn execution(
    app: &App,
    target: &AssetIndices,
    row: &ExecutionRow,
) -> Result<u64, RebuildError> {
    let cfg = &app.config.elasticsearch;
    let source = index::execution_endpoints(&cfg.index_prefix);
    let trace_id = format!("rebuild-v{}-outbox-{}", target.version, row.outbox_id);
    let writer = writer(app, &trace_id);
    let mut cursor: Option<String> = None;
    let mut endpoints = 0;
    loop {
        let page = page::read(
            &app.es,
            &source,
            page::execution_filter(row.execution_id),
            cursor.as_deref(),
            cfg.projection_page_size,
        )?;
        let Some(next) = page.cursor.clone() else {
            break;
        };
        let tags = {
            let mut conn = app.db.checkout(Stage::Rebuild)?;
            tags::lookup(&mut *conn, row.owner_id, &page::addresses(&page.docs), &[])?
        };
        writer.write(&page::execution_operations(
            target,
            row.owner_id,
            &page.docs,
            &tags,
        ))?;
        endpoints += page.docs.len() as u64;
        if page.docs.len() < cfg.projection_page_size {
            break;
        }
        cursor = Some(next);
    }
    Ok(endpoints)
}

/// Re-applies the owner's current tags to the documents of `target` within one tag
/// change's scope (what a `tags` outbox row does live); returns the documents touched.
/// The documents are made visible first, so every one published so far is in scope.
pub fn tag_change(app: &App, target: &AssetIndices, row: &TagRow) -> Result<u64, RebuildError> {
    let Some(filter) = page::tag_scope_filter(row.owner_id, &row.scope) else {
        return Ok(0);
    };
    let cfg = &app.config.elasticsearch;
    refresh(app, target)?;
    let trace_id = format!("rebuild-v{}-tags-{}", target.version, row.outbox_id);
    let writer = writer(app, &trace_id);
    let mut cursor: Option<String> = None;
    let mut touched = 0;
    loop {
        let page = page::read(
            &app.es,
            &target.user,
            filter.clone(),
            cursor.as_deref(),
            cfg.projection_page_size,
        )?;
        let Some(next) = page.cursor.clone() else {
            break;
        };
        let tags = {
            let mut conn = app.db.checkout(Stage::Rebuild)?;
            tags::lookup(&mut *conn, row.owner_id, &page::addresses(&page.docs), &[])?
        };
        writer.write(&page::retag_operations(target, &page.docs, &tags))?;
        touched += page.docs.len() as u64;
        if page.docs.len() < cfg.projection_page_size {
            break;
        }
        cursor = Some(next);
    }
    Ok(touched)
}

/// Makes everything written to `target` visible to searches.
pub fn refresh(app: &App, target: &AssetIndices) -> Result<(), RebuildError> {
    let path = format!(
        "/{}/_refresh",
        index::encode_path(&format!("{},{}", target.global, target.user))
    );
    app.es.request("POST", &path, None)?.ok()?;
    Ok(())
}
