//! Test and benchmark support (feature `test-support`): a fresh, migrated database on the
//! cluster named by `DATABASE_URL` (a superuser connection; `cargo xtask test` starts a
//! throwaway cluster and sets it), and the non-superuser writer login stores connect as, so
//! grants and row-level security are exercised exactly as in production.

use tokio_postgres::{Client, Config, NoTls};

use crate::migrate;

/// The login role the tests' stores use; a member of `mcp_gateway_writer` only.
pub const WRITER_LOGIN: &str = "mcp_gateway_test_login";

/// A database of its own on the test cluster.
pub struct TestDb {
    /// Superuser connection to this database.
    pub admin: Config,
    /// Writer-login connection to this database.
    pub writer: Config,
    /// The database's name.
    pub name: String,
}

/// 16 random hex digits.
fn unique_suffix() -> String {
    mcp_random::hex_token::<8>().expect("the system random source works")
}

fn admin_config() -> Config {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "DATABASE_URL is not set, and the Postgres store tests need a database (they are never skipped). \
             Run `cargo xtask test`, which starts a throwaway PostgreSQL and sets it, or point DATABASE_URL \
             at a superuser connection of a disposable cluster."
        )
    });
    url.parse()
        .expect("DATABASE_URL is a valid connection string")
}

/// Connects and drives the connection in the background.
pub async fn connect(config: &Config) -> Client {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .expect("connect to the test cluster");
    tokio::spawn(connection);
    client
}

/// Names the advisory lock (taken in the cluster's `postgres` database, so it spans every
/// test) that serialises role changes: roles are cluster-wide, and concurrent `CREATE ROLE`
/// or `GRANT` on one role conflict.
const ROLE_LOCK: i64 = 0x6d63_705f_726f_6c65;

impl TestDb {
    /// Store options that connect to this database as the writer login, sealing under
    /// `keys`, with the default limits.
    pub fn options(&self, keys: crate::KeyRing) -> crate::PostgresOptions {
        let mut options = crate::PostgresOptions::new("postgres://unused@localhost/unused", keys)
            .expect("a valid URL");
        options.config = self.writer.clone();
        options
    }

    /// Creates and migrates a database with a unique name on the `DATABASE_URL` cluster.
    pub async fn new() -> TestDb {
        TestDb::new_at(admin_config()).await
    }

    /// Creates and migrates a database with a unique name on the cluster `admin` (a
    /// superuser connection) reaches.
    pub async fn new_at(admin: Config) -> TestDb {
        let name = format!("mcp_test_{}", unique_suffix());
        let root = connect(&admin).await;
        root.batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let mut admin_db = admin.clone();
        admin_db.dbname(&name);
        let mut owner = connect(&admin_db).await;
        root.execute("SELECT pg_advisory_lock($1)", &[&ROLE_LOCK])
            .await
            .expect("take the role lock");
        migrate(&mut owner)
            .await
            .expect("migrations apply to a fresh database");
        owner
            .batch_execute(&format!(
                "DO $$ BEGIN CREATE ROLE {WRITER_LOGIN} LOGIN; \
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$; \
                 GRANT mcp_gateway_writer TO {WRITER_LOGIN};"
            ))
            .await
            .expect("create the writer login");
        root.execute("SELECT pg_advisory_unlock($1)", &[&ROLE_LOCK])
            .await
            .expect("release the role lock");
        let mut writer = admin_db.clone();
        writer.user(WRITER_LOGIN);
        TestDb {
            admin: admin_db,
            writer,
            name,
        }
    }

    /// A database beside this one on the same cluster, empty (not migrated): its superuser
    /// connection.
    pub async fn empty_beside(&self, suffix: &str) -> Config {
        let name = format!("{}_{suffix}", self.name);
        let mut root = self.admin.clone();
        root.dbname("postgres");
        connect(&root)
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the database");
        let mut config = self.admin.clone();
        config.dbname(&name);
        config
    }

    /// Runs `work` holding the lock that serialises role changes across the tests (the
    /// migrations create cluster-wide roles).
    pub async fn role_locked<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let mut root = self.admin.clone();
        root.dbname("postgres");
        let root = connect(&root).await;
        root.execute("SELECT pg_advisory_lock($1)", &[&ROLE_LOCK])
            .await
            .expect("take the role lock");
        let done = work.await;
        root.execute("SELECT pg_advisory_unlock($1)", &[&ROLE_LOCK])
            .await
            .expect("release the role lock");
        done
    }

    /// A `postgres://` URL for `config` (TCP hosts only, as the test cluster has).
    pub fn url(config: &Config) -> String {
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        format!(
            "postgres://{}@{host}:{port}/{}",
            config.get_user().unwrap_or("postgres"),
            config.get_dbname().unwrap_or("postgres")
        )
    }

    /// A superuser connection to this test's database (bypasses RLS): for inspecting raw
    /// rows and tampering with them.
    pub async fn admin(&self) -> Client {
        connect(&self.admin).await
    }

    /// A writer-login connection to this test's database.
    pub async fn writer(&self) -> Client {
        connect(&self.writer).await
    }
}

/// The fault-test cluster: a second throwaway PostgreSQL that `cargo xtask test` starts for
/// the tests that stop, start, freeze and thaw a database mid-run (`MCP_FAULT_DATABASE_URL`
/// and `MCP_FAULT_PG_CONTROL`, the script that does it). Holding one serialises the fault
/// tests of a test binary; dropping it leaves the cluster thawed and running, also when the
/// test failed half-way.
pub struct FaultCluster {
    control: std::path::PathBuf,
    admin: Config,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

static FAULT_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl FaultCluster {
    /// Waits for this binary's other fault tests to finish, then hands over the cluster.
    pub async fn take() -> FaultCluster {
        let missing = |name: &str| {
            panic!(
                "{name} is not set: the fault tests stop and freeze a PostgreSQL of their own. \
                 Run `cargo xtask test`, which starts one and sets MCP_FAULT_DATABASE_URL and \
                 MCP_FAULT_PG_CONTROL."
            )
        };
        let url = std::env::var("MCP_FAULT_DATABASE_URL")
            .unwrap_or_else(|_| missing("MCP_FAULT_DATABASE_URL"));
        let control = std::env::var("MCP_FAULT_PG_CONTROL")
            .unwrap_or_else(|_| missing("MCP_FAULT_PG_CONTROL"));
        let turn = FAULT_TURN.lock().await;
        FaultCluster {
            control: control.into(),
            admin: url
                .parse()
                .expect("MCP_FAULT_DATABASE_URL is a valid connection string"),
            _turn: turn,
        }
    }

    /// A fresh migrated database on the fault cluster.
    pub async fn database(&self) -> TestDb {
        TestDb::new_at(self.admin.clone()).await
    }

    fn control(&self, verb: &str) -> Result<(), String> {
        let output = std::process::Command::new(&self.control)
            .arg(verb)
            .output()
            .map_err(|e| format!("run {}: {e}", self.control.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {verb} failed: {}",
                self.control.display(),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// Stops the server (`pg_ctl stop -m fast`): connections close, new ones are refused.
    pub fn stop(&self) {
        self.control("stop").unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts the stopped server again, on the same port with the same data.
    pub fn start(&self) {
        self.control("start").unwrap_or_else(|e| panic!("{e}"));
    }

    /// Stops every server process with SIGSTOP: connections stay open and nothing answers.
    pub fn freeze(&self) {
        self.control("freeze").unwrap_or_else(|e| panic!("{e}"));
    }

    /// Lets a frozen server go on.
    pub fn thaw(&self) {
        self.control("thaw").unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for FaultCluster {
    fn drop(&mut self) {
        // Whatever state the test left: thawed (a no-op if it was not frozen), then started
        // (which fails harmlessly when it is running).
        let _ = self.control("thaw");
        let _ = self.control("start");
    }
}
