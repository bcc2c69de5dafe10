use super::*;
use std::time::Duration;

/// The config loader, fuzzed (docs/reliability.md): any text is read or refused with a
/// reason, never a panic; a configuration that passes its checks is written out
/// (`check-config`) and read back to the same configuration.
#[test]
fn fuzz_config() {
    mcp_fuzz::explore("config", |data| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(config) = toml::from_str::<Config>(text) else {
            return;
        };
        if config.check().is_err() {
            return;
        }
        let written = toml::to_string_pretty(&config).expect("a checked configuration writes");
        let again: Config = toml::from_str(&written)
            .unwrap_or_else(|e| panic!("a written configuration reads back: {e}\n{written}"));
        assert_eq!(
            toml::to_string_pretty(&again).expect("writes"),
            written,
            "a configuration changed in a round trip"
        );
    });
}

/// On today's main, lowering `max_records` alone failed start-up: the per-caller limit
/// kept its default of 25,000, above the new total.
#[test]
fn lowering_a_store_total_alone_lowers_the_per_caller_default_with_it() {
    let config: Config =
        toml::from_str("[store]\nmax_records = 100\nmax_bytes = \"1MiB\"").unwrap();
    config.check().unwrap();
    assert_eq!(config.store.records_per_caller(), 100);
    assert_eq!(config.store.bytes_per_caller(), 1 << 20);
    let defaults: Config = toml::from_str("").unwrap();
    assert_eq!(defaults.store.records_per_caller(), 25_000);
    assert_eq!(defaults.store.bytes_per_caller(), 64 << 20);
    let explicit: Config =
        toml::from_str("[store]\nmax_records = 100\nmax_records_per_caller = 101").unwrap();
    assert!(
        explicit.check().is_err(),
        "an explicit per-caller limit above the total"
    );
}

#[test]
fn the_example_file_parses_and_checks() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mcp-gateway.example.toml");
    let config = Config::load(&path).unwrap();
    assert_eq!(config.auth.mode, AuthMode::Tokens);
    assert!(!config.modules.is_empty());
}

/// The commented-out [auth] alternative of the example file, as an operator would enable
/// it.
fn example_jwt_section() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mcp-gateway.example.toml");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip_while(|l| *l != "# [auth]")
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{}\n", l.trim_start_matches('#').trim_start()))
        .collect()
}

#[test]
fn the_example_files_jwt_section_parses_and_checks() {
    let jwt = example_jwt_section();
    assert!(jwt.contains("mode = \"jwt\""), "{jwt}");
    let config: Config = toml::from_str(&jwt).unwrap();
    config.check().unwrap();
    let resolved = config.auth.jwt.unwrap().resolve().unwrap();
    assert_eq!(resolved.issuers[0].name, "login.example.com/realms/acme");
    assert_eq!(resolved.scopes.tools_call, "mcp.tools");
}

/// `check-config` shows the name each issuer's callers are named by (`sub@name`), so an
/// operator can see that two issuers are apart.
#[test]
fn check_config_shows_each_issuers_name() {
    let jwt = example_jwt_section();
    let file = std::env::temp_dir().join(format!("mcp-issuer-name-{}.toml", std::process::id()));
    std::fs::write(&file, &jwt).unwrap();
    let effective = Config::load(&file).unwrap().effective().unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        effective.contains("name = \"login.example.com/realms/acme\""),
        "{effective}"
    );
}

#[test]
fn sizes_take_binary_units_or_bytes() {
    assert_eq!(bytes::parse("512"), Ok(512));
    assert_eq!(bytes::parse("2KiB"), Ok(2048));
    assert_eq!(bytes::parse("64MiB"), Ok(64 << 20));
    assert_eq!(bytes::parse("1GiB"), Ok(1 << 30));
    assert!(bytes::parse("64MB").is_err());
    assert!(bytes::parse("lots").is_err());
}

#[test]
fn durations_take_units_or_seconds() {
    assert_eq!(duration::parse("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(duration::parse("10m"), Ok(Duration::from_secs(600)));
    assert_eq!(duration::parse("2h"), Ok(Duration::from_secs(7200)));
    assert_eq!(duration::parse("45"), Ok(Duration::from_secs(45)));
    assert!(duration::parse("ten minutes").is_err());
    assert_eq!(duration::parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
    assert!(duration::parse("5w").is_err());
}

#[test]
fn unsafe_or_incomplete_configurations_are_refused_with_a_reason() {
    let cases = [
        ("listen = \"0.0.0.0:8080\"", "loopback"),
        ("[store]\nretention = \"30s\"", "at least 1 minute"),
        (
            "[store]\noperation_timeout = \"0s\"",
            "between 100ms and 10s",
        ),
        (
            "[store]\noperation_timeout = \"11s\"",
            "between 100ms and 10s",
        ),
        (
            "[limits]\nmodule_queue_timeout = \"0s\"",
            "module_queue_timeout must be more than 0",
        ),
        ("[auth]\nmode = \"jwt\"", "needs an [auth.jwt] section"),
        (
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"",
            "at least one [[auth.jwt.issuers]]",
        ),
        (
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"\n[[auth.jwt.issuers]]\nissuer = \"https://idp/\"\njwks_url = \"https://idp/jwks\"\nalgorithms = [\"HS256\"]",
            "not accepted",
        ),
        (
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"\n[[auth.jwt.issuers]]\nissuer = \"https://idp/\"\njwks_url = \"http://idp/jwks\"",
            "must be https://",
        ),
        (
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"https://gw/mcp\"\n[[auth.jwt.issuers]]\nissuer = \"https://idp/\"",
            "exactly one of jwks_url and jwks_file",
        ),
        (
            "[[modules]]\nname = \"fs\"\ntransport = \"stdio\"",
            "needs command",
        ),
        (
            "[[modules]]\nname = \"w\"\ntransport = \"http\"",
            "needs url",
        ),
        (
            "[[modules]]\nname = \"a b\"\ntransport = \"demo\"",
            "letters",
        ),
        ("[[policy]]\ntool = \"x\"\nttl = \"0s\"", "at least 1s"),
        ("[gate]\nmax_grant = \"31d\"", "max_grant must be 1s to 30d"),
        ("[gate]\nmax_grant = \"0s\"", "max_grant must be 1s to 30d"),
        (
            "[[modules]]\nname = \"m\"\ntransport = \"demo\"\nprefix = \"a b\"",
            "prefix",
        ),
        (
            "[uploads]\ndir = \"/tmp/u\"\n[uploads.s3]\nbucket = \"b\"",
            "both dir and s3",
        ),
        ("[uploads]\nprefix = \"../up\"", "prefix"),
        ("[uploads]\nmax_bytes = 0", "at least 1"),
        (
            "[uploads.s3]\nbucket = \"b\"\nendpoint = \"s3.internal\"",
            "http:// or https://",
        ),
        (
            "[uploads.s3]\nbucket = \"b\"\n[[modules]]\nname = \"m\"\ntransport = \"stdio\"\ncommand = \"x\"\ninherit_env = [\"AWS_SECRET_ACCESS_KEY\"]",
            "a secret of the gateway's",
        ),
        ("[[notify]]\nkind = \"slack\"", "needs webhook_url_env"),
        ("[[notify]]\nkind = \"email\"", "needs smtp_host"),
        (
            "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\ntls = \"none\"",
            "loopback SMTP server only",
        ),
        (
            "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nto = [\"a@example.com\"]",
            "needs from",
        ),
        (
            "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nfrom = \"g@example.com\"",
            "needs to",
        ),
        (
            "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nsmtp_username_env = \"CARGO_MANIFEST_DIR\"",
            "or neither",
        ),
        (
            "[[notify]]\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\nurl = \"https://x.example.com\"",
            "url is not a key of kind \"email\"",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\nto = [\"a@example.com\"]",
            "to is not a key of kind \"webhook\"",
        ),
        ("[[notify]]\nkind = \"webhook\"", "needs url"),
        (
            "[[notify]]\nkind = \"webhook\"\nafter = \"10s\"",
            "after must be between 1m and 24h",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\nafter = \"30m\"\nevents = [\"answered\"]",
            "its events must include \"waiting\"",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\nurl = \"http://hooks.example.com/x\"",
            "must be https://",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"",
            "needs secret_env",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"\nsecret_env = \"MCP_TEST_SURELY_UNSET_SECRET\"",
            "not set or empty",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\nevents = [\"approved\"]",
            "the events are",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\ntools = [\"*\"]",
            "a prefix ending in '*'",
        ),
        // (`cargo test` sets CARGO_MANIFEST_DIR, long enough to stand for a secret.)
        (
            "[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"https://h.example.com/\"\nsecret_env = \"CARGO_MANIFEST_DIR\"\n[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"https://h.example.com/\"\nsecret_env = \"CARGO_MANIFEST_DIR\"",
            "another [[notify]] has this name",
        ),
        (
            "[[notify]]\nkind = \"webhook\"\nurl = \"https://h.example.com/\"\nsecret_env = \"CARGO_MANIFEST_DIR\"\n[[modules]]\nname = \"m\"\ntransport = \"stdio\"\ncommand = \"x\"\ninherit_env = [\"CARGO_MANIFEST_DIR\"]",
            "a secret of the gateway's",
        ),
        // `[flow]` and `[content]`, refused by check-config as at start-up.
        (
            "[flow]\nwindow = \"5s\"",
            "window must be between 1m and 7d",
        ),
        ("[flow]\ntrifecta = \"maybe\"", "trifecta must be"),
        (
            "[[flow.tools]]\ntool = \"a__*\"\nlabels = [\"secret\"]",
            "unknown label \"secret\"",
        ),
        (
            "[[flow.tools]]\ntool = \"a*b*\"\nlabels = []",
            "a prefix ending in one '*'",
        ),
        ("[content]\nsecrets = \"redact\"", "not a kind of finding"),
        ("[content]\nsecret = \"quarantine\"", "the action must be"),
        (
            "[content]\ncard = \"hold\"\nhold_for = \"1s\"",
            "between 10s and 24h",
        ),
        ("[content]\nhold_for = \"2d\"", "between 10s and 24h"),
        ("[content]\nmax_scan_bytes = 10", "at least 1KiB"),
    ];
    for (text, expected) in cases {
        let config: Config = toml::from_str(text).unwrap();
        let err = config.check().unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
    assert!(
        toml::from_str::<Config>("lisen = \"127.0.0.1:1\"").is_err(),
        "unknown keys are errors"
    );
    assert!(
        toml::from_str::<Config>("[metrics]\nlisten = \"nowhere\"").is_err(),
        "an operations listener is an address"
    );
}

/// `[[modules]] era`: read for an HTTP module, refused for a stdio one (which always speaks
/// the 2025 handshake), and an unknown value is refused.
#[test]
fn a_modules_era_is_for_http_modules_and_names_one_of_three() {
    let http: Config = toml::from_str(
        "[[modules]]\nname = \"m\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nera = \"legacy\"",
    )
    .unwrap();
    http.check().unwrap();
    assert_eq!(http.modules[0].era, ModuleEra::Legacy);
    let stdio: Config = toml::from_str(
        "[[modules]]\nname = \"m\"\ntransport = \"stdio\"\ncommand = \"true\"\nera = \"modern\"",
    )
    .unwrap();
    let refused = stdio.check().unwrap_err().to_string();
    assert!(refused.contains("era"), "{refused}");
    assert!(
        toml::from_str::<Config>(
            "[[modules]]\nname = \"m\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nera = \"2026\""
        )
        .is_err()
    );
}

/// Issue 50, item 1: `approvers` and `also_from` make a quorum (four eyes by default, the
/// only mode it takes); what cannot be met or counts the requester is refused saying why.
#[test]
fn an_approver_rule_takes_a_quorum_and_refuses_one_it_cannot_keep() {
    let rule = |extra: &str| -> Result<mcp_gate::ApproverRule, String> {
        let text = format!(
            "[auth]\nmode = \"tokens\"\n[[approvers]]\ntools = \"db__*\"\ngroup = \"sre\"\n{extra}"
        );
        let config: Config = toml::from_str(&text).map_err(|e| e.to_string())?;
        config.check().map_err(|e| e.to_string())?;
        config.approvers[0]
            .resolve(&config.auth)
            .map_err(|e| e.to_string())
    };
    let two = rule("approvers = 2").unwrap();
    assert_eq!(two.approval.mode, elicitation_store::ApprovalMode::FourEyes);
    assert_eq!(two.approval.quorum.needed(), 2);
    let each = rule("also_from = [\"security\"]").unwrap();
    assert_eq!(each.approval.quorum.needed(), 2);
    assert_eq!(each.approval.quorum.also, ["security"]);
    let three = rule("approvers = 3\nalso_from = [\"security\"]").unwrap();
    assert_eq!(three.approval.quorum.needed(), 3);
    assert_eq!(
        rule("").unwrap().approval.mode,
        elicitation_store::ApprovalMode::Must
    );
    for (extra, says) in [
        (
            "approvers = 2\nmode = \"may\"",
            "the requester never counts",
        ),
        (
            "approvers = 2\nmode = \"must\"",
            "the requester never counts",
        ),
        ("approvers = 0", "approvers must be 1 to 16"),
        ("approvers = 17", "approvers must be 1 to 16"),
        (
            "approvers = 1\nalso_from = [\"security\"]",
            "fewer than the 2 groups",
        ),
        ("also_from = [\"sre\"]", "named twice"),
        ("also_from = [\"\"]", "1 to 256 characters"),
        ("also_from = [\"sec#t2\"]", "may not contain '#'"),
        (
            "also_from = [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\"]",
            "at most 8 groups",
        ),
    ] {
        let refused = rule(extra).unwrap_err();
        assert!(refused.contains(says), "{extra}: {refused}");
    }
}

/// An attacker's read of the quorum: in mode `jwt` a Slack user mapped to a plain subject
/// is nobody's token — the same person would count twice toward a quorum, or approve their
/// own four-eyes call from Slack. Refused; `sub@issuer` is taken.
#[test]
fn a_slack_user_of_mode_jwt_must_be_named_as_its_callers_are() {
    let slack = |subject: &str| {
        format!(
            "{}\n[[notify]]\nname = \"slack\"\nkind = \"slack\"\nwebhook_url_env = \"PATH\"\nsigning_secret_env = \"CARGO_MANIFEST_DIR\"\n[notify.users.UALICE]\nsubject = \"{subject}\"\ngroups = [\"sre\"]\n",
            example_jwt_section()
        )
    };
    let plain: Config = toml::from_str(&slack("alice")).unwrap();
    // (The check of the webhook's and the signing secret's environment comes apart.)
    let refused = plain.slack_users_are_callers().unwrap_err().to_string();
    assert!(
        refused.contains("no caller of auth mode \"jwt\"") && refused.contains("sub@issuer"),
        "{refused}"
    );
    let named: Config = toml::from_str(&slack("alice@login.example.com/realms/acme")).unwrap();
    named.slack_users_are_callers().unwrap();
}

/// Issue 50, item 2, per rule: `remind_after`, `escalate_after` and `escalate_to` are read
/// and checked; a chase nobody would hear (no sink takes what waits, no sink of the group
/// escalated to) is refused at start rather than dropped when a call has waited.
#[test]
fn an_approver_rules_chase_is_checked_and_must_reach_someone() {
    let config = |rule: &str, sinks: &str| -> Config {
        toml::from_str(&format!(
            "[auth]\nmode = \"tokens\"\n[[approvers]]\ntools = \"fs__*\"\ngroup = \"sre\"\n{rule}\n{sinks}"
        ))
        .unwrap()
    };
    let sink = |name: &str, groups: &str| {
        format!(
            "[[notify]]\nname = \"{name}\"\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"\nsecret_env = \"Y\"\ngroups = {groups}\n"
        )
    };
    let both = format!(
        "{}{}",
        sink("team", "[\"sre\"]"),
        sink("leads", "[\"sre-leads\"]")
    );
    let chase = "remind_after = \"15m\"\nescalate_after = \"45m\"\nescalate_to = [\"sre-leads\"]";
    let ok = config(chase, &both);
    ok.chases_reach_someone().unwrap();
    let route = ok.approvers[0].route().unwrap();
    assert_eq!(route.remind_after, Some(Duration::from_secs(900)));
    assert_eq!(route.escalate_after, Some(Duration::from_secs(2700)));
    assert_eq!(route.escalate_to, ["sre-leads"]);
    for (rule, sinks, says) in [
        (
            chase,
            sink("team", "[\"sre\"]"),
            "nobody would hear the escalation",
        ),
        (
            "remind_after = \"15m\"",
            String::new(),
            "nobody would be reminded",
        ),
        ("remind_after = \"30s\"", both.clone(), "between 1m and 24h"),
        ("escalate_after = \"45m\"", both.clone(), "go together"),
        ("escalate_to = [\"sre-leads\"]", both.clone(), "go together"),
        (
            "remind_after = \"45m\"\nescalate_after = \"15m\"\nescalate_to = [\"sre-leads\"]",
            both.clone(),
            "after remind_after",
        ),
    ] {
        let refused = config(rule, &sinks)
            .chases_reach_someone()
            .unwrap_err()
            .to_string();
        assert!(refused.contains(says), "{rule}: {refused}");
    }
}

/// Issue 51, item 2: `[[quotas]]` and `[[tool_costs]]` are read, and what they cannot mean
/// is refused saying why.
#[test]
fn quotas_and_tool_costs_are_read_and_checked() {
    let read = |text: &str| -> Result<mcp_gate::quotas::Quotas, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        quotas(&config).map_err(|e| e.to_string())
    };
    let ok = read(
        "[[quotas]]\ntools = \"fs__*\"\nwindow = \"day\"\ncalls = 100\n[[quotas]]\ntools = \"llm__complete\"\nper = \"everyone\"\nwindow = \"hour\"\ncost = 5000\n[[tool_costs]]\ntools = \"llm__complete\"\nunits = 40\n",
    )
    .unwrap();
    assert_eq!(ok.rules.len(), 2);
    assert_eq!(ok.rules[0].per, mcp_gate::quotas::QuotaPer::Caller);
    assert_eq!(ok.rules[1].unit, mcp_gate::quotas::QuotaUnit::Cost);
    assert_eq!(ok.cost_of("llm__complete"), 40);
    assert_eq!(ok.cost_of("fs__read"), 1);
    for (text, says) in [
        (
            "[[quotas]]\ntools = \"fs__*\"\nwindow = \"week\"\ncalls = 1",
            "\"minute\", \"hour\" or \"day\"",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\nwindow = \"day\"",
            "exactly one of calls and cost",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\nwindow = \"day\"\ncalls = 1\ncost = 1",
            "exactly one of calls and cost",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\nwindow = \"day\"\ncalls = -1",
            "0 to",
        ),
        (
            "[[quotas]]\ntools = \"f*s*\"\nwindow = \"day\"\ncalls = 1",
            "prefix ending in one '*'",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\nper = \"team\"\nwindow = \"day\"\ncalls = 1",
            "\"caller\", \"group\" or \"everyone\"",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\nper = \"group\"\nwindow = \"day\"\ncalls = 1",
            "needs the group",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\ngroup = \"sre\"\nwindow = \"day\"\ncalls = 1",
            "group is for per = \"group\"",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\nper = \"group\"\ngroup = \"sre\"\nwindow = \"day\"\ncalls = 1",
            "needs auth mode",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\nserver = \"finance\"\nwindow = \"day\"\ncalls = 1",
            "server \"finance\" is not one of [[servers]]",
        ),
        (
            "[[quotas]]\ntools = \"fs__*\"\npast = \"beg\"\nwindow = \"day\"\ncalls = 1",
            "\"refuse\" or \"ask\"",
        ),
        (
            "[[tool_costs]]\ntools = \"fs__*\"\nunits = 0",
            "units must be 1 to 1000000",
        ),
    ] {
        let refused = read(text).unwrap_err();
        assert!(refused.contains(says), "{text}: {refused}");
    }
}

#[test]
fn virtual_servers_are_read_and_checked() {
    let modules = "[auth]\nmode = \"tokens\"\n[[modules]]\nname = \"fs\"\ntransport = \"demo\"\n";
    let read = |text: &str| -> Result<Vec<(mcp_gate::servers::VirtualServer, usize)>, String> {
        let config: Config =
            toml::from_str(&format!("{modules}{text}")).map_err(|e| e.to_string())?;
        config
            .servers()
            .map(|s| s.into_iter().map(|(v, rules)| (v, rules.len())).collect())
            .map_err(|e| e.to_string())
    };
    let ok = read(
        "[[servers]]\npath = \"/mcp/finance\"\nmodules = [\"fs\"]\ntools = [\"git__status\"]\ngroups = [\"finance\"]\n[[servers.policy]]\ntool = \"fs__*\"\ngate = \"confirm\"\n[[servers]]\npath = \"/mcp/eng\"\ntools = [\"fs__read_*\"]\n",
    )
    .unwrap();
    assert_eq!(ok.len(), 2);
    assert_eq!((ok[0].0.name.as_str(), ok[0].1), ("finance", 1));
    assert!(ok[0].0.offers("fs", "fs__anything") && ok[0].0.offers("git", "git__status"));
    assert!(ok[1].0.offers("fs", "fs__read_file") && !ok[1].0.offers("fs", "fs__write"));
    for (text, says) in [
        (
            "[[servers]]\npath = \"/finance\"\ntools = [\"fs__*\"]",
            "path must be /mcp/ and a name",
        ),
        (
            "[[servers]]\npath = \"/mcp/Fin/ance\"\ntools = [\"fs__*\"]",
            "lowercase letters",
        ),
        ("[[servers]]\npath = \"/mcp/finance\"", "it offers nothing"),
        (
            "[[servers]]\npath = \"/mcp/finance\"\nmodules = [\"ledger\"]",
            "module \"ledger\" is not one of [[modules]]",
        ),
        (
            "[[servers]]\npath = \"/mcp/a\"\ntools = [\"x\"]\n[[servers]]\npath = \"/mcp/a\"\ntools = [\"y\"]",
            "two servers have this path",
        ),
        (
            "[[servers]]\npath = \"/mcp/a\"\ntools = [\"f*s*\"]",
            "prefix ending in one '*'",
        ),
        (
            "[[servers]]\npath = \"/mcp/a\"\ntools = [\"x\"]\ngroups = [\"ops#other\"]",
            "may not contain '#'",
        ),
        (
            "[[servers]]\npath = \"/mcp/a\"\ntools = [\"x\"]\n[[servers.policy]]\ntool = \"x\"\nwhen = \"args.(\"",
            "[[servers]] \"/mcp/a\"",
        ),
    ] {
        let refused = read(text).unwrap_err();
        assert!(refused.contains(says), "{text}: {refused}");
    }
}
