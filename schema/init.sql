-- placeholder until the schema branch lands
CREATE TABLE schema_marker (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE owners (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), name text UNIQUE NOT NULL);
INSERT INTO schema_marker(name) VALUES ('scan_projection_v2'), ('scan_upload_stream_backfill'), ('search_target_ip');
