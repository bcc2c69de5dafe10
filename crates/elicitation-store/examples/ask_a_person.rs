//! A backend asks a person and waits for the answer: `cargo run -p elicitation-store
//! --example ask_a_person`. The same calls work on a `PostgresStore`, where the answer may
//! come from any instance (the wait wakes on LISTEN/NOTIFY).

use std::sync::Arc;

use elicitation_store::{Caller, ElicitationSpec, ElicitationStore, MemoryStore};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(MemoryStore::default());
    let caller = Caller::new("billing-service", None)?;
    let question = ElicitationSpec::confirmation("Refund order 1042 ($120) to the customer?")?;
    let asked = store
        .create(&caller, question, time::Duration::minutes(30))
        .await?;

    // A person answers elsewhere: the approvals page, the REST API, Slack. Here, a task.
    let (person, id) = (store.clone(), asked.id);
    let who = caller.clone();
    tokio::spawn(async move { person.respond(&who, id, json!({"confirmed": true})).await });

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30 * 60);
    let answered = store.wait_for_change(&caller, asked.id, deadline).await?;
    match answered.confirmation_state() {
        Some(true) => println!("approved: refunding order 1042"),
        Some(false) => println!(
            "declined: {}",
            answered.note.as_deref().unwrap_or("no note")
        ),
        None => println!("not answered ({}): nothing done", answered.status),
    }
    Ok(())
}
