//! What one delivery attempt came to.

/// How one delivery to one sink went.
#[derive(Debug)]
pub enum Delivery {
    /// The receiver has it.
    Delivered,
    /// Worth trying again (a timeout, a connection failure, `408`, `429`, a `5xx`).
    Retry(String),
    /// Not worth trying again (another `4xx`): given up for this sink.
    Refused(String),
}
