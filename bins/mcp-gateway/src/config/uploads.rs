//! `[uploads]`: where files answering `file_upload` elicitations are kept.

use crate::users;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// `[uploads]`: where files answering `file_upload` elicitations are kept.
#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct UploadsConfig {
    /// A directory (default: `mcp-gateway-uploads-<uid>` in the system's temporary
    /// directory: each user's own).
    pub(crate) dir: Option<std::path::PathBuf>,
    /// An S3-compatible bucket instead of a directory (`[uploads.s3]`).
    pub(crate) s3: Option<S3Config>,
    /// A key prefix inside the directory or bucket (default `uploads`).
    pub(crate) prefix: Option<String>,
    /// The largest file taken, in bytes (default 25 MiB), whatever an elicitation allows.
    pub(crate) max_bytes: Option<u64>,
}

/// `[uploads.s3]`: an S3-compatible bucket. Credentials come from the environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never this file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct S3Config {
    pub(crate) bucket: String,
    /// The service's URL when it is not AWS (MinIO, Ceph, …).
    pub(crate) endpoint: Option<String>,
    pub(crate) region: Option<String>,
}

impl UploadsConfig {
    /// The blob store this section configures.
    pub(crate) fn resolve(&self) -> Result<mcp_uploads::UploadsConfig> {
        let location = match (&self.dir, &self.s3) {
            (Some(_), Some(_)) => {
                bail!("[uploads] has both dir and s3: files are kept in one place; remove one")
            }
            (_, Some(s3)) => {
                if s3.bucket.trim().is_empty() {
                    bail!("[uploads.s3] bucket is empty");
                }
                if let Some(endpoint) = &s3.endpoint
                    && !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
                {
                    bail!("[uploads.s3] endpoint {endpoint:?} must be an http:// or https:// URL");
                }
                mcp_uploads::BlobLocation::S3 {
                    bucket: s3.bucket.clone(),
                    endpoint: s3.endpoint.clone(),
                    region: s3.region.clone(),
                }
            }
            (dir, None) => mcp_uploads::BlobLocation::Dir(dir.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("mcp-gateway-uploads-{}", users::gateway_uid()))
            })),
        };
        let prefix = self.prefix.clone().unwrap_or_else(|| "uploads".into());
        if prefix.is_empty()
            || !prefix.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            })
        {
            bail!(
                "[uploads] prefix {prefix:?} must be path segments of letters, digits, '-', '_' or '.' separated by '/'"
            );
        }
        let max_bytes = self.max_bytes.unwrap_or(mcp_uploads::DEFAULT_MAX_BYTES);
        if max_bytes == 0 {
            bail!("[uploads] max_bytes must be at least 1");
        }
        Ok(mcp_uploads::UploadsConfig {
            location,
            prefix,
            max_bytes,
        })
    }
}
