//! The users stdio modules run as, and whether a user can read a file.
//!
//! A module is third-party code. When the gateway runs as root, a module run as root could
//! read the gateway's memory and every file, whatever else is done; so a root gateway starts
//! each stdio module as another user (`[[modules]] user`, by default `nobody`) and refuses
//! root. A gateway run as any other user can only start modules as itself: they are kept
//! from its `/proc` entries by non-dumpability, and from its secret files by the start-up
//! check that no module's user can read them (see docs/security.md).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Result, bail};
use mcp_upstream::stdio::RunAs;

/// The user a root gateway runs a module as when `user` is not given.
pub(crate) const DEFAULT_MODULE_USER: &str = "nobody";

/// The gateway's effective user id.
pub(crate) fn gateway_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The gateway's effective group id.
pub(crate) fn gateway_gid() -> u32 {
    rustix::process::getegid().as_raw()
}

/// A user: name and ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// The user named by `spec`: a name in `/etc/passwd`, a numeric uid (its group the passwd
/// entry's, else the same number), or `uid:gid`.
pub(crate) fn lookup(spec: &str) -> Result<User> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    lookup_in(spec, &passwd)
}

fn lookup_in(spec: &str, passwd: &str) -> Result<User> {
    let entries = passwd.lines().filter_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let _password = fields.next()?;
        let uid = fields.next()?.parse::<u32>().ok()?;
        let gid = fields.next()?.parse::<u32>().ok()?;
        Some(User {
            name: name.to_owned(),
            uid,
            gid,
        })
    });
    let numeric = |s: &str| s.parse::<u32>().ok();
    if let Some((uid, gid)) = spec.split_once(':') {
        let (Some(uid), Some(gid)) = (numeric(uid), numeric(gid)) else {
            bail!("user {spec:?} is not a name, a uid or uid:gid");
        };
        let name = entries
            .clone()
            .find(|u| u.uid == uid)
            .map_or_else(|| uid.to_string(), |u| u.name);
        return Ok(User { name, uid, gid });
    }
    if let Some(uid) = numeric(spec) {
        return Ok(entries
            .clone()
            .find(|u| u.uid == uid)
            .unwrap_or_else(|| User {
                name: uid.to_string(),
                uid,
                gid: uid,
            }));
    }
    match entries.clone().find(|u| u.name == spec) {
        Some(user) => Ok(user),
        None => {
            bail!("user {spec:?} is not in /etc/passwd (give a name from it, a uid, or uid:gid)")
        }
    }
}

/// Whom a stdio module runs as: `None` when it runs as the gateway's own user.
///
/// Under root: `spec`, by default [`DEFAULT_MODULE_USER`]; root itself is refused. As any
/// other user: only that user (a different one needs root).
pub(crate) fn module_user(module: &str, spec: Option<&str>) -> Result<Option<User>> {
    let own = gateway_uid();
    if own == 0 {
        let user = lookup(spec.unwrap_or(DEFAULT_MODULE_USER))
            .map_err(|e| anyhow::anyhow!("module {module:?}: {e:#}"))?;
        if user.uid == 0 {
            bail!(
                "module {module:?}: user {:?} is root; a module run as root can read the gateway's memory and keys, so a root gateway runs modules as another user (the default is {DEFAULT_MODULE_USER:?})",
                user.name
            );
        }
        if user.gid == 0 {
            bail!(
                "module {module:?}: user {:?} has root's group (gid 0), which opens what is root's group's; give it a group of its own (uid:gid)",
                user.name
            );
        }
        return Ok(Some(user));
    }
    match spec {
        None => Ok(None),
        Some(spec) => {
            let user = lookup(spec).map_err(|e| anyhow::anyhow!("module {module:?}: {e:#}"))?;
            if user.uid == own {
                Ok(None)
            } else {
                bail!(
                    "module {module:?}: user {spec:?}: the gateway runs as uid {own}, and only a gateway run as root can start a module as another user"
                )
            }
        }
    }
}

impl User {
    /// How the module's process runs as this user.
    pub(crate) fn run_as(&self, home: Option<&Path>) -> RunAs {
        RunAs {
            name: self.name.clone(),
            uid: self.uid,
            gid: self.gid,
            home: home.map(Path::to_path_buf),
        }
    }
}

/// Whether a process of `uid` with the one group `gid` (as a module runs: no supplementary
/// groups) can read `path`: every directory on the way is searchable by it, and the file
/// readable, by the permission bits — or it owns them, and could open them to itself (ACLs
/// are not read; a file a user could read through one counts as closed, so keep secret
/// files' ACLs empty).
pub(crate) fn readable_by(path: &Path, uid: u32, gid: u32) -> bool {
    if uid == 0 {
        return true;
    }
    // What the user owns it can open to itself (chmod), whatever its bits say now.
    let owns = |meta: &std::fs::Metadata| meta.uid() == uid;
    let Ok(real) = std::fs::canonicalize(path) else {
        return false;
    };
    let allows = |meta: &std::fs::Metadata, bit: u32| {
        let mode = meta.mode();
        if owns(meta) {
            true
        } else if meta.gid() == gid {
            mode & (bit << 3) != 0
        } else {
            mode & bit != 0
        }
    };
    for dir in real.ancestors().skip(1) {
        match std::fs::metadata(dir) {
            Ok(meta) if allows(&meta, 0o1) => {}
            _ => return false,
        }
    }
    std::fs::metadata(&real).is_ok_and(|meta| allows(&meta, 0o4))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nsvc:x:1001:1002::/home/svc:/bin/sh\nbroken line\n";

    #[test]
    fn users_are_named_numbered_or_given_with_their_group() {
        let user = |spec| lookup_in(spec, PASSWD).unwrap();
        assert_eq!(
            user("svc"),
            User {
                name: "svc".into(),
                uid: 1001,
                gid: 1002
            }
        );
        assert_eq!(
            user("1001").gid,
            1002,
            "a known uid takes its entry's group"
        );
        assert_eq!(
            user("4242"),
            User {
                name: "4242".into(),
                uid: 4242,
                gid: 4242
            }
        );
        assert_eq!(
            user("65534:7"),
            User {
                name: "nobody".into(),
                uid: 65534,
                gid: 7
            }
        );
        let unknown = lookup_in("mallory", PASSWD).unwrap_err().to_string();
        assert!(unknown.contains("not in /etc/passwd"), "{unknown}");
        assert!(lookup_in("1:x", PASSWD).is_err());
    }

    #[test]
    fn a_file_is_readable_by_its_bits_and_every_directory_on_the_way() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mcp-users-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "k").unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        let (owner, group) = (meta.uid(), meta.gid());
        let (stranger, stranger_group) = (owner.wrapping_add(4321), group.wrapping_add(4321));
        let mode = |m| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(m)).unwrap();

        mode(0o644);
        assert!(readable_by(&file, stranger, stranger_group));
        mode(0o640);
        assert!(!readable_by(&file, stranger, stranger_group));
        assert!(readable_by(&file, stranger, group), "the group may read it");
        mode(0o600);
        assert!(!readable_by(&file, stranger, group));
        mode(0o644);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(
            !readable_by(&file, stranger, stranger_group),
            "a closed directory on the way keeps the file closed"
        );
        assert!(!readable_by(&dir.join("missing"), stranger, stranger_group));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
