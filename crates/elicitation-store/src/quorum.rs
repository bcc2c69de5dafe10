//! Quorum: a confirmation that several distinct people must approve, optionally one from
//! each of several groups. The approvals counted so far ([`Vote`]s) live on the held call;
//! the call is approved by the vote that completes the quorum, in the same store step that
//! records it, so of any number of concurrent votes on any number of instances exactly one
//! completes it. Any one decline ends it.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use elicitation_core::Caller;

/// The most approvers a rule may require (and so the most votes a held call keeps).
pub const MAX_QUORUM: u8 = 16;

/// The most groups a quorum may require one approver from each of.
pub const MAX_QUORUM_GROUPS: usize = 8;

/// How many people must approve, and from which groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// Distinct approvers required (1: one answer decides, as without a quorum).
    pub approvers: u8,
    /// Further groups, besides the rule's own, each of which must count one approver
    /// ("one from sre and one from security"); a person counts for one group only.
    pub also: Vec<String>,
}

impl Default for Quorum {
    fn default() -> Self {
        Quorum {
            approvers: 1,
            also: Vec::new(),
        }
    }
}

impl Quorum {
    /// Distinct approvers needed: at least one per group.
    pub fn needed(&self) -> usize {
        usize::from(self.approvers.max(1)).max(1 + self.also.len())
    }

    /// Whether more than one approval is needed (then the requester never counts, and the
    /// approval can make neither a grant nor an edit).
    pub fn is_plural(&self) -> bool {
        self.needed() > 1
    }
}

/// One approval counted toward a quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vote {
    /// Who approved (a person counts once, whatever token, issuer path or surface).
    pub subject: String,
    /// Their tenant.
    pub tenant: Option<String>,
    /// The rule's groups they are in (for the "one from each" groups).
    pub groups: Vec<String>,
    /// When.
    pub at: OffsetDateTime,
    /// Who answered, as the surface labels them (`answered_by`).
    pub by: Option<String>,
    /// Whom they answered for, through a delegation (subject and tenant): the two count as
    /// one person.
    pub for_whom: Option<(String, Option<String>)>,
}

impl Vote {
    /// `approver`'s vote on a confirmation answered by `rule_groups`, now.
    pub(crate) fn of<'a>(
        rule_groups: impl Iterator<Item = &'a str>,
        approver: &Caller,
        on_behalf_of: Option<&Caller>,
        groups: &[String],
        at: OffsetDateTime,
        by: Option<&str>,
    ) -> Vote {
        Vote {
            subject: approver.subject_id().to_owned(),
            tenant: approver.tenant_id().map(str::to_owned),
            groups: rule_groups
                .filter(|g| groups.iter().any(|mine| mine == *g))
                .map(str::to_owned)
                .collect(),
            at,
            by: by.map(elicitation_core::answered_by),
            for_whom: on_behalf_of
                .map(|c| (c.subject_id().to_owned(), c.tenant_id().map(str::to_owned))),
        }
    }

    /// Whether this is `who`'s vote (given by them, or for them).
    pub fn is_of(&self, who: &Caller) -> bool {
        self.people()
            .any(|(s, t)| s == who.subject_id() && t == who.tenant_id())
    }

    /// The people this vote stands for: who gave it, and whom it was given for.
    fn people(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        std::iter::once((self.subject.as_str(), self.tenant.as_deref())).chain(
            self.for_whom
                .as_ref()
                .map(|(s, t)| (s.as_str(), t.as_deref())),
        )
    }

    /// Whether this vote and `other` stand for a person in common.
    fn shares_a_person(&self, other: &Vote) -> bool {
        self.people().any(|p| other.people().any(|q| p == q))
    }

    /// The stored form (a JSON object).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "subject": self.subject,
            "tenant": self.tenant,
            "groups": self.groups,
            "at": self.at.format(&Rfc3339).unwrap_or_default(),
            "by": self.by,
            "for": self.for_whom.as_ref().map(|(s, t)| json!({"subject": s, "tenant": t})),
        })
    }

    /// A stored vote (`None` if malformed).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn from_json(value: &Value) -> Option<Vote> {
        Some(Vote {
            subject: value.get("subject")?.as_str()?.to_owned(),
            tenant: value.get("tenant")?.as_str().map(str::to_owned),
            groups: value
                .get("groups")?
                .as_array()?
                .iter()
                .map(|g| g.as_str().map(str::to_owned))
                .collect::<Option<_>>()?,
            at: OffsetDateTime::parse(value.get("at")?.as_str()?, &Rfc3339).ok()?,
            by: value.get("by")?.as_str().map(str::to_owned),
            for_whom: match value.get("for") {
                None | Some(Value::Null) => None,
                Some(whom) => Some((
                    whom.get("subject")?.as_str()?.to_owned(),
                    whom.get("tenant")?.as_str().map(str::to_owned),
                )),
            },
        })
    }
}

/// Whether an answer approves (`confirmed: true`): only approvals are counted toward a
/// quorum; any decline ends the call.
pub(crate) fn approves(payload: &Value) -> bool {
    payload.get("confirmed") == Some(&Value::Bool(true))
}

/// The stored form of `votes` (a JSON array).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn votes_json(votes: &[Vote]) -> Value {
    Value::Array(votes.iter().map(Vote::to_json).collect())
}

/// Stored votes (`None` if any is malformed).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn votes_from_json(value: &Value) -> Option<Vec<Vote>> {
    value.as_array()?.iter().map(Vote::from_json).collect()
}

/// What counting one more approval came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Count {
    /// Not the last: the votes with this one, still pending.
    Counted(Vec<Vote>),
    /// This approval completes the quorum: the votes with it, and the call is approved.
    Complete(Vec<Vote>),
    /// This person approved already; nothing changed.
    Already,
    /// This approval would bring the quorum no nearer: enough people approved, and it
    /// covers no group still waiting for its approver. Not counted (so a crowd of one group
    /// cannot fill the count while the other group is waited for).
    NotNeeded,
}

/// Counts `vote` among `votes` toward `needed` distinct people, one of each of `groups`.
pub(crate) fn count(needed: usize, groups: &[&str], votes: &[Vote], vote: Vote) -> Count {
    if votes.iter().any(|v| v.shares_a_person(&vote)) {
        return Count::Already;
    }
    let before = matched(groups, votes);
    let mut with = votes.to_vec();
    with.push(vote);
    if with.len() > needed && matched(groups, &with) == before {
        return Count::NotNeeded;
    }
    if satisfied(needed, groups, &with) {
        Count::Complete(with)
    } else {
        Count::Counted(with)
    }
}

/// Whether `votes` (of distinct people) are `needed` people and one for each of `groups`,
/// no person counted for two.
pub(crate) fn satisfied(needed: usize, groups: &[&str], votes: &[Vote]) -> bool {
    votes.len() >= needed && matched(groups, votes) == groups.len()
}

/// How many of `groups` can each be given a voter of their own (a maximum matching, by
/// augmenting paths: at most [`MAX_QUORUM_GROUPS`] groups and a few dozen votes).
fn matched(groups: &[&str], votes: &[Vote]) -> usize {
    // For each vote, the group it stands for (an index into `groups`), if any.
    let mut voter_of: Vec<Option<usize>> = vec![None; votes.len()];
    let mut count = 0;
    for g in 0..groups.len() {
        let mut seen = vec![false; votes.len()];
        if augment(g, groups, votes, &mut voter_of, &mut seen) {
            count += 1;
        }
    }
    count
}

/// Finds group `g` a voter, moving others along where that frees one.
fn augment(
    g: usize,
    groups: &[&str],
    votes: &[Vote],
    voter_of: &mut [Option<usize>],
    seen: &mut [bool],
) -> bool {
    for (i, vote) in votes.iter().enumerate() {
        if seen[i] || !vote.groups.iter().any(|mine| mine == groups[g]) {
            continue;
        }
        seen[i] = true;
        let free = match voter_of[i] {
            None => true,
            Some(other) => augment(other, groups, votes, voter_of, seen),
        };
        if free {
            voter_of[i] = Some(g);
            return true;
        }
    }
    false
}

/// Those of `groups` no vote covers yet (for "waiting for one from security").
pub(crate) fn missing_groups<'a>(groups: &[&'a str], votes: &[Vote]) -> Vec<&'a str> {
    groups
        .iter()
        .copied()
        .filter(|g| !votes.iter().any(|v| v.groups.iter().any(|mine| mine == g)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Approval, ApprovalMode};

    fn rule(groups: &[&str], approvers: u8) -> Approval {
        Approval {
            group: groups[0].into(),
            mode: ApprovalMode::FourEyes,
            quorum: Quorum {
                approvers,
                also: groups[1..].iter().map(|g| (*g).into()).collect(),
            },
        }
    }

    fn count(rule: &Approval, votes: &[Vote], vote: Vote) -> Count {
        rule.count(votes, vote)
    }

    fn satisfied(rule: &Approval, votes: &[Vote]) -> bool {
        rule.satisfied(votes)
    }

    fn vote(who: &str, groups: &[&str]) -> Vote {
        Vote {
            subject: who.into(),
            tenant: None,
            groups: groups.iter().map(|g| (*g).into()).collect(),
            at: OffsetDateTime::UNIX_EPOCH,
            by: None,
            for_whom: None,
        }
    }

    #[test]
    fn n_distinct_people_complete_it_and_a_person_counts_once() {
        let two = rule(&["sre"], 2);
        let Count::Counted(one) = count(&two, &[], vote("bob", &["sre"])) else {
            panic!("one of two")
        };
        assert_eq!(count(&two, &one, vote("bob", &["sre"])), Count::Already);
        assert!(matches!(
            count(&two, &one, vote("carol", &["sre"])),
            Count::Complete(v) if v.len() == 2
        ));
        // The same subject of another tenant is another person.
        let mut other = vote("bob", &["sre"]);
        other.tenant = Some("globex".into());
        assert!(matches!(count(&two, &one, other), Count::Complete(_)));
        // Carol answering for bob (his delegate) is bob's eyes again; bob after carol for
        // him, too.
        let for_bob = Vote {
            for_whom: Some(("bob".into(), None)),
            ..vote("carol", &["sre"])
        };
        assert_eq!(count(&two, &one, for_bob.clone()), Count::Already);
        let Count::Counted(carol_first) = count(&two, &[], for_bob) else {
            panic!("one of two")
        };
        assert_eq!(
            count(&two, &carol_first, vote("bob", &["sre"])),
            Count::Already
        );
        assert!(carol_first[0].is_of(&Caller::new("bob", None).unwrap()));
    }

    #[test]
    fn one_from_each_group_with_nobody_counted_for_two() {
        let each = rule(&["sre", "security"], 2);
        assert_eq!(each.quorum.needed(), 2);
        // Two from sre are not one from security.
        assert!(!satisfied(
            &each,
            &[vote("bob", &["sre"]), vote("carol", &["sre"])]
        ));
        // Someone in both groups counts for one of them only.
        assert!(!satisfied(&each, &[vote("dave", &["sre", "security"])]));
        // ... and the search finds the assignment a greedy one would miss: dave (both)
        // must count for security, bob for sre.
        assert!(satisfied(
            &each,
            &[vote("dave", &["sre", "security"]), vote("bob", &["sre"])]
        ));
        assert_eq!(
            each.missing_groups(&[vote("bob", &["sre"])]),
            vec!["security"]
        );
        // Enough people, and one standing for two groups: a fourth person of a group that
        // someone covers already but nobody can be spared for still counts (it completes
        // the assignment), while another of a group with its approver does not.
        let abc = rule(&["a", "b", "c"], 3);
        let votes = [
            vote("x", &["a", "b", "c"]),
            vote("y", &["a"]),
            vote("z", &["a"]),
        ];
        assert!(!satisfied(&abc, &votes));
        assert_eq!(count(&abc, &votes, vote("v", &["a"])), Count::NotNeeded);
        assert!(matches!(
            count(&abc, &votes, vote("w", &["b"])),
            Count::Complete(_)
        ));
        // Sixteen of sre cannot fill the count while security is waited for.
        let crowd: Vec<Vote> = vec![vote("s0", &["sre"]), vote("s1", &["sre"])];
        assert_eq!(count(&each, &crowd, vote("s2", &["sre"])), Count::NotNeeded);
        assert!(matches!(
            count(&each, &crowd, vote("sec", &["security"])),
            Count::Complete(v) if v.len() == 3
        ));
        // Three needed from two groups: a third person of either group completes it.
        let three = rule(&["sre", "security"], 3);
        let votes = [vote("bob", &["sre"]), vote("erin", &["security"])];
        assert!(!satisfied(&three, &votes));
        assert!(satisfied(
            &three,
            &[votes[0].clone(), votes[1].clone(), vote("carol", &["sre"])]
        ));
    }

    #[test]
    fn votes_survive_their_stored_form_and_a_malformed_one_is_refused() {
        let votes = vec![
            Vote {
                tenant: Some("acme".into()),
                by: Some("Bob <bob@example.com>".into()),
                at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(90),
                for_whom: Some(("alice".into(), Some("acme".into()))),
                ..vote("bob", &["sre", "security"])
            },
            vote("carol", &[]),
        ];
        assert_eq!(votes_from_json(&votes_json(&votes)), Some(votes));
        assert_eq!(votes_from_json(&json!([{"subject": "bob"}])), None);
        assert_eq!(votes_from_json(&json!({})), None);
    }
}
