use elicitation_core::{ElicitationSpec, ElicitationStatus};
use time::Duration;
use time::macros::datetime;

use super::*;
use crate::HoldReason;
use crate::Surfaces;

fn confirmation() -> Elicitation {
    let now = datetime!(2026-11-30 10:00:00 UTC);
    let spec = ElicitationSpec::confirmation(confirmation_prompt(
        "fs__delete_file",
        HoldReason::Destructive { declared: true },
        &Surfaces::gateway(),
    ))
    .unwrap();
    Elicitation::new(
        ElicitationId::v7(now, [9; 10]),
        spec,
        now,
        Duration::minutes(10),
    )
}

#[test]
fn held_result_carries_the_elicitation_and_is_not_an_error() {
    let e = confirmation();
    let held = held_result(&e, &Surfaces::gateway());
    assert_eq!(held["isError"], false);
    let structured = &held["structuredContent"];
    assert_eq!(structured["elicitation_required"], true);
    assert_eq!(
        structured["elicitation"],
        json!({
            "id": e.id.to_string(),
            "type": "confirmation",
            "message": "The agent wants to run the destructive tool `fs__delete_file`. It may change or delete data. Allow this call?",
            "response_schema": {
                "type": "object",
                "properties": {"confirmed": {"type": "boolean", "title": "Confirm"}},
                "required": ["confirmed"]
            },
            "expires_at": "2026-11-30T10:10:00Z",
        })
    );
    assert_eq!(held["content"][0]["type"], "text");
    let text = held["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&e.id.to_string()) && text.contains("_meta.confirmation_id"),
        "{text}"
    );
    assert_eq!(e.status, ElicitationStatus::Pending);
}

#[test]
fn held_result_parts_are_the_held_result() {
    let e = confirmation();
    let parts = held_result_parts(&e, &Surfaces::gateway());
    let held = held_result(&e, &Surfaces::gateway());
    assert_eq!(held["structuredContent"], parts.structured);
    assert_eq!(held["content"][0]["text"], parts.text.as_str());
}

#[test]
fn user_rejected_result_is_an_in_band_error() {
    let r = user_rejected_result(None);
    assert_eq!(r["isError"], true);
    assert_eq!(
        r["structuredContent"],
        json!({"user_rejected": true, "message": "The user declined this call; it was not run."})
    );
    assert_eq!(r["content"][0]["type"], "text");
    let noted = user_rejected_result(Some("use the staging bucket\u{202e}"));
    assert_eq!(
        noted["structuredContent"],
        json!({"user_rejected": true, "message": "The user declined this call; it was not run.",
               "note": "use the staging bucket\u{202e}"})
    );
    let text = noted["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Their note: use the staging bucket"),
        "{text}"
    );
    assert!(
        !text.contains('\u{202e}'),
        "bidi controls are escaped in the text: {text}"
    );
}

#[test]
fn cancelled_expired_and_denied_results_are_distinct_in_band_errors() {
    let id = confirmation().id;
    let cancelled = cancelled_result(id);
    let expired = expired_result(id);
    let denied = denied_result("fs__format_disk", None, &Surfaces::gateway());
    let unavailable = gate_unavailable_result("the store is down", &Surfaces::gateway());
    let upstream = upstream_error_result("module fs is unavailable", false);
    for r in [&cancelled, &expired, &denied, &unavailable, &upstream] {
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"].get("user_rejected"), None);
    }
    // What the text says is in the structured content too (hosts that show the model only
    // that one would otherwise give it a bare flag).
    let plain = |r: &Value| {
        let mut structured = r["structuredContent"].clone();
        let message = structured.as_object_mut().unwrap().remove("message");
        assert_eq!(message.as_ref(), Some(&r["content"][0]["text"]), "{r}");
        structured
    };
    assert_eq!(
        plain(&cancelled),
        json!({"confirmation_cancelled": true, "elicitation_id": id.to_string()})
    );
    assert_eq!(
        plain(&expired),
        json!({"confirmation_expired": true, "elicitation_id": id.to_string()})
    );
    assert_eq!(plain(&denied), json!({"policy_denied": true}));
    let told = denied_result(
        "fs__write_file",
        Some("no parent directories"),
        &Surfaces::gateway(),
    );
    assert_eq!(
        plain(&told),
        json!({"policy_denied": true, "reason": "no parent directories"})
    );
    assert!(
        told["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("no parent directories")
    );
    assert_eq!(plain(&unavailable), json!({"gate_unavailable": true}));
    assert_eq!(
        upstream["structuredContent"],
        json!({"upstream_error": true})
    );
    assert!(
        upstream["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("module fs is unavailable")
    );
}

#[test]
fn confirmation_messages_name_the_tool_and_show_all_arguments_or_say_they_cannot() {
    let short = confirmation_message(
        "fs__write_file",
        HoldReason::Destructive { declared: true },
        &json!({"path": "/a", "content": "x"}),
        &Surfaces::gateway(),
    );
    assert!(short.shows_all_arguments);
    assert!(short.text.contains("`fs__write_file`"), "{}", short.text);
    assert!(
        short
            .text
            .ends_with(r#"Arguments: {"content":"x","path":"/a"}"#),
        "{}",
        short.text
    );
    // A field that would fall past a cut-off is never silently hidden.
    let long = confirmation_message(
        "fs__write_file",
        HoldReason::Destructive { declared: true },
        &json!({"a": "y".repeat(5000), "path": "/"}),
        &Surfaces::gateway(),
    );
    assert!(!long.shows_all_arguments);
    assert!(
        !long.text.contains("yyyy"),
        "no partial arguments: {}",
        long.text
    );
    assert!(long.text.contains("too long to show"), "{}", long.text);
    assert!(long.text.chars().count() <= elicitation_core::MAX_MESSAGE_CHARS);
}

#[test]
fn characters_that_could_mislead_a_person_are_shown_as_escapes() {
    // U+202E reverses what follows: "/tmp/gpj.exe" would display as "/tmp/exe.jpg".
    let args = json!({"path": "/tmp/\u{202e}gpj.exe", "note": "a\u{200b}b\u{2066}c\u{e0041}"});
    let message = confirmation_message(
        "fs__write\u{202e}elif",
        HoldReason::Destructive { declared: true },
        &args,
        &Surfaces::gateway(),
    );
    for c in ['\u{202e}', '\u{200b}', '\u{2066}', '\u{e0041}'] {
        assert!(!message.text.contains(c), "{:?} in {}", c, message.text);
    }
    assert!(
        message.text.contains("fs__write\\u202eelif"),
        "{}",
        message.text
    );
    assert!(
        message.text.contains("/tmp/\\u202egpj.exe"),
        "{}",
        message.text
    );
    assert!(
        message.text.contains("a\\u200bb\\u2066c\\u{e0041}"),
        "{}",
        message.text
    );
    assert_eq!(
        visible("plain text, émigré, 日本"),
        "plain text, émigré, 日本"
    );
    assert_eq!(visible("line\nbreak\u{7f}"), "line\\u000abreak\\u007f");
}

#[test]
fn an_upstream_error_for_a_tool_with_an_output_schema_carries_no_structured_content() {
    let result = upstream_error_result("module fs is unavailable", true);
    assert_eq!(result["isError"], true);
    assert!(result.get("structuredContent").is_none(), "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("module fs is unavailable")
    );
}

#[test]
fn the_message_says_why_the_call_is_held() {
    let read = "db__read_rows";
    let by_policy = confirmation_prompt(read, HoldReason::Policy, &Surfaces::gateway());
    assert!(by_policy.contains("policy"), "{by_policy}");
    assert!(!by_policy.contains("destructive"), "{by_policy}");
    let open = confirmation_prompt("web__fetch", HoldReason::OpenWorld, &Surfaces::gateway());
    assert!(open.contains("outside"), "{open}");
    assert!(!open.contains("destructive"), "{open}");
    let unknown = confirmation_prompt(
        "x__run",
        HoldReason::Destructive { declared: false },
        &Surfaces::gateway(),
    );
    assert!(unknown.contains("read-only"), "{unknown}");
    let declared = confirmation_prompt(
        "x__rm",
        HoldReason::Destructive { declared: true },
        &Surfaces::gateway(),
    );
    assert!(declared.contains("destructive tool"), "{declared}");
}

#[test]
fn a_held_results_structured_content_says_what_to_do_without_meta() {
    let confirmation = confirmation();
    let id = confirmation.id;
    let held = held_result(&confirmation, &Surfaces::gateway());
    let next = held["structuredContent"]["next_step"].as_str().unwrap();
    assert!(next.contains("exactly the same arguments"), "{next}");
    assert!(next.contains(&id.to_string()), "{next}");
    let text = held["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(next), "the text says the same: {text}");
}

#[test]
fn json_made_visible_reads_back_the_same_and_hides_no_deceptive_character() {
    let value = serde_json::json!({"name": "\u{202e}fdp.exe", "tag": "a\u{e0041}b\u{200b}", "ok": "plain é"});
    let text = visible_json(&serde_json::to_string_pretty(&value).unwrap());
    assert!(
        !text
            .chars()
            .any(|c| is_deceptive(c) && !matches!(c, '\n' | '\t' | '\r')),
        "{text}"
    );
    assert!(
        text.contains("\\u202e") && text.contains("\\udb40\\udc41"),
        "{text}"
    );
    assert!(text.contains("plain é"), "{text}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        value
    );
}

#[test]
fn a_confirmation_message_loses_exactly_its_arguments_and_anything_else_gives_only_the_tool() {
    let reason = HoldReason::Destructive { declared: true };
    let arguments = json!({"path": "/srv/secret", "content": "token-123"});
    let full =
        confirmation_message("fs__write_file", reason, &arguments, &Surfaces::gateway()).text;
    let bare = message_without_arguments("fs__write_file", &full, &arguments);
    assert_eq!(
        bare,
        confirmation_prompt("fs__write_file", reason, &Surfaces::gateway())
    );
    assert!(!bare.contains("token-123"));
    let long = json!({"content": "x".repeat(elicitation_core::MAX_MESSAGE_CHARS)});
    let too_long = confirmation_message("fs__write_file", reason, &long, &Surfaces::gateway()).text;
    assert_eq!(
        message_without_arguments("fs__write_file", &too_long, &long),
        confirmation_prompt("fs__write_file", reason, &Surfaces::gateway())
    );
    // Other arguments than the message's, or a message of another shape: the tool alone.
    for message in [
        full.as_str(),
        "Delete it? Arguments: {\"path\":\"/srv/secret\"} and more",
        "free text with token-123",
    ] {
        let other = message_without_arguments("fs__write_file", message, &json!({"other": 1}));
        assert_eq!(
            other, "The agent wants to run `fs__write_file`.",
            "{message}"
        );
    }
}

#[test]
fn an_embedders_texts_name_no_surface_of_the_gateways_and_its_own_name_where_set() {
    let spec = ElicitationSpec::confirmation(confirmation_prompt(
        "delete_order",
        HoldReason::Policy,
        &Surfaces::default(),
    ))
    .unwrap();
    assert!(
        spec.message()
            .contains("This service's policy asks a person"),
        "{}",
        spec.message()
    );
    let now = datetime!(2026-11-30 10:00:00 UTC);
    let e = Elicitation::new(
        ElicitationId::v7(now, [9; 10]),
        spec,
        now,
        Duration::minutes(10),
    );
    let neutral = held_result(&e, &Surfaces::default()).to_string();
    for named in ["gateway", "REST", "/v1/", "approvals page"] {
        assert!(!neutral.contains(named), "{named} in {neutral}");
    }
    let shop = Surfaces {
        name: "the shop".into(),
        answer_at: Some("in the shop's back office".into()),
        ..Surfaces::default()
    };
    let held = held_result(&e, &shop).to_string();
    assert!(held.contains("(in the shop's back office)"), "{held}");
    let denied = denied_result("delete_order", None, &shop).to_string();
    assert!(
        denied.contains("The shop's policy does not allow"),
        "{denied}"
    );
    let long = serde_json::json!({"text": "x".repeat(elicitation_core::MAX_MESSAGE_CHARS + 1)});
    let message = confirmation_message(
        "delete_order",
        HoldReason::Policy,
        &long,
        &Surfaces::default(),
    );
    assert!(!message.shows_all_arguments);
    assert!(
        message
            .text
            .contains("review them in full before answering"),
        "{}",
        message.text
    );
}

#[test]
fn held_denied_quarantined_and_account_results_carry_the_sep_2643_denial() {
    let e = confirmation();
    let key = mcp_wire::denial::META_AUTHORIZATION;
    let held = held_result(&e, &Surfaces::gateway());
    let denial = &held["_meta"][key];
    assert_eq!(denial["reason"], "insufficient_authorization");
    assert_eq!(denial["authorizationContextId"], e.id.to_string());
    assert_eq!(denial["remediationHints"][0]["type"], "person_approval");
    assert_eq!(
        denial["remediationHints"][0]["confirmationId"],
        e.id.to_string()
    );
    let denied = denied_result("fs__format_disk", Some("never"), &Surfaces::gateway());
    assert_eq!(
        denied["_meta"][key]["remediationHints"],
        serde_json::json!([{"type": "policy_denied", "reason": "never"}])
    );
    assert!(denied["_meta"][key].get("authorizationContextId").is_none());
    let quarantined = quarantined_result("fs__x", "c1", &["changed".into()], &Surfaces::gateway());
    assert_eq!(
        quarantined["_meta"][key]["remediationHints"],
        serde_json::json!([{"type": "definition_review", "change": "c1"}])
    );
    let linked = account_required_result(
        "gh",
        Some("https://gw/approvals/accounts?connect=gh"),
        true,
        &Surfaces::gateway(),
    );
    assert_eq!(
        linked["_meta"][key]["remediationHints"],
        serde_json::json!([{"type": "url", "url": "https://gw/approvals/accounts?connect=gh"}])
    );
    assert!(
        linked.get("structuredContent").is_none(),
        "an output schema still keeps it out"
    );
    let unlinked = account_required_result("gh", None, false, &Surfaces::gateway());
    assert_eq!(
        unlinked["_meta"][key]["remediationHints"],
        serde_json::json!([{"type": "connect_account", "module": "gh"}])
    );
}
