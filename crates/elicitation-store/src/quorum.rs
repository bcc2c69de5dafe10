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
}

impl Vote {
    /// `approver`'s vote on a confirmation answered by `rule_groups`, now.
    pub(crate) fn of<'a>(
        rule_groups: impl Iterator<Item = &'a str>,
        approver: &Caller,
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
        }
    }

    /// Whether this is `who`'s vote.
    pub fn is_of(&self, who: &Caller) -> bool {
        self.subject == who.subject_id() && self.tenant.as_deref() == who.tenant_id()
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
}

/// Counts `vote` among `votes` toward `needed` distinct people, one of each of `groups`.
pub(crate) fn count(needed: usize, groups: &[&str], votes: &[Vote], vote: Vote) -> Count {
    if votes
        .iter()
        .any(|v| v.subject == vote.subject && v.tenant == vote.tenant)
    {
        return Count::Already;
    }
    let mut with = votes.to_vec();
    with.push(vote);
    if satisfied(needed, groups, &with) {
        Count::Complete(with)
    } else {
        Count::Counted(with)
    }
}

/// Whether `votes` (of distinct people) are `needed` people and one for each of `groups`,
/// no person counted for two.
pub(crate) fn satisfied(needed: usize, groups: &[&str], votes: &[Vote]) -> bool {
    if votes.len() < needed {
        return false;
    }
    let mut taken = vec![false; votes.len()];
    cover(groups, votes, &mut taken)
}

/// Whether every one of `groups` can be given its own voter among those not `taken`
/// (backtracking: at most [`MAX_QUORUM_GROUPS`] groups and [`MAX_QUORUM`] votes).
fn cover(groups: &[&str], votes: &[Vote], taken: &mut [bool]) -> bool {
    let Some((first, rest)) = groups.split_first() else {
        return true;
    };
    for (i, vote) in votes.iter().enumerate() {
        if !taken[i] && vote.groups.iter().any(|g| g == first) {
            taken[i] = true;
            if cover(rest, votes, taken) {
                return true;
            }
            taken[i] = false;
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
                ..vote("bob", &["sre", "security"])
            },
            vote("carol", &[]),
        ];
        assert_eq!(votes_from_json(&votes_json(&votes)), Some(votes));
        assert_eq!(votes_from_json(&json!([{"subject": "bob"}])), None);
        assert_eq!(votes_from_json(&json!({})), None);
    }
}
