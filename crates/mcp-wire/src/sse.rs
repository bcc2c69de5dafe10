//! Server-sent events: framing what we send and parsing what modules send. Strict and
//! bounded: an event over the size limit is an error, not unbounded memory.

use bytes::Bytes;

/// Largest event accepted from a module.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One `message` event carrying `data` (a JSON text).
pub fn event(data: &str) -> Bytes {
    event_bytes(data.as_bytes())
}

/// Like [`event`], for a serialised JSON message: one `data:` line. CR and LF bytes (in JSON
/// text only ever whitespace between tokens) become spaces, so text passed through unparsed
/// (a module's result) cannot end the line or the event and forge another (SSE ends a line
/// at CR as well as LF).
pub fn event_bytes(data: &[u8]) -> Bytes {
    framed(None, data)
}

/// Like [`event_bytes`], with an event `id` (a resumable stream's).
pub fn event_with_id(id: u64, data: &[u8]) -> Bytes {
    framed(Some(id), data)
}

/// The priming event of a resumable stream: its `id` (the last event's, from which a
/// reconnecting client resumes), the reconnection delay `retry_ms`, and empty data.
pub fn priming(id: u64, retry_ms: u64) -> Bytes {
    Bytes::from(format!("id: {id}\nretry: {retry_ms}\ndata: \n\n"))
}

fn framed(id: Option<u64>, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + 48);
    if let Some(id) = id {
        out.extend_from_slice(format!("id: {id}\n").as_bytes());
    }
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend(data.iter().map(|b| match b {
        b'\n' | b'\r' => b' ',
        other => *other,
    }));
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A comment line, used as a keep-alive.
pub fn comment(text: &str) -> Bytes {
    Bytes::from(format!(": {text}\n\n"))
}

/// An event that grew past [`MAX_EVENT_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an SSE event is larger than {MAX_EVENT_BYTES} bytes")]
pub struct EventTooLarge;

/// Incremental parser: feed bytes, get the `data` of each complete event.
#[derive(Debug, Default)]
pub struct Parser {
    buffer: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
}

impl Parser {
    /// Adds bytes; returns the data of every event they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, EventTooLarge> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        // Lines are read in place and the buffer is shifted once per feed, so a frame of
        // many short lines costs linear time.
        let mut start = 0;
        while let Some(offset) = self.buffer[start..].iter().position(|b| *b == b'\n') {
            let end = start + offset;
            let mut line = &self.buffer[start..end];
            start = end + 1;
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            if line.is_empty() {
                if self.has_data {
                    events.push(String::from_utf8_lossy(&self.data).into_owned());
                }
                self.data.clear();
                self.has_data = false;
                continue;
            }
            if let Some(rest) = line.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(rest);
                self.has_data = true;
            }
            // Other fields (event, id, retry) and comments are not needed here.
            if self.data.len() > MAX_EVENT_BYTES {
                return Err(EventTooLarge);
            }
        }
        self.buffer.drain(..start);
        if self.buffer.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_of_many_empty_lines_then_an_event_yields_just_the_event() {
        let mut frame = vec![b'\n'; 200_000];
        frame.extend_from_slice(b"data: {\"x\":1}\n\n");
        let mut parser = Parser::default();
        assert_eq!(parser.feed(&frame).unwrap(), vec!["{\"x\":1}".to_owned()]);
        assert!(parser.buffer.is_empty());
    }

    #[test]
    fn events_round_trip_through_the_parser_in_any_chunking() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&comment("keep-alive"));
        wire.extend_from_slice(&event("{\"a\":1}"));
        wire.extend_from_slice(b"id: 7\r\ndata: {\"b\":\r\ndata: 2}\r\n\r\n");
        for chunk in [1, 3, 7, wire.len()] {
            let mut parser = Parser::default();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                got.extend(parser.feed(piece).unwrap());
            }
            assert_eq!(got, ["{\"a\":1}", "{\"b\":\n2}"], "chunk size {chunk}");
        }
    }

    #[test]
    fn passed_through_whitespace_cannot_end_an_event() {
        let forged = b"{\"x\":[0,\r\r\n{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"elicitation/create\"}\r\r\n]}";
        let framed = event_bytes(forged);
        assert!(!framed.contains(&b'\r'));
        assert_eq!(
            framed.iter().filter(|b| **b == b'\n').count(),
            3,
            "event, data, blank"
        );
        let mut parser = Parser::default();
        let events = parser.feed(&framed).unwrap();
        assert_eq!(events.len(), 1);
        let value: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
        assert_eq!(
            value["x"][1]["method"], "elicitation/create",
            "still data, inside the one event"
        );
    }

    #[test]
    fn an_endless_event_is_refused() {
        let mut parser = Parser::default();
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(parser.feed(&big), Err(EventTooLarge));
    }
}
