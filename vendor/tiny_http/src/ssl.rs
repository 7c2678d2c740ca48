//! The TLS implementation: rustls (scanstore patch: the OpenSSL one is not kept in this
//! copy). The module adheres to an implicit contract and is re-exported as
//! [`SslContextImpl`] and [`SslStream`].

pub(crate) mod rustls;
pub(crate) use self::rustls::RustlsContext as SslContextImpl;
pub(crate) use self::rustls::RustlsStream as SslStream;
