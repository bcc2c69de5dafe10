//! A cap on the long-lived requests one caller may hold open at once — SSE streams (a legacy
//! session's confirmation stream waits up to the confirmation's TTL), REST long polls, and
//! permission prompts waiting for a person — so one caller cannot tie up the gateway's
//! connections and tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use elicitation_store::Caller;

/// The open streams per caller, and the cap (clones share both).
#[derive(Debug, Clone)]
pub struct StreamSlots {
    max_per_caller: usize,
    open: Arc<Mutex<HashMap<Caller, usize>>>,
}

impl StreamSlots {
    /// At most `max_per_caller` streams per caller.
    pub fn new(max_per_caller: usize) -> Self {
        StreamSlots {
            max_per_caller,
            open: Arc::default(),
        }
    }

    /// A slot for one more stream of `caller`, or `None` at the cap.
    pub fn try_open(&self, caller: &Caller) -> Option<StreamSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(caller.clone()).or_insert(0);
        if *count >= self.max_per_caller {
            return None;
        }
        *count += 1;
        Some(StreamSlot {
            caller: caller.clone(),
            open: self.open.clone(),
        })
    }

    /// The cap per caller.
    pub fn max_per_caller(&self) -> usize {
        self.max_per_caller
    }

    /// Streams open now, of all callers.
    pub fn open_total(&self) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.values().sum()
    }

    /// Streams `caller` holds open now.
    pub fn open_for(&self, caller: &Caller) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(caller).copied().unwrap_or(0)
    }
}

/// One open stream; the slot frees when this drops.
#[derive(Debug)]
pub struct StreamSlot {
    caller: Caller,
    open: Arc<Mutex<HashMap<Caller, usize>>>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_at_the_cap_gets_no_slot_until_one_frees_and_others_are_unaffected() {
        let slots = StreamSlots::new(2);
        let alice = Caller::new("alice", None).expect("valid");
        let bob = Caller::new("bob", None).expect("valid");
        let first = slots.try_open(&alice);
        let second = slots.try_open(&alice);
        assert!(first.is_some() && second.is_some());
        assert!(slots.try_open(&alice).is_none(), "the third is refused");
        assert!(
            slots.try_open(&bob).is_some(),
            "another caller has their own"
        );
        drop(first);
        assert_eq!(slots.open_for(&alice), 1);
        assert!(slots.try_open(&alice).is_some(), "a freed slot is reusable");
    }
}
