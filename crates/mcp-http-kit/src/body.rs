//! The service's response body type, and a body fed from a channel: the SSE stream of a
//! `tools/call` that asks the person mid-call. When the client goes away, hyper drops the
//! body and with it the receiver, so the sender learns the client is gone.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use tokio::sync::mpsc;

/// The response body type of the service.
pub type Body = BoxBody<Bytes, Infallible>;

/// A body of these bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// The body; its sender is held by the task that writes events.
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    /// A body and the sender that feeds it.
    pub fn new(buffer: usize) -> (mpsc::Sender<Bytes>, ChannelBody) {
        let (tx, rx) = mpsc::channel(buffer);
        (tx, ChannelBody { rx })
    }
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}
