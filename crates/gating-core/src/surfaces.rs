//! Who holds calls and where people answer, as the texts of held calls and refusals name
//! them. A service embedding the gate names itself and its own surfaces; the defaults name
//! no surface at all ([`Surfaces::default`]), and the gateway names its own
//! ([`Surfaces::gateway`]).

/// The names the gate's texts use for whoever holds calls and the places people act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Surfaces {
    /// Who decides, in a sentence ("the gateway"; by default "this service").
    pub name: String,
    /// Where a person answers a held call, after "on" or "with" ("the gateway's approvals
    /// page, or with {"confirmed": true} through its REST API"); `None`: not named.
    pub answer_at: Option<String>,
    /// Where a person reviews a held call's arguments in full when they are too long for
    /// its message; `None`: not named.
    pub pending_at: Option<String>,
    /// Where a tool whose definition changed waits for review; `None`: not named.
    pub review_at: Option<String>,
    /// Where a person connects their own account at a module; `None`: not named.
    pub accounts_at: Option<String>,
}

impl Default for Surfaces {
    /// Neutral texts: "this service", and no surface named.
    fn default() -> Self {
        Surfaces {
            name: "this service".into(),
            answer_at: None,
            pending_at: None,
            review_at: None,
            accounts_at: None,
        }
    }
}

impl Surfaces {
    /// The gateway's own: its approvals page and REST API.
    pub fn gateway() -> Surfaces {
        Surfaces {
            name: "the gateway".into(),
            answer_at: Some(
                "on the gateway's approvals page, or with {\"confirmed\": true} through its REST API"
                    .into(),
            ),
            pending_at: Some(
                "the gateway's list of pending confirmations (GET /v1/mcp/elicitations)".into(),
            ),
            review_at: Some("GET /v1/catalog/changes".into()),
            accounts_at: Some("the gateway's approvals page (Accounts)".into()),
        }
    }

    /// [`Surfaces::name`] at the start of a sentence.
    pub fn name_capitalized(&self) -> String {
        let mut chars = self.name.chars();
        match chars.next() {
            Some(first) => first.to_uppercase().chain(chars).collect(),
            None => String::new(),
        }
    }
}
