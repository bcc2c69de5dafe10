//! A bound on the request bodies being received at once, per sender and in all.
//!
//! A body is read whole before its request is served, and a client that sends all of a
//! large body but its last byte holds that memory — and its connection — for the whole read
//! timeout. `body_limit` bounds one body; this bounds how many bytes one sender (a caller, or
//! an address not yet authenticated) and the whole gateway hold while bodies arrive, and how
//! many bodies one sender may be sending at once ([`MAX_BODIES_PER_SENDER`]: a client that
//! trickles bodies a byte at a time holds that many connections, not all of them). A body
//! is refused, with a retry, when it would take its sender or the gateway past its share.
//!
//! Only bodies that have to be waited for are counted: one whose announced length had all
//! arrived when it is first read is taken at once and holds nothing while it arrives (a
//! chunked body is always counted; `McpService::read_body`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use elicitation_store::Caller;

/// Most bodies one sender may be sending at once.
pub const MAX_BODIES_PER_SENDER: usize = 16;

/// Whose share a body counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sender {
    /// An authenticated caller.
    Caller(Caller),
    /// Someone not authenticated before their body is read (the approvals page's forms and
    /// sign-ins, Slack's callbacks), by the address they connect from (an IPv6 address by
    /// its /64, which one host may hold whole); `None` where it is not known (one share).
    Anonymous(Option<IpAddr>),
}

impl Sender {
    /// The anonymous sender connecting from `address`.
    pub fn anonymous(address: Option<IpAddr>) -> Sender {
        Sender::Anonymous(address.map(|address| match address {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::V6(octets.into())
            }
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            IpAddr::V4(_) => address,
        }))
    }
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
    /// Bytes and bodies of each sender with a body arriving.
    by_sender: HashMap<Sender, (usize, usize)>,
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

    /// An empty reservation for one body of `sender`, grown as its bytes arrive; refused
    /// when the sender is sending [`MAX_BODIES_PER_SENDER`] bodies already.
    pub fn reserve(&self, sender: Sender) -> Result<BodyBytes, Over> {
        {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            let mine = held.by_sender.entry(sender.clone()).or_insert((0, 0));
            if mine.1 >= MAX_BODIES_PER_SENDER {
                return Err(Over::Sender);
            }
            mine.1 += 1;
        }
        Ok(BodyBytes {
            sender,
            bytes: 0,
            held: self.held.clone(),
            per_sender: self.per_sender,
            total: self.total,
        })
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
        let Held { total, by_sender } = &mut *held;
        // The sender's entry is there from `reserve` until its last body drops.
        let Some(mine) = by_sender.get_mut(&self.sender) else {
            return Err(Over::Sender);
        };
        if mine.0.saturating_add(more) > self.per_sender {
            return Err(Over::Sender);
        }
        if total.saturating_add(more) > self.total {
            return Err(Over::Total);
        }
        *total += more;
        mine.0 += more;
        self.bytes += more;
        Ok(())
    }
}

impl Drop for BodyBytes {
    fn drop(&mut self) {
        // The sender moved out, so that its entry is found once, whether it stays or goes.
        let sender = std::mem::replace(&mut self.sender, Sender::Anonymous(None));
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.total = held.total.saturating_sub(self.bytes);
        if let Entry::Occupied(mut mine) = held.by_sender.entry(sender) {
            let (bytes, bodies) = mine.get_mut();
            *bytes = bytes.saturating_sub(self.bytes);
            *bodies = bodies.saturating_sub(1);
            if *bodies == 0 {
                mine.remove();
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
        let mut a1 = budget.reserve(alice.clone()).unwrap();
        let mut a2 = budget.reserve(alice.clone()).unwrap();
        assert_eq!(a1.grow(6), Ok(()));
        assert_eq!(a2.grow(5), Err(Over::Sender), "alice's share is 10");
        assert_eq!(a2.grow(4), Ok(()));
        let mut b = budget.reserve(bob.clone()).unwrap();
        assert_eq!(b.grow(6), Err(Over::Total), "10 of 15 held");
        assert_eq!(b.grow(5), Ok(()));
        assert_eq!(budget.held(), 15);
        drop(a1);
        assert_eq!(budget.held(), 9, "a body's bytes come back when it ends");
        let mut anonymous = budget.reserve(Sender::anonymous(None)).unwrap();
        assert_eq!(anonymous.grow(6), Ok(()));
        drop((a2, b, anonymous));
        assert_eq!(budget.held(), 0);
        assert!(budget.held.lock().unwrap().by_sender.is_empty());
    }

    /// A client trickling bodies a byte at a time holds connections, not bytes: it may be
    /// sending so many bodies at once, and others are unaffected.
    #[test]
    fn a_sender_sends_at_most_so_many_bodies_at_once() {
        let budget = BodyBudget::new(1 << 20, 1 << 20);
        let here = Sender::anonymous(Some("192.0.2.7".parse().unwrap()));
        let mut bodies: Vec<BodyBytes> = (0..MAX_BODIES_PER_SENDER)
            .map(|_| budget.reserve(here.clone()).unwrap())
            .collect();
        assert_eq!(budget.reserve(here.clone()).err(), Some(Over::Sender));
        let there = Sender::anonymous(Some("192.0.2.8".parse().unwrap()));
        assert!(budget.reserve(there).is_ok(), "another address has its own");
        bodies.pop();
        assert!(budget.reserve(here).is_ok(), "a body that ended makes room");
        // One IPv6 host holds a /64: it is one sender.
        let a = Sender::anonymous(Some("2001:db8::1".parse().unwrap()));
        let b = Sender::anonymous(Some("2001:db8::ffff:1".parse().unwrap()));
        assert_eq!(a, b);
        let mapped = Sender::anonymous(Some("::ffff:192.0.2.7".parse().unwrap()));
        assert_eq!(
            mapped,
            Sender::anonymous(Some("192.0.2.7".parse().unwrap()))
        );
    }
}
