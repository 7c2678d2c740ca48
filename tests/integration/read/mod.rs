//! Reading it back, run with `cargo test --test integration read:: --
//! --include-ignored`: tasks, executions with projection status, results by IP, assets and
//! search, owner isolation, validation, the OpenAPI description and the browser console.

mod api;
mod browser;
mod cdp;
mod isolation;
mod openapi;
mod paging;
mod text_search;
