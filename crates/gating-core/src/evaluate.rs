//! The seed's truth table: whether a call proceeds, waits for a person, or is refused.

/// The gate's verdict for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmationOutcome {
    /// Forward the call.
    Proceed,
    /// Hold the call until a person confirms it.
    NeedsConfirmation,
    /// The person declined: answer with the user-rejected result, never forward.
    Declined,
}

/// Decides a call from whether it is gated (`destructive`) and the state of its
/// confirmation: `Some(true)` approved, `Some(false)` declined, `None` none usable.
pub const fn evaluate(destructive: bool, confirmed: Option<bool>) -> ConfirmationOutcome {
    match (destructive, confirmed) {
        (false, _) => ConfirmationOutcome::Proceed,
        (true, None) => ConfirmationOutcome::NeedsConfirmation,
        (true, Some(true)) => ConfirmationOutcome::Proceed,
        (true, Some(false)) => ConfirmationOutcome::Declined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_destructive_always_proceeds() {
        for confirmed in [None, Some(true), Some(false)] {
            assert_eq!(
                evaluate(false, confirmed),
                ConfirmationOutcome::Proceed,
                "{confirmed:?}"
            );
        }
    }

    #[test]
    fn destructive_holds_then_proceeds_or_declines() {
        assert_eq!(evaluate(true, None), ConfirmationOutcome::NeedsConfirmation);
        assert_eq!(evaluate(true, Some(true)), ConfirmationOutcome::Proceed);
        assert_eq!(evaluate(true, Some(false)), ConfirmationOutcome::Declined);
    }
}
