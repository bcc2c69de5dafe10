//! Quotas and budgets end to end (issue 51): the real binary over the real filesystem
//! server, a budget refused in band with `Retry-After`, a person allowing one call past a
//! quota, and the counters of two instances on one PostgreSQL when one is killed mid-flight.

use super::servers::{ANN, BOB, BOB_HUMAN, CAROL, CAROL_HUMAN, post, scene};
use super::*;

/// A 2026-07-28 `tools/call` of `tool` as `token` on `path`: the status, headers and result.
async fn modern_on(
    base: &str,
    path: &str,
    token: &str,
    tool: &str,
    arguments: &Value,
) -> (u16, http::HeaderMap, Value) {
    let params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}});
    let (status, headers, body) = post(
        base,
        path,
        token,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
    )
    .await;
    (status, headers, body["result"].clone())
}

/// Quotas end to end: a day budget in cost units shared by everyone refuses the call that
/// would pass it, in band and with `Retry-After`, and says what remains; a quota of one
/// group on one server asks a person, who allows one call past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_budget_refuses_with_retry_after_and_a_person_allows_one_call_past_a_quota() {
    let (_dir, sandbox, config) = scene(
        "quotas",
        r#"
[[tool_costs]]
tools = "fs__read_text_file"
units = 3
[[quotas]]
tools = "fs__read_text_file"
per = "everyone"
window = "day"
cost = 7
[[quotas]]
tools = "fs__list_directory"
per = "group"
group = "eng"
server = "eng"
window = "hour"
calls = 1
past = "ask"
"#,
    );
    let gateway = Gateway::start(&config).await;
    let base = gateway.base.clone();
    let ledger = json!({"path": sandbox.join("ledger.txt").display().to_string()});
    // Two reads (6 units of 7), by two callers on two endpoints; a third would make 9.
    for (path, token) in [("/mcp/finance", ANN), ("/mcp", CAROL)] {
        let (status, headers, ran) =
            modern_on(&base, path, token, "fs__read_text_file", &ledger).await;
        assert_eq!(status, 200, "{ran}");
        assert_ne!(ran["isError"], true, "{ran}");
        assert!(headers.get("retry-after").is_none());
    }
    let (status, headers, over) =
        modern_on(&base, "/mcp/finance", ANN, "fs__read_text_file", &ledger).await;
    assert_eq!(status, 200, "refused in band: {over}");
    assert_eq!(over["isError"], true, "{over}");
    // The tool declares an outputSchema: the refusal says it in text and `_meta` alone.
    let wait = over["_meta"]["mcp-gateway/retryAfterSecs"]
        .as_u64()
        .unwrap();
    assert!(
        (1..=86_400).contains(&wait),
        "until the UTC day ends: {wait}"
    );
    assert_eq!(
        headers["retry-after"].to_str().unwrap(),
        wait.to_string(),
        "{over}"
    );
    assert!(
        over["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("7 cost units per day of fs__read_text_file for every caller together"),
        "{over}"
    );
    let (status, _, standing) = http(
        "GET",
        &format!("{base}/v1/quotas"),
        &[("authorization", &format!("Bearer {ANN}"))],
        None,
    )
    .await;
    assert_eq!(status, 200, "{standing}");
    let budget = standing["quotas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["tools"] == "fs__read_text_file")
        .unwrap();
    assert_eq!(
        (&budget["used"], &budget["remaining"]),
        (&json!(6), &json!(1)),
        "{standing}"
    );

    // eng's members share one listing an hour on eng; past it, a person is asked.
    let listing = json!({"path": sandbox.display().to_string()});
    let (_, _, ran) = modern_on(&base, "/mcp/eng", BOB, "fs__list_directory", &listing).await;
    assert!(
        ran["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ledger.txt"),
        "{ran}"
    );
    let (status, _, past) =
        modern_on(&base, "/mcp/eng", CAROL, "fs__list_directory", &listing).await;
    assert_eq!(status, 200, "{past}");
    let leave = held_id(&past);
    assert!(
        past["structuredContent"]["elicitation"]["message"]
            .as_str()
            .unwrap()
            .contains("beyond a quota"),
        "{past}"
    );
    // Another caller's approval is not carol's to give; carol's person allows it.
    let respond = |token: &'static str| {
        let url = format!("{base}/v1/mcp/elicitations/{leave}/respond");
        async move {
            http(
                "POST",
                &url,
                &[("authorization", &format!("Bearer {token}"))],
                Some(&json!({"confirmed": true})),
            )
            .await
        }
    };
    let (status, _, body) = respond(BOB_HUMAN).await;
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = respond(CAROL_HUMAN).await;
    assert_eq!(status, 200, "{body}");
    let (_, headers, ran) =
        modern_on(&base, "/mcp/eng", CAROL, "fs__list_directory", &listing).await;
    assert!(
        ran["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ledger.txt"),
        "{ran}"
    );
    assert!(headers.get("retry-after").is_none());
    // Listing on the gateway's own endpoint is not eng's quota.
    let (_, _, ran) = modern_on(&base, "/mcp", CAROL, "fs__list_directory", &listing).await;
    assert!(
        ran["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ledger.txt"),
        "{ran}"
    );
}

/// Two instances on one PostgreSQL share an everyone-together quota of 10 reads; 40 reads
/// are sent at once to both, and one instance is killed (SIGKILL) while they run. Whatever
/// it had counted stays counted: nothing is granted twice, the survivor grants only what
/// remains, and in all exactly the limit is counted, never more runs than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_counters_stay_exact_when_an_instance_is_killed_mid_flight() {
    let db = TestDb::new().await;
    let (_dir, sandbox, config) = scene(
        "sigkill",
        &format!(
            "[[quotas]]\ntools = \"fs__read_text_file\"\nper = \"everyone\"\nwindow = \"day\"\ncalls = 10\n{}",
            postgres_store(&db)
        ),
    );
    let (a, b) = (Gateway::start(&config).await, Gateway::start(&config).await);
    let ledger = json!({"path": sandbox.join("ledger.txt").display().to_string()});
    let mut calls = Vec::new();
    for i in 0..40 {
        let base = if i % 2 == 0 {
            a.base.clone()
        } else {
            b.base.clone()
        };
        let ledger = ledger.clone();
        calls.push(tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let params = json!({"name": "fs__read_text_file", "arguments": ledger, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}});
            let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params});
            let request = http::Request::post(format!("{base}/mcp"))
                .header("authorization", format!("Bearer {CAROL}"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "fs__read_text_file")
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap();
            // A call to the killed instance may get no answer at all.
            let response = client.request(request).await.ok()?;
            let bytes = response.into_body().collect().await.ok()?.to_bytes();
            let answer: Value = serde_json::from_slice(&bytes).ok()?;
            Some(answer["result"].clone())
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    a.kill().await;
    let (mut ran, mut refused) = (0, 0);
    for call in calls {
        match call.await.unwrap() {
            Some(result) if result["content"][0]["text"] == "Q4 ledger" => ran += 1,
            Some(result) if result["isError"] == true => {
                assert!(
                    result["content"][0]["text"]
                        .as_str()
                        .unwrap()
                        .contains("would pass the quota of 10 calls"),
                    "{result}"
                );
                refused += 1;
            }
            Some(other) => panic!("neither ran nor refused: {other}"),
            None => {}
        }
    }
    assert!(ran <= 10, "never more runs than the limit: {ran}");
    // The survivor grants only what remains, then refuses.
    let remaining = |standing: &Value| standing["quotas"][0]["remaining"].as_i64().unwrap();
    let (status, _, standing) = http(
        "GET",
        &format!("{}/v1/quotas", b.base),
        &[("authorization", &format!("Bearer {CAROL}"))],
        None,
    )
    .await;
    assert_eq!(status, 200, "{standing}");
    let left = remaining(&standing);
    let used = 10 - left;
    eprintln!("killed mid-flight: {ran} ran, {refused} refused, {used} counted");
    assert!(
        used >= ran,
        "every run was counted ({ran} runs, {used} counted; {refused} refused)"
    );
    let mut more = 0;
    loop {
        let (status, _, result) = post(
            &b.base,
            "/mcp",
            CAROL,
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "fs__read_text_file"),
            ],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "fs__read_text_file", "arguments": ledger, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}),
        )
        .await;
        assert_eq!(status, 200, "{result}");
        if result["result"]["isError"] == true {
            break;
        }
        more += 1;
        assert!(more <= 10, "the survivor never grants past the limit");
    }
    assert_eq!(more, left, "the survivor granted exactly what remained");
}
