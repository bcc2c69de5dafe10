//! Files people upload to answer `file_upload` elicitations: a local directory, one folder
//! per caller (named by a hash of the caller, so nothing of the caller's name reaches the
//! file system), each file named by a random upload id. The gateway computes the size and
//! SHA-256 itself; the requester downloads the file with the upload id, scoped to its caller.

use std::path::PathBuf;

use elicitation_store::Caller;
use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};

/// What the gateway recorded of one upload: the `file_upload` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The random id (64 hex digits).
    pub upload_id: String,
    /// The name the person's browser gave (cleaned).
    pub file_name: String,
    /// The content type the browser gave (or `application/octet-stream`).
    pub content_type: String,
    /// Its size.
    pub size_bytes: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
}

/// The blob store.
#[derive(Debug)]
pub struct Uploads {
    dir: PathBuf,
    rng: SystemRandom,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A file name as shown and recorded: no path, no control characters, at most 255 chars.
pub fn clean_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = base.chars().filter(|c| !c.is_control()).take(255).collect();
    if cleaned.trim().is_empty() {
        "upload".into()
    } else {
        cleaned
    }
}

/// A content type as recorded: a plain `type/subtype` (parameters dropped), else
/// `application/octet-stream`.
pub fn clean_content_type(given: Option<&str>) -> String {
    let essence = given
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let token = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match essence.split_once('/') {
        Some((kind, sub)) if token(kind) && token(sub) => essence,
        _ => "application/octet-stream".into(),
    }
}

impl Uploads {
    /// Files under `dir` (created when needed).
    pub fn new(dir: PathBuf) -> Self {
        Uploads {
            dir,
            rng: SystemRandom::new(),
        }
    }

    fn caller_dir(&self, caller: &Caller) -> PathBuf {
        let key = format!(
            "{}\n{}",
            caller.subject_id(),
            caller.tenant_id().unwrap_or_default()
        );
        self.dir.join(hex(digest(&SHA256, key.as_bytes()).as_ref()))
    }

    /// Keeps `bytes` for `caller`.
    pub async fn save(
        &self,
        caller: &Caller,
        file_name: &str,
        content_type: Option<&str>,
        bytes: &[u8],
    ) -> std::io::Result<Upload> {
        let mut id = [0u8; 32];
        self.rng
            .fill(&mut id)
            .map_err(|_| std::io::Error::other("the system random source failed"))?;
        let upload_id = hex(&id);
        let dir = self.caller_dir(caller);
        tokio::fs::create_dir_all(&dir).await?;
        let path = dir.join(&upload_id);
        let partial = dir.join(format!("{upload_id}.partial"));
        tokio::fs::write(&partial, bytes).await?;
        tokio::fs::rename(&partial, &path).await?;
        Ok(Upload {
            upload_id,
            file_name: clean_name(file_name),
            content_type: clean_content_type(content_type),
            size_bytes: u64::try_from(bytes.len()).unwrap_or(u64::MAX),
            sha256: hex(digest(&SHA256, bytes).as_ref()),
        })
    }

    /// The caller's upload `upload_id`; `None` when there is none (or the id is not one).
    pub async fn open(&self, caller: &Caller, upload_id: &str) -> Option<Vec<u8>> {
        let valid = upload_id.len() == 64 && upload_id.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return None;
        }
        tokio::fs::read(self.caller_dir(caller).join(upload_id))
            .await
            .ok()
    }

    /// Removes the caller's upload (an answer that was not recorded).
    pub async fn remove(&self, caller: &Caller, upload_id: &str) {
        let _ = tokio::fs::remove_file(self.caller_dir(caller).join(upload_id)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_types_are_cleaned() {
        assert_eq!(clean_name("../../etc/passwd"), "passwd");
        assert_eq!(clean_name("C:\\x\\report.pdf"), "report.pdf");
        assert_eq!(clean_name("a\u{0}b\nc.txt"), "abc.txt");
        assert_eq!(clean_name("/"), "upload");
        assert_eq!(
            clean_content_type(Some("Text/Plain; charset=utf-8")),
            "text/plain"
        );
        assert_eq!(
            clean_content_type(Some("text/html\r\nx: y")),
            "application/octet-stream"
        );
        assert_eq!(clean_content_type(None), "application/octet-stream");
    }

    #[tokio::test]
    async fn an_upload_is_its_callers_only_and_ids_cannot_walk_the_file_system() {
        let dir = std::env::temp_dir().join(format!("mcp-uploads-{}", std::process::id()));
        let uploads = Uploads::new(dir.clone());
        let alice = Caller::new("alice", None).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        let up = uploads
            .save(&alice, "r.txt", Some("text/plain"), b"hello")
            .await
            .unwrap();
        assert_eq!(up.size_bytes, 5);
        assert_eq!(
            up.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(uploads.open(&alice, &up.upload_id).await.unwrap(), b"hello");
        assert_eq!(uploads.open(&bob, &up.upload_id).await, None);
        assert_eq!(uploads.open(&alice, "../x").await, None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
