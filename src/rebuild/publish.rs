//! Re-publication into a chosen asset version, with exactly the pieces live publication
//! uses (`projection::page`: the same page reads, merge script, document ids and tag
//! updates) — only the target differs. Every bulk is verified item by item. No database
//! connection is held across Elasticsearch I/O.

use crate::es::index::Indices;
use serde_json::Value;
use uuid::Uuid;

use crate::app::App;
use crate::db::Stage;
use crate::es::alias::AssetIndices;
use crate::es::bulk::BulkOp;
use crate::es::index;
use crate::es::writer::Writer;
use crate::es::EsError;
use crate::projection::close::CloseRun;
use crate::projection::missed::Missed;
use crate::projection::{page, worker::OUTBOX_BACKOFF};
use crate::tags;
use crate::tombstones;

use super::source::{ExecutionRow, TagRow};
use super::RebuildError;

/// Attempts per bulk request: a rebuild is interactive, so transient trouble is retried a
/// few times before the command fails (and is simply run again).
const ATTEMPTS: u32 = 5;

fn writer<'a>(app: &'a App, trace_id: &'a str) -> Writer<'a> {
    app.writer(ATTEMPTS, OUTBOX_BACKOFF, trace_id)
}

/// Publishes every endpoint of one execution into `target`, page by page from the
/// execution projection; returns the number of endpoints.
pub fn execution(
    app: &App,
    target: &AssetIndices,
    row: &ExecutionRow,
) -> Result<u64, RebuildError> {
    let source = index::execution_endpoints(&app.config.elasticsearch.index_prefix);
    let trace_id = format!("rebuild-v{}-execution-{}", target.version, row.execution_id);
    let filter = page::execution_filter(row.execution_id);
    each_page(
        app,
        &trace_id,
        &source,
        &filter,
        Some(row.owner_id),
        |docs, found| {
            let mut ops =
                page::execution_operations(target, row.owner_id, docs, &found.tags, &found.deleted);
            let prefix = &app.config.elasticsearch.index_prefix;
            ops.extend(
                found
                    .missed
                    .operations(&app.es, prefix, target, row.owner_id, docs)?,
            );
            Ok(ops)
        },
    )
}

/// Replays one close run into `target` (what a `close` outbox row does live); returns the
/// documents it read. The documents are made visible first, so every one published so far
/// is a candidate.
pub fn close_run(
    app: &App,
    target: &AssetIndices,
    row: &ExecutionRow,
) -> Result<u64, RebuildError> {
    let Some(run) = CloseRun::load(&app.db, row.execution_id)? else {
        return Ok(0);
    };
    refresh(app, target)?;
    let trace_id = format!("rebuild-v{}-close-{}", target.version, row.execution_id);
    let prefix = &app.config.elasticsearch.index_prefix;
    each_page(
        app,
        &trace_id,
        &target.user,
        &run.filter(row.owner_id),
        None,
        |docs, _| {
            Ok(run
                .operations(&app.es, prefix, target, row.owner_id, docs)?
                .0)
        },
    )
}

/// Re-applies the owner's current tags to the documents of `target` within one tag
/// change's scope (what a `tags` outbox row does live); returns the documents touched.
/// The documents are made visible first, so every one published so far is in scope.
pub fn tag_change(app: &App, target: &AssetIndices, row: &TagRow) -> Result<u64, RebuildError> {
    let Some(filter) = page::tag_scope_filter(row.owner_id, &row.scope) else {
        return Ok(0);
    };
    refresh(app, target)?;
    let trace_id = format!("rebuild-v{}-tags-{}", target.version, row.outbox_id);
    each_page(
        app,
        &trace_id,
        &target.user,
        &filter,
        Some(row.owner_id),
        |docs, found| Ok(page::retag_operations(target, docs, &found.tags)),
    )
}

/// What a page's owner has on record for it: its tags, its deletions (per document, see
/// [`tombstones::covering`]) and the close runs its observations may have missed (see
/// [`Missed`]).
#[derive(Default)]
struct Found {
    tags: tags::Tags,
    deleted: Vec<Option<String>>,
    missed: Missed,
}

/// Reads `source` page by page under `filter`, looks up what the owner has on record for
/// each page (with an owner whose records the operations need) and writes the operations
/// `ops` makes of it; returns the documents read.
fn each_page(
    app: &App,
    trace_id: &str,
    source: &str,
    filter: &Value,
    records_of: Option<Uuid>,
    ops: impl Fn(&[page::Doc<'_>], &Found) -> Result<Vec<BulkOp>, EsError>,
) -> Result<u64, RebuildError> {
    let page_size = app.config.projection.page_size;
    let writer = writer(app, trace_id);
    let mut cursor: Option<String> = None;
    let mut documents = 0;
    loop {
        let fetched = page::read(
            &app.es,
            source,
            filter.clone(),
            cursor.as_deref(),
            page_size,
        )?;
        let page = fetched.page()?;
        let Some(next) = page.cursor.clone() else {
            break;
        };
        let found = match records_of {
            Some(owner_id) => {
                let mut conn = app.db.checkout(Stage::Rebuild)?;
                let deleted =
                    tombstones::covering(&mut conn, owner_id, &page::endpoints(&page.docs))?;
                Found {
                    tags: tags::lookup(&mut conn, owner_id, &page::addresses(&page.docs), &[])?,
                    missed: Missed::lookup(&mut conn, owner_id, &page.docs, &deleted)?,
                    deleted,
                }
            }
            None => Found::default(),
        };
        writer.write(&ops(&page.docs, &found)?)?;
        documents += page.docs.len() as u64;
        if page.docs.len() < page_size {
            break;
        }
        cursor = Some(next);
    }
    Ok(documents)
}

/// Makes everything written to `target` visible to searches.
pub fn refresh(app: &App, target: &AssetIndices) -> Result<(), RebuildError> {
    app.es
        .refresh(&Indices::of(&[&target.global, &target.user]))?;
    Ok(())
}
