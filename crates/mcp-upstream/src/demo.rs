//! The built-in `demo` module: a small notebook whose state you can watch change. It has a
//! read-only tool (`list_notes`), a harmless write (`add_note`) and a destructive one
//! (`delete_note`) that the gateway holds for confirmation.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use crate::inproc::{InProcessModule, InProcessTool, text_result};

/// The demo module with two starter notes.
pub fn demo_module() -> InProcessModule {
    let notes = Arc::new(Mutex::new(vec![
        "buy milk".to_owned(),
        "call the plumber".to_owned(),
    ]));
    let list = notes.clone();
    let add = notes.clone();
    let delete = notes;
    InProcessModule::new(
        "demo",
        vec![
            InProcessTool::new(
                json!({
                    "name": "list_notes",
                    "title": "List notes",
                    "description": "List the notes in the demo notebook, numbered from 1.",
                    "inputSchema": {"type": "object", "additionalProperties": false},
                    "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
                }),
                move |_| {
                    let notes = list.lock().unwrap_or_else(PoisonError::into_inner);
                    let text = if notes.is_empty() {
                        "The notebook is empty.".to_owned()
                    } else {
                        notes
                            .iter()
                            .enumerate()
                            .map(|(i, n)| format!("{}. {n}", i + 1))
                            .collect::<Vec<_>>()
                            .join("\n")
                    };
                    let structured = json!({"notes": *notes});
                    Ok(mcp_wire::tools::text_result(
                        &text,
                        Some(&structured),
                        false,
                    ))
                },
            ),
            InProcessTool::new(
                json!({
                    "name": "add_note",
                    "title": "Add a note",
                    "description": "Add a note to the demo notebook.",
                    "inputSchema": {"type": "object", "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 500}}, "required": ["text"]},
                    "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}
                }),
                move |args| {
                    let text = args
                        .get("text")
                        .and_then(Value::as_str)
                        .filter(|t| !t.trim().is_empty() && t.chars().count() <= 500);
                    let Some(text) = text else {
                        return Err(
                            "`text` must be a non-empty string of at most 500 characters".into(),
                        );
                    };
                    let mut notes = add.lock().unwrap_or_else(PoisonError::into_inner);
                    if notes.len() >= 1000 {
                        return Err("the demo notebook is full (1000 notes)".into());
                    }
                    notes.push(text.to_owned());
                    Ok(text_result(&format!("Added note {}.", notes.len()), false))
                },
            ),
            InProcessTool::new(
                json!({
                    "name": "delete_note",
                    "title": "Delete a note",
                    "description": "Delete a note from the demo notebook, by its number. Cannot be undone.",
                    "inputSchema": {"type": "object", "properties": {"number": {"type": "integer", "minimum": 1}}, "required": ["number"]},
                    "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false}
                }),
                move |args| {
                    let mut notes = delete.lock().unwrap_or_else(PoisonError::into_inner);
                    let number = args.get("number").and_then(Value::as_u64).unwrap_or(0);
                    let index = usize::try_from(number)
                        .ok()
                        .filter(|n| (1..=notes.len()).contains(n));
                    let Some(index) = index else {
                        return Err(format!(
                            "there is no note {number}; the notebook has {} notes",
                            notes.len()
                        ));
                    };
                    let removed = notes.remove(index - 1);
                    Ok(text_result(
                        &format!("Deleted note {number}: {removed:?}."),
                        false,
                    ))
                },
            ),
        ],
    )
}
