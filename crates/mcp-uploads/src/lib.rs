//! Files people upload to answer `file_upload` elicitations, kept in a blob store: a local
//! directory by default, an S3-compatible bucket when configured (both through
//! `object_store`, so the gateway's code is the same for either).
//!
//! Each file is stored under `{prefix}/{elicitation}/{random}`, and its upload id is the
//! elicitation's id and the random part together (64 hex digits): the id names the
//! elicitation it answers, so a download is allowed only when that elicitation is the
//! caller's and recorded exactly this upload as its answer, and everything kept for an
//! elicitation can be removed when it expires or is cancelled. Nothing of the caller's name
//! or the file's name reaches the store's keys. The gateway computes the size and SHA-256
//! itself.

use std::sync::Arc;

use bytes::Bytes;
use elicitation_core::ElicitationId;
use mcp_random::hex;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use ring::digest::{SHA256, digest};

/// Largest upload the gateway takes unless configured otherwise: 25 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 25 * 1024 * 1024;

/// Where uploads are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobLocation {
    /// A local directory (created when needed).
    Dir(std::path::PathBuf),
    /// An S3-compatible bucket. Credentials come from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never from the
    /// configuration file.
    S3 {
        /// The bucket.
        bucket: String,
        /// The service's URL, for a service other than AWS (MinIO, Ceph, …).
        endpoint: Option<String>,
        /// The region (default: `AWS_REGION`, else `us-east-1`).
        region: Option<String>,
    },
}

/// The blob store's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadsConfig {
    /// Where files are kept.
    pub location: BlobLocation,
    /// A key prefix inside the location (default `uploads`).
    pub prefix: String,
    /// The largest file taken, whatever an elicitation allows.
    pub max_bytes: u64,
}

impl UploadsConfig {
    /// Files in `dir`, at most [`DEFAULT_MAX_BYTES`] each.
    pub fn dir(dir: impl Into<std::path::PathBuf>) -> Self {
        UploadsConfig {
            location: BlobLocation::Dir(dir.into()),
            prefix: "uploads".into(),
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// What the gateway recorded of one upload: the `file_upload` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The elicitation's id and a random part, 64 hex digits.
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

impl Upload {
    /// The `file_upload` response payload.
    pub fn payload(&self) -> serde_json::Value {
        serde_json::json!({
            "upload_id": self.upload_id,
            "file_name": self.file_name,
            "content_type": self.content_type,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
        })
    }
}

/// The blob store could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum UploadsError {
    /// The store's configuration is unusable.
    #[error("the upload store cannot be opened: {0}")]
    Open(String),
    /// The store failed.
    #[error("the upload store failed: {0}")]
    Store(#[from] object_store::Error),
    /// The system random source failed.
    #[error("the system random source failed")]
    Random,
}

/// The blob store.
#[derive(Debug)]
pub struct Uploads {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    max_bytes: u64,
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

/// A content type as recorded: a plain lowercase `type/subtype` (parameters dropped), else
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

/// The elicitation an upload id belongs to, and the id's random part; `None` for anything
/// that is not an upload id.
pub fn parse_upload_id(upload_id: &str) -> Option<(ElicitationId, &str)> {
    if upload_id.len() != 64
        || !upload_id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let (elicitation, random) = upload_id.split_at(32);
    let uuid = uuid::Uuid::try_parse(elicitation).ok()?;
    Some((ElicitationId::from_uuid(uuid), random))
}

/// Makes `dir` the gateway's own: created (mode 0700) when missing; one that exists must be
/// the gateway's user's, and is closed to everyone else (uploads are callers' answers, and a
/// stdio module runs as another user or as this one, never as a reader of this directory).
fn private_dir(dir: &std::path::Path) -> Result<(), UploadsError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let failed = |what: &str, e: std::io::Error| {
        UploadsError::Open(format!("cannot {what} {}: {e}", dir.display()))
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| failed("create", e))?;
    let meta = std::fs::metadata(dir).map_err(|e| failed("read", e))?;
    let own = std::fs::metadata("/proc/self").map_or(meta.uid(), |m| m.uid());
    if !meta.is_dir() || meta.uid() != own {
        return Err(UploadsError::Open(format!(
            "{} is not a directory of the gateway's own user (uid {own}); another user could read or replace the uploads in it",
            dir.display()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        tracing::warn!(dir = %dir.display(), mode = format!("{:o}", meta.mode() & 0o777), "the uploads directory was open to other users; closing it (mode 700)");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| failed("close", e))?;
    }
    Ok(())
}

impl Uploads {
    /// Removes the files kept for elicitations that expired or were cancelled (in the
    /// background; a failure is logged and the files stay until the next attempt or the
    /// store's retention).
    pub fn discard(self: &Arc<Self>, finished: impl IntoIterator<Item = ElicitationId>) {
        let uploads = self.clone();
        let finished: Vec<ElicitationId> = finished.into_iter().collect();
        if finished.is_empty() {
            return;
        }
        tokio::spawn(async move {
            for id in finished {
                match uploads.remove_for(id, None).await {
                    Ok(0) => {}
                    Ok(removed) => {
                        tracing::info!(elicitation = %id, removed, "removed the uploads of a finished elicitation")
                    }
                    Err(e) => {
                        tracing::warn!(elicitation = %id, error = %e, "the uploads of a finished elicitation could not be removed")
                    }
                }
            }
        });
    }

    /// Opens the store `config` names (a directory is created when missing, and kept
    /// closed to other users).
    pub fn open(config: &UploadsConfig) -> Result<Self, UploadsError> {
        let store: Arc<dyn ObjectStore> = match &config.location {
            BlobLocation::Dir(dir) => {
                private_dir(dir)?;
                Arc::new(
                    object_store::local::LocalFileSystem::new_with_prefix(dir)
                        .map_err(|e| UploadsError::Open(e.to_string()))?,
                )
            }
            BlobLocation::S3 {
                bucket,
                endpoint,
                region,
            } => {
                let mut builder =
                    object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(endpoint) = endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                if let Some(region) = region {
                    builder = builder.with_region(region);
                }
                Arc::new(
                    builder
                        .build()
                        .map_err(|e| UploadsError::Open(e.to_string()))?,
                )
            }
        };
        Ok(Uploads {
            store,
            prefix: Path::from(config.prefix.as_str()),
            max_bytes: config.max_bytes,
        })
    }

    /// The largest file taken.
    pub const fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn folder(&self, elicitation: ElicitationId) -> Path {
        self.prefix
            .clone()
            .join(elicitation.as_uuid().simple().to_string().as_str())
    }

    fn key(&self, upload_id: &str) -> Option<Path> {
        let (elicitation, random) = parse_upload_id(upload_id)?;
        Some(self.folder(elicitation).join(random))
    }

    /// Keeps `bytes` as an answer to `elicitation`.
    pub async fn save(
        &self,
        elicitation: ElicitationId,
        file_name: &str,
        content_type: Option<&str>,
        bytes: Bytes,
    ) -> Result<Upload, UploadsError> {
        let random = mcp_random::bytes::<16>().map_err(|_| UploadsError::Random)?;
        let upload_id = format!("{}{}", elicitation.as_uuid().simple(), hex(&random));
        let sha256 = hex(digest(&SHA256, &bytes).as_ref());
        let size_bytes = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let key = self.key(&upload_id).ok_or(UploadsError::Random)?;
        self.store.put(&key, PutPayload::from_bytes(bytes)).await?;
        Ok(Upload {
            upload_id,
            file_name: clean_name(file_name),
            content_type: clean_content_type(content_type),
            size_bytes,
            sha256,
        })
    }

    /// The bytes of upload `upload_id`; `None` when there is none (or the id is not one).
    /// Whether the asker may have them is the caller's to decide (see the module docs).
    pub async fn read(&self, upload_id: &str) -> Result<Option<Bytes>, UploadsError> {
        let Some(key) = self.key(upload_id) else {
            return Ok(None);
        };
        match self.store.get(&key).await {
            Ok(found) => Ok(Some(found.bytes().await?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes one upload (an answer that was not recorded).
    pub async fn remove(&self, upload_id: &str) {
        if let Some(key) = self.key(upload_id)
            && let Err(e) = self.store.delete(&key).await
            && !matches!(e, object_store::Error::NotFound { .. })
        {
            tracing::warn!(error = %e, "an unrecorded upload could not be removed");
        }
    }

    /// Removes everything kept for `elicitation` except `keep` (its recorded answer, if
    /// any): files of answers that were never recorded, or all of them once it expired or
    /// was cancelled. Returns how many were removed.
    pub async fn remove_for(
        &self,
        elicitation: ElicitationId,
        keep: Option<&str>,
    ) -> Result<usize, UploadsError> {
        let keep = keep.and_then(|id| self.key(id));
        let listed = self
            .store
            .list_with_delimiter(Some(&self.folder(elicitation)))
            .await?;
        let mut removed = 0;
        for object in listed.objects {
            if Some(&object.location) == keep.as_ref() {
                continue;
            }
            match self.store.delete(&object.location).await {
                Ok(()) => removed += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(removed)
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

    fn id(n: u8) -> ElicitationId {
        ElicitationId::v7(time::OffsetDateTime::now_utc(), [n; 10])
    }

    #[test]
    fn upload_ids_name_their_elicitation_and_nothing_else_parses() {
        let e = id(1);
        let upload_id = format!("{}{}", e.as_uuid().simple(), "ab".repeat(16));
        assert_eq!(
            parse_upload_id(&upload_id),
            Some((e, "ab".repeat(16).as_str()))
        );
        for bad in [
            "",
            "../x",
            &upload_id.to_uppercase(),
            &upload_id[..63],
            &format!("{upload_id}0"),
            &format!("{}/{}", &upload_id[..31], &upload_id[32..]),
        ] {
            assert_eq!(parse_upload_id(bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn a_file_round_trips_and_is_removed_with_its_elicitation() {
        let dir = std::env::temp_dir().join(format!("mcp-uploads-{}", std::process::id()));
        let uploads = Uploads::open(&UploadsConfig::dir(&dir)).unwrap();
        let (e, other) = (id(1), id(2));
        let up = uploads
            .save(e, "r.txt", Some("text/plain"), Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert_eq!(up.size_bytes, 5);
        assert_eq!(
            up.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(parse_upload_id(&up.upload_id).map(|(e, _)| e), Some(e));
        assert_eq!(
            uploads.read(&up.upload_id).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(uploads.read("../x").await.unwrap(), None);
        let stray = uploads
            .save(e, "old.txt", None, Bytes::from_static(b"old"))
            .await
            .unwrap();
        let elsewhere = uploads
            .save(other, "o.txt", None, Bytes::from_static(b"o"))
            .await
            .unwrap();
        // Keeping the recorded answer removes only the stray one.
        assert_eq!(uploads.remove_for(e, Some(&up.upload_id)).await.unwrap(), 1);
        assert_eq!(uploads.read(&stray.upload_id).await.unwrap(), None);
        assert!(uploads.read(&up.upload_id).await.unwrap().is_some());
        assert_eq!(uploads.remove_for(e, None).await.unwrap(), 1);
        assert_eq!(uploads.read(&up.upload_id).await.unwrap(), None);
        assert!(uploads.read(&elsewhere.upload_id).await.unwrap().is_some());
        let _ = std::fs::remove_dir_all(dir);
    }
}
