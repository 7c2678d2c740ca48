//! `scanstore-es-emulator`: a strict, in-memory, Elasticsearch 8.x-like HTTP server for
//! scanstore's tests, benchmarks and local development, with fault injection under
//! `/_emulator/…`, as a library (the binary is `main.rs`; tests use its types). See
//! README.md beside this crate for the API subset and its limits.

mod aggs;
mod aliases;
mod analysis;
pub mod app;
pub mod bench;
mod bulk;
mod bulk_parse;
mod chunked;
mod cluster;
mod composite;
pub mod congestion;
mod date_histogram;
mod doc_api;
mod doc_check;
mod doc_map;
mod docs;
mod error;
mod extract;
pub mod faults;
mod fielddata;
mod filter_path;
mod http;
mod index_view;
mod indices;
mod mapping;
mod mapping_params;
pub mod memory;
#[cfg(test)]
mod multi_shard;
pub mod painless;
mod params;
mod points;
mod postings;
mod query;
mod query_exec;
mod ranked;
pub mod reqlog;
mod resolve;
mod router;
mod routing;
mod search;
mod server;
mod settings;
mod settings_update;
mod sharded;
mod sockets;
mod sort;
mod source_filter;
mod store;
mod strict;
mod terms;
mod update;
mod values;
mod walk;

use std::net::SocketAddr;
use std::sync::Arc;

use scanstore::http::tls::{ServerTls, TlsFiles};

use crate::app::{App, Limits};

/// A running emulator: its address and the server handle (dropping it stops listening).
pub struct Running {
    pub addr: SocketAddr,
    pub server: Arc<tiny_http::Server>,
    pub app: Arc<App>,
}

pub fn start(
    listen: SocketAddr,
    threads: usize,
    limits: Limits,
    id_field_data: bool,
    required_authorization: Option<String>,
    tls: Option<&TlsFiles>,
    congestion: &str,
) -> Result<Running, String> {
    if !listen.ip().is_loopback() {
        return Err(format!(
            "--listen must be a loopback address (got {listen}); the emulator is a test tool"
        ));
    }
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    congestion::set(&listener, congestion).map_err(|e| {
        format!(
            "TCP congestion control {congestion:?}: {e} (`--tcp-congestion system`: the host's)"
        )
    })?;
    let server = match tls {
        Some(files) => {
            let tls = ServerTls::new(files.clone())?;
            tiny_http::Server::from_listener_with_tls(listener, tls.config(), Default::default())
        }
        None => tiny_http::Server::from_listener(listener, None),
    }
    .map_err(|e| format!("cannot serve on {listen}: {e}"))?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| "listener has no IP address".to_owned())?;
    let server = Arc::new(server);
    let app = App::new(limits, id_field_data, required_authorization);
    App::spawn_refresher(&app);
    server::spawn_workers(&app, &server, threads.max(1));
    Ok(Running { addr, server, app })
}
