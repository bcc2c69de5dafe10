//! Fuzz targets for what the HTTP layer reads from callers (docs/reliability.md): sealed
//! tokens (2025-era session ids and 2026-07-28 `requestState`s) and the REST API's bodies
//! and query. Each must not panic and asserts its invariants. Run by the stable engine in
//! this crate's tests (`mcp-fuzz`) and, with the `fuzzing` feature, by cargo-fuzz (`fuzz/`).

use std::time::Duration;

use elicitation_store::Caller;
use time::OffsetDateTime;

use crate::answers::ClientAnswers;
use crate::sessions::Sessions;
use crate::state::{RequestStates, StateClaims, StateError};

/// `token` changed as `data` says: `(position, xor mask)` pairs, then an odd last byte
/// appended as a character (or, if `data` is empty, the token cut by one).
fn tamper(token: &str, data: &[u8]) -> String {
    let mut bytes = token.as_bytes().to_vec();
    if data.is_empty() {
        bytes.pop();
    }
    for pair in data.chunks(2) {
        match pair {
            [at, mask] if !bytes.is_empty() => {
                let i = usize::from(*at) % bytes.len();
                bytes[i] ^= mask;
            }
            [extra] => bytes.push(*extra),
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Sealed tokens: a session id or a `requestState` opens only exactly as it was issued, for
/// its own caller — any change to its text (or any other text) is refused, so neither can
/// be forged, moved to another caller, or replayed under a different spelling.
pub fn sealed_tokens(data: &[u8]) {
    let alice = Caller::new("alice", Some("acme".into())).expect("a caller");
    let bob = Caller::new("bob", Some("acme".into())).expect("a caller");
    let key = [7u8; 32];
    let hour = Duration::from_secs(3600);

    // Session ids.
    let here = Sessions::new(hour, hour, 16, &[key]);
    let id = here
        .create(&alice, None, "2025-11-25", ClientAnswers::default())
        .expect("a session id");
    let elsewhere = Sessions::new(hour, hour, 16, &[key]);
    assert!(
        elsewhere.touch(&id, &alice, None).is_ok(),
        "a sealed id opens"
    );
    assert!(
        elsewhere.touch(&id, &bob, None).is_err(),
        "another caller's id"
    );
    for candidate in [
        tamper(&id, data),
        String::from_utf8_lossy(data).into_owned(),
    ] {
        if candidate != id {
            let fresh = Sessions::new(hour, hour, 16, &[key]);
            assert!(
                fresh.touch(&candidate, &alice, None).is_err(),
                "a changed session id opened: {candidate:?} (issued {id:?})"
            );
        }
    }

    // requestStates.
    let states = RequestStates::new(key);
    let now = OffsetDateTime::now_utc();
    let claims = StateClaims {
        sub: "alice".into(),
        ten: Some("acme".into()),
        tool: "fs__delete".into(),
        dig: "00".repeat(32),
        eid: "0193b0a4-5d6e-7f00-8a1b-2c3d4e5f6a7b".into(),
        exp: now.unix_timestamp() + 600,
        url: data.first().is_some_and(|b| b % 2 == 1),
        round: data.get(1).copied().unwrap_or(0) % 4,
    };
    let token = states.seal(&claims).expect("a state seals");
    let opened = states.open(&token, now).expect("a sealed state opens");
    assert_eq!(opened.claims, claims, "a state changed in a round trip");
    for candidate in [
        tamper(&token, data),
        String::from_utf8_lossy(data).into_owned(),
    ] {
        if candidate != token {
            assert_eq!(
                states.open(&candidate, now).err(),
                Some(StateError::Invalid),
                "a changed requestState opened: {candidate:?} (issued {token:?})"
            );
        }
    }
}

/// The REST API's bodies and query: `POST /v1/mcp/elicitations`, the cancel body and
/// `?wait=`. Each either reads or says why not; a body read is a valid elicitation, and
/// reads back the same after it is written.
pub fn rest_bodies(data: &[u8]) {
    if let Ok((spec, ttl)) = crate::rest::create_body(data) {
        assert!(
            spec.response().check().is_ok(),
            "an invalid spec was accepted"
        );
        assert!(ttl.is_positive(), "a ttl that is not positive was accepted");
        let written = serde_json::json!({
            "message": spec.message(),
            "response": spec.response(),
            "ttl_seconds": ttl.whole_seconds(),
        });
        let again = crate::rest::create_body(written.to_string().as_bytes())
            .expect("a body the gateway accepted reads again when written");
        assert_eq!(again, (spec, ttl), "a create body changed in a round trip");
    }
    let _ = crate::rest::cancel_reason(data);
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(Some(wait)) = crate::rest::wait_query(Some(text))
    {
        assert!(wait <= Duration::from_secs(60), "a wait past the longest");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fuzz_sealed_tokens() {
        mcp_fuzz::explore("sealed_tokens", super::sealed_tokens);
    }

    #[test]
    fn fuzz_rest_bodies() {
        mcp_fuzz::explore("rest_bodies", super::rest_bodies);
    }
}
