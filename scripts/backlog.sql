-- The asset publication backlog (README "Observability"): every outbox row not yet
-- published, oldest due first, as an aligned table, then a summary as key=value lines.
--
-- Standalone:  psql -X -v ON_ERROR_STOP=1 -q -d "$SCANSTORE_DATABASE_URL" -f scripts/backlog.sql
-- Dispatcher:  scripts/scanstore-admin backlog   (runs this file)
--
-- Read-only; takes no row locks, so it is safe to run while workers publish.
--
-- Columns beyond the seed's: id (for `scanstore-admin outbox retry ID`), kind
-- ('execution' rows have an execution_id, 'tags' rows a tag_scope, 'close' rows the
-- closing_execution_id whose unseen endpoints they close, 'delete' rows the tombstone_id
-- whose documents they delete, 'expire' rows the expire_before limit of retention's
-- asset_days, 'forget' rows the forget_task_id of a deleted task), available_at (when the
-- row is next due; in the future while it backs off) and last_error_class ('permanent' rows
-- wait at the longest backoff until an operator fixes the cause and retries them).

\set QUIET on
\pset null ''

SELECT id,
       kind,
       execution_id,
       tag_scope,
       closing_execution_id,
       tombstone_id,
       expire_before,
       forget_task_id,
       phase,
       processed_endpoints,
       attempts,
       claim_token,
       lease_expires_at,
       available_at,
       last_error_class,
       last_error,
       NOW() - created_at AS age
  FROM scan_projection_outbox
 WHERE processed_at IS NULL
 ORDER BY available_at, execution_id, id;

-- Summary. published_last_hour counts rows whose publication finished in the last hour.
-- Both parts read only what they count, so the outbox's processed history costs nothing:
-- the unprocessed rows through the claim index's predicate, the last hour's through
-- scan_projection_outbox_processed_idx.
\pset tuples_only on
\pset format unaligned
SELECT format('backlog_rows=%s', count(*))
       || E'\n' || format('oldest_age_seconds=%s',
              coalesce(floor(extract(epoch FROM NOW() - min(created_at)))::bigint, 0))
       || E'\n' || format('leased_rows=%s', count(*) FILTER (WHERE lease_expires_at > NOW()))
       || E'\n' || format('permanent_error_rows=%s',
              count(*) FILTER (WHERE last_error_class = 'permanent'))
       || E'\n' || format('published_last_hour=%s',
              (SELECT count(*) FROM scan_projection_outbox
                WHERE processed_at >= NOW() - interval '1 hour'))
       || E'\n' || format('backlog_by_kind=execution:%s,tags:%s,close:%s,delete:%s,expire:%s,forget:%s',
              count(*) FILTER (WHERE kind = 'execution'),
              count(*) FILTER (WHERE kind = 'tags'),
              count(*) FILTER (WHERE kind = 'close'),
              count(*) FILTER (WHERE kind = 'delete'),
              count(*) FILTER (WHERE kind = 'expire'),
              count(*) FILTER (WHERE kind = 'forget'))
  FROM scan_projection_outbox
 WHERE processed_at IS NULL;
