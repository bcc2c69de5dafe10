//! Which instance of an isolated module serves a caller: one per caller (tenant and
//! subject), named by a key the upstream registry routes by.

use elicitation_store::Caller;

/// Which instance of an isolated module serves `caller`: one per caller (tenant and subject).
/// (Built with `push_str`, not `format!`: every forwarded call builds one.)
pub fn instance_key(caller: &Caller) -> String {
    let (tenant, subject) = (caller.tenant_id().unwrap_or_default(), caller.subject_id());
    let mut key = String::with_capacity(tenant.len() + 1 + subject.len());
    key.push_str(tenant);
    key.push('\u{1f}');
    key.push_str(subject);
    key
}

/// The caller whose [`instance_key`] `key` is.
pub fn caller_of_instance_key(key: &str) -> Option<Caller> {
    let (tenant, subject) = key.split_once('\u{1f}')?;
    Caller::new(subject, (!tenant.is_empty()).then(|| tenant.to_owned())).ok()
}

/// Whether `key` is [`instance_key`]`(caller)`, without building it (once per session for
/// every log line or update a caller's instance sends).
pub fn is_instance_key_of(key: &str, caller: &Caller) -> bool {
    key.strip_prefix(caller.tenant_id().unwrap_or_default())
        .and_then(|rest| rest.strip_prefix('\u{1f}'))
        == Some(caller.subject_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_key_names_one_caller_only() {
        let alice = Caller::new("alice", Some("acme".into())).unwrap();
        let plain = Caller::new("alice", None).unwrap();
        let other = Caller::new("acme", Some("alice".into())).unwrap();
        for caller in [&alice, &plain, &other] {
            assert!(is_instance_key_of(&instance_key(caller), caller));
        }
        assert!(!is_instance_key_of(&instance_key(&alice), &plain));
        assert!(!is_instance_key_of(&instance_key(&plain), &alice));
        assert!(!is_instance_key_of(&instance_key(&alice), &other));
        assert!(!is_instance_key_of("acme\u{1f}alicex", &alice));
    }
}
