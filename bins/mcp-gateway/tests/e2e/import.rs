//! `mcp-gateway import`: the three configuration shapes people already have — Claude
//! Desktop's `mcpServers` (a local server and a remote one through `mcp-remote`), Cursor's
//! (`url` and `headers`), VS Code's `.vscode/mcp.json` (`servers`, `inputs`, comments) —
//! become `[[modules]]` that `check-config` accepts, with no secret in them.

use super::*;

const CLAUDE_DESKTOP: &str = r#"{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_desktopSecret0001"}
    },
    "atlassian": {
      "command": "npx",
      "args": ["-y", "mcp-remote", "https://mcp.atlassian.com/v1/sse"]
    }
  }
}"#;

const CURSOR: &str = r#"{
  "mcpServers": {
    "linear": {
      "url": "https://mcp.linear.app/mcp",
      "headers": {"Authorization": "Bearer lin_cursorSecret0002", "X-Workspace": "core"}
    },
    "local-notes": {"type": "http", "url": "http://127.0.0.1:3845/mcp"},
    "stripe": {"command": "npx", "args": ["-y", "@stripe/mcp", "--tools=all"],
               "env": {"STRIPE_SECRET_KEY": "sk_test_cursorSecret0003"}}
  }
}"#;

const VSCODE: &str = r#"{
  // The workspace's MCP servers.
  "inputs": [
    {"type": "promptString", "id": "github-pat", "description": "GitHub token", "password": true},
  ],
  "servers": {
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/",
      "headers": {"Authorization": "Bearer ${input:github-pat}"}
    },
    /* a local one */
    "fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"],
              "env": {"HOME_DIR": "${env:HOME}", "PROXY": "http://proxy.local:3128"}},
    "old": {"type": "sse", "url": "https://legacy.example/sse"},
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configs_people_have_become_modules_check_config_accepts() {
    let dir = std::env::temp_dir().join(format!("mcp-e2e-import-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text, expected) in [
        (
            "claude_desktop_config.json",
            CLAUDE_DESKTOP,
            &[
                "name = \"filesystem\"",
                "isolation = \"per_caller\"",
                "inherit_env = [\"GITHUB_PERSONAL_ACCESS_TOKEN\"]",
                "url = \"https://mcp.atlassian.com/v1/sse\"",
                "was run through mcp-remote",
            ][..],
        ),
        (
            "mcp.json",
            CURSOR,
            &[
                "auth = { kind = \"bearer\", token_env = \"LINEAR_TOKEN\" }",
                "headers = { \"X-Workspace\" = \"core\" }",
                "url = \"http://127.0.0.1:3845/mcp\"",
                "inherit_env = [\"STRIPE_SECRET_KEY\"]",
            ][..],
        ),
        (
            "vscode-mcp.json",
            VSCODE,
            &[
                "auth = { kind = \"bearer\", token_env = \"GITHUB_PAT\" }",
                "a password input",
                "env = { \"PROXY\" = \"http://proxy.local:3128\" }",
                "inherit_env = [\"HOME_DIR\"]",
                "# [[modules]]\n# name = \"old\"",
            ][..],
        ),
    ] {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
            .arg("import")
            .arg(&file)
            .output()
            .await
            .unwrap();
        let toml = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        // Every secret in the files holds this.
        assert!(
            !toml.contains("Secret000"),
            "{name}: a secret in the output: {toml}"
        );
        for line in expected {
            assert!(toml.contains(line), "{name}: {line:?} in {toml}");
        }
        // A configuration of the imported modules is valid once the secrets it names are in
        // the gateway's environment.
        let config = dir.join(format!("{name}.toml"));
        write_secret(
            &config,
            &format!(
                "listen = \"127.0.0.1:0\"\n[auth]\nmode = \"tokens\"\n[[auth.tokens]]\nsubject = \"alice\"\ntoken_sha256 = \"{}\"\nscopes = [\"tools:call\"]\n{toml}",
                token_sha256(AGENT)
            ),
        );
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"));
        command.env("LINEAR_TOKEN", "x").env("GITHUB_PAT", "y");
        let (ok, out) = check_config_with(command, &config).await;
        assert!(ok, "{name}: {out}\n{toml}");
    }
    // Not a client's configuration: refused, saying why.
    let file = dir.join("other.json");
    std::fs::write(&file, "{\"name\": \"x\"}").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-gateway"))
        .arg("import")
        .arg(&file)
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("neither mcpServers nor servers"));
    let _ = std::fs::remove_dir_all(&dir);
}
