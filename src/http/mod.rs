//! HTTP: a fixed pool of blocking worker threads over tiny_http ([`server`]), a socket-free
//! request/reply model ([`request`]), routing ([`router`]), the one error-to-status map
//! ([`error`]) and the probes ([`health`]), the server's own TLS ([`tls`]), its load now
//! ([`load`]), the embedded web console and OpenAPI description ([`console`]).

pub mod console;
pub mod error;
pub mod health;
pub mod load;
pub mod request;
pub mod router;
pub mod server;
mod spare;
pub mod tls;

pub use error::ApiError;
pub use request::{Reply, Req};
