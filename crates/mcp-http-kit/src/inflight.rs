//! A bound on the bytes of request bodies being received at once, per sender and in all.
//!
//! A body is read whole before its request is served, and a client that sends all of a
//! large body but its last byte holds that memory for the whole read timeout. `body_limit`
//! bounds one body; this bounds how many such bodies one caller (or the unauthenticated
//! surfaces together) and the whole gateway hold while they arrive: a body is refused, with
//! a retry, when it would take its sender or the gateway past its share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use elicitation_store::Caller;

/// Whose share a body counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sender {
    /// An authenticated caller.
    Caller(Caller),
    /// Everyone not authenticated before their body is read (the approvals page's forms and
    /// sign-ins, Slack's callbacks): one share together.
    Anonymous,
}

/// Which bound a body would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// Its sender's share.
    Sender,
    /// The gateway's, all senders together.
    Total,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_sender: HashMap<Sender, usize>,
}

/// The bytes in flight (clones share them).
#[derive(Debug, Clone)]
pub struct BodyBudget {
    per_sender: usize,
    total: usize,
    held: Arc<Mutex<Held>>,
}

impl BodyBudget {
    /// At most `per_sender` bytes of one sender's bodies and `total` of all at once.
    pub fn new(per_sender: usize, total: usize) -> Self {
        BodyBudget {
            per_sender,
            total,
            held: Arc::default(),
        }
    }

    /// An empty reservation for one body of `sender`, grown as its bytes arrive.
    pub fn reserve(&self, sender: Sender) -> BodyBytes {
        BodyBytes {
            sender,
            bytes: 0,
            held: self.held.clone(),
            per_sender: self.per_sender,
            total: self.total,
        }
    }

    /// Bytes held now, of all senders.
    pub fn held(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

/// One body's bytes so far; they are given back when this drops.
#[derive(Debug)]
pub struct BodyBytes {
    sender: Sender,
    bytes: usize,
    held: Arc<Mutex<Held>>,
    per_sender: usize,
    total: usize,
}

impl BodyBytes {
    /// Counts `more` bytes of this body, or says which bound they would pass (and counts
    /// nothing).
    pub fn grow(&mut self, more: usize) -> Result<(), Over> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = held.by_sender.get(&self.sender).copied().unwrap_or(0);
        if mine.saturating_add(more) > self.per_sender {
            return Err(Over::Sender);
        }
        if held.total.saturating_add(more) > self.total {
            return Err(Over::Total);
        }
        held.total += more;
        *held.by_sender.entry(self.sender.clone()).or_insert(0) += more;
        self.bytes += more;
        Ok(())
    }
}

impl Drop for BodyBytes {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.total = held.total.saturating_sub(self.bytes);
        if let Some(mine) = held.by_sender.get_mut(&self.sender) {
            *mine = mine.saturating_sub(self.bytes);
            if *mine == 0 {
                held.by_sender.remove(&self.sender);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_is_held_to_its_share_and_everyone_to_the_total_until_bodies_end() {
        let budget = BodyBudget::new(10, 15);
        let alice = Sender::Caller(Caller::new("alice", None).expect("valid"));
        let bob = Sender::Caller(Caller::new("bob", None).expect("valid"));
        let mut a1 = budget.reserve(alice.clone());
        let mut a2 = budget.reserve(alice.clone());
        assert_eq!(a1.grow(6), Ok(()));
        assert_eq!(a2.grow(5), Err(Over::Sender), "alice's share is 10");
        assert_eq!(a2.grow(4), Ok(()));
        let mut b = budget.reserve(bob.clone());
        assert_eq!(b.grow(6), Err(Over::Total), "10 of 15 held");
        assert_eq!(b.grow(5), Ok(()));
        assert_eq!(budget.held(), 15);
        drop(a1);
        assert_eq!(budget.held(), 9, "a body's bytes come back when it ends");
        let mut anonymous = budget.reserve(Sender::Anonymous);
        assert_eq!(anonymous.grow(6), Ok(()));
        drop((a2, b, anonymous));
        assert_eq!(budget.held(), 0);
        assert!(budget.held.lock().unwrap().by_sender.is_empty());
    }
}
