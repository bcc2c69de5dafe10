//! What TLS to PostgreSQL is checked against, for the store and for migrating.

/// What TLS to the database is checked against: rustls' client configuration (feature
/// `tls`); without the feature, nothing can be given.
#[cfg(feature = "tls")]
pub type TlsRoots = std::sync::Arc<rustls::ClientConfig>;
/// What TLS to the database is checked against: without feature `tls`, nothing can be given.
#[cfg(not(feature = "tls"))]
pub type TlsRoots = std::convert::Infallible;
