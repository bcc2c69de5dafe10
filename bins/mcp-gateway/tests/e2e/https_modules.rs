//! https modules: a real TLS module on loopback (the fixture module behind Python's `ssl`)
//! with certificates from a CA made at test time (rcgen). Trusted through `ca_file`,
//! refused — and named in `/readyz` — without it or with another CA; a module that requires
//! a client certificate (mTLS) gets the gateway's; `http://` across the network is refused
//! unless said to be insecure.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use super::notifications::write_tool;
use super::tool_changes::{Shifty, config};
use super::*;

/// A test CA and what it signed, as PEM files in a directory.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// Another CA's certificate, which vouches for nothing here.
    stranger: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn pki(dir: &Path) -> Pki {
    let issuer = ca("mcp-gateway test CA");
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server, server_key) = leaf(
        vec!["localhost".into(), "127.0.0.1".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client, client_key) = leaf(vec!["gateway".into()], ExtendedKeyUsagePurpose::ClientAuth);
    Pki {
        ca: write("ca.pem", issuer.pem()),
        server_cert: write("server.pem", server),
        server_key: write("server.key", server_key),
        client_cert: write("client.pem", client),
        client_key: write("client.key", client_key),
        stranger: write("stranger.pem", ca("someone else's CA").pem()),
    }
}

fn tls_env(pki: &Pki, client_ca: bool) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("MCP_TLS_CERT", pki.server_cert.display().to_string()),
        ("MCP_TLS_KEY", pki.server_key.display().to_string()),
    ];
    if client_ca {
        env.push(("MCP_TLS_CLIENT_CA", pki.ca.display().to_string()));
    }
    env
}

/// The store and an operations listener whose `/readyz` says why.
fn store_with_readyz(operations: u16) -> String {
    format!("[store]\nkind = \"memory\"\n[metrics]\nlisten = \"127.0.0.1:{operations}\"")
}

/// `/readyz` of the operations listener, once it says `status` (it re-checks at most once a
/// second); its body.
async fn readyz(operations: u16, status: u16) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // The operations listener opens just after the main one.
    while tokio::net::TcpStream::connect(("127.0.0.1", operations))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the operations listener opens"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        let (got, _, body) = http(
            "GET",
            &format!("http://127.0.0.1:{operations}/readyz"),
            &[],
            None,
        )
        .await;
        if got == status {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A held, approved and re-called write through the gateway, by a 2026-07-28 client and by a
/// 2025-11-25 session: both run, once each.
async fn both_eras_run_a_gated_call(gateway: &Gateway) {
    let base = &gateway.base;
    let id = held_id(&modern_call(base, "notes__write", json!({"path": "/m"}), None).await);
    answer(base, &id, true).await;
    let ran = modern_call(base, "notes__write", json!({"path": "/m"}), Some(&id)).await;
    assert_eq!(text(&ran), "ran write", "{ran}");
    let mut session = Session::open(gateway).await;
    let id = held_id(
        &session
            .call("notes__write", json!({"path": "/l"}), None)
            .await,
    );
    answer(base, &id, true).await;
    let ran = session
        .call("notes__write", json!({"path": "/l"}), Some(&id))
        .await;
    assert_eq!(text(&ran), "ran write", "{ran}");
}

/// Trusted through `ca_file`: both eras' modules serve both eras' clients over https.
/// Without it (the platform's roots) or with another CA, the module is down, nothing is
/// listed from it, and `/readyz` names it and the certificate problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_module_is_trusted_through_its_ca_file_and_refused_without_it() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-https-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki = pki(&dir);
    for mode in ["legacy-http", "modern-http"] {
        let extra = format!("required = true\nca_file = \"{}\"", pki.ca.display());
        let shifty = Shifty::start_with(
            &dir,
            "notes",
            mode,
            write_tool(),
            &extra,
            &tls_env(&pki, false),
        )
        .await;
        assert!(
            shifty.module.contains("https://localhost:"),
            "{}",
            shifty.module
        );
        // (The modes share the module's directory, and so its ledger.)
        let before = shifty.ran().len();
        let operations = free_port();
        let file = config(&dir, &store_with_readyz(operations), &shifty.module);
        let gateway = Gateway::start(&file).await;
        readyz(operations, 200).await;
        both_eras_run_a_gated_call(&gateway).await;
        assert_eq!(
            shifty.ran().len(),
            before + 2,
            "{mode}: each approved call ran once"
        );
        gateway.stop().await;

        for trust in [
            String::new(),
            format!("ca_file = \"{}\"", pki.stranger.display()),
        ] {
            let module = shifty
                .module
                .replace(&format!("ca_file = \"{}\"", pki.ca.display()), &trust);
            let operations = free_port();
            let file = config(&dir, &store_with_readyz(operations), &module);
            let gateway = Gateway::start(&file).await;
            let body = readyz(operations, 503).await;
            let problems = body["problems"].to_string();
            assert!(
                problems.contains("module \\\"notes\\\" is down")
                    && problems.contains("certificate"),
                "{mode} {trust:?}: named, with why: {body}"
            );
            assert!(
                tool_names(&gateway.base, AGENT).await.is_empty(),
                "nothing listed from a module the gateway cannot trust"
            );
            gateway.stop().await;
        }
        assert_eq!(shifty.ran().len(), before + 2, "{mode}: nothing more ran");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A module that requires a client certificate refuses the gateway without one, and serves
/// it with `client_cert` and `client_key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mtls_module_gets_the_gateways_client_certificate() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-mtls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki = pki(&dir);
    let trust = format!("required = true\nca_file = \"{}\"", pki.ca.display());
    let shifty = Shifty::start_with(
        &dir,
        "notes",
        "modern-http",
        write_tool(),
        &trust,
        &tls_env(&pki, true),
    )
    .await;
    let operations = free_port();
    let file = config(&dir, &store_with_readyz(operations), &shifty.module);
    let gateway = Gateway::start(&file).await;
    let body = readyz(operations, 503).await;
    assert!(
        body["problems"]
            .to_string()
            .contains("module \\\"notes\\\" is down"),
        "{body}"
    );
    gateway.stop().await;

    let module = format!(
        "{}client_cert = \"{}\"\nclient_key = \"{}\"\n",
        shifty.module,
        pki.client_cert.display(),
        pki.client_key.display()
    );
    let file = config(&dir, &store_with_readyz(operations), &module);
    let gateway = Gateway::start(&file).await;
    readyz(operations, 200).await;
    both_eras_run_a_gated_call(&gateway).await;
    assert_eq!(shifty.ran().len(), 2);
    gateway.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check-config` on an http module's URL and TLS files: `http://` to another host is
/// refused unless `allow_insecure` (then accepted), TLS files on `http://` and a missing
/// `ca_file` are refused, naming the module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_refuses_clear_text_across_the_network_and_names_bad_tls_files() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-https-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let check = async |module: &str| {
        let file = config(&dir, "[store]\nkind = \"memory\"", module);
        check_config_with(Command::new(env!("CARGO_BIN_EXE_mcp-gateway")), &file).await
    };
    let http =
        "[[modules]]\nname = \"far\"\ntransport = \"http\"\nurl = \"http://mcp.example.com/mcp\"\n";
    let (ok, out) = check(http).await;
    assert!(
        !ok && out.contains("module \"far\"") && out.contains("allow_insecure"),
        "{out}"
    );
    let (ok, out) = check(&format!("{http}allow_insecure = true\n")).await;
    assert!(ok, "{out}");
    let (ok, out) = check(&format!("{http}ca_file = \"/etc/hostname\"\n")).await;
    assert!(!ok && out.contains("for an https:// url"), "{out}");
    let https = "[[modules]]\nname = \"far\"\ntransport = \"http\"\nurl = \"https://mcp.example.com/mcp\"\n";
    let (ok, out) = check(https).await;
    assert!(ok, "the platform's roots: {out}");
    let (ok, out) = check(&format!(
        "{https}ca_file = \"{}\"\n",
        dir.join("nope.pem").display()
    ))
    .await;
    assert!(
        !ok && out.contains("module \"far\"") && out.contains("nope.pem"),
        "{out}"
    );
    let (ok, out) = check(&format!(
        "{https}client_cert = \"{}\"\n",
        dir.join("c.pem").display()
    ))
    .await;
    assert!(!ok && out.contains("go together"), "{out}");
    let (ok, out) =
        check("[[modules]]\nname = \"far\"\ntransport = \"http\"\nurl = \"ftp://x/\"\n").await;
    assert!(!ok && out.contains("http:// or https://"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
