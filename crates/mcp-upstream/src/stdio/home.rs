//! A module process's own `HOME`: a directory made for one process life under the system's
//! temporary directory, closed to everyone but the module's user, removed when that life
//! ends.
//!
//! A gateway that is killed (`SIGKILL`, the OOM killer, a crash) cannot remove its modules'
//! homes, and what a module wrote there (caches, tokens) would stay in the shared temporary
//! directory. So each home has a lock file beside it, `<home>.lock`, of the gateway's user,
//! locked (`flock`) for as long as the home is in use: a lock ends with the process that
//! holds it, however that process ends. A gateway's first home sweeps the directory: a home
//! whose lock file it can lock is one whose gateway is gone, and it is removed with its lock
//! file. Locks hold across instances that share the directory (containers included), where
//! process ids would not.
//!
//! A lock file is locked under a random name of its own, which no sweep looks at and which
//! tells nothing of its home's, and renamed into place only once its home was made; so no
//! sweep finds the lock of a home in use unlocked, and a name someone takes meanwhile is
//! given up for another. A sweep runs on a thread of its own (no module's start waits for
//! it) and looks only at lock files that are plain files of the gateway's own user: one
//! another user put in the shared directory is passed over, and so is its home; a link or
//! a file put in a dead home's place is removed, not followed.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How every home's name starts.
const PREFIX: &str = "mcp-gateway-home-";
/// How a home's lock file's name ends (after the home's name).
const LOCK: &str = ".lock";

/// A module process's own `HOME`, removed (then its lock file) when dropped.
pub(super) struct PrivateHome {
    path: PathBuf,
    lock: PathBuf,
    /// Locked for as long as the home is in use.
    held: File,
}

impl PrivateHome {
    /// A new home under the system's temporary directory, owned by `uid:gid` and closed to
    /// everyone else. The first of a process sweeps the homes of gateways that are gone.
    pub(super) fn create(module: &str, uid: u32, gid: u32) -> io::Result<PrivateHome> {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let dir = std::env::temp_dir();
        let home = PrivateHome::create_in(&dir, module, uid, gid)?;
        SWEPT.call_once(|| {
            // On a thread of its own: a sweep reads the whole directory and may remove much,
            // which no module's start (on the async runtime) waits for.
            if let Ok(owner) = home.held.metadata().map(|m| m.uid()) {
                std::thread::spawn(move || sweep(&dir, owner));
            }
        });
        Ok(home)
    }

    /// The directory (the module's `HOME`).
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// A new home in `dir`. Its name is random and made exclusively, so nothing prepared in
    /// the shared directory beforehand is used; a name someone else took meanwhile (the
    /// home's, or its lock file's) is given up for another.
    fn create_in(dir: &Path, module: &str, uid: u32, gid: u32) -> io::Result<PrivateHome> {
        let safe: String = module
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(32)
            .collect();
        let mut attempts = 0;
        loop {
            let name = format!("{PREFIX}{safe}-{}", random_name()?);
            match PrivateHome::make(dir, &name, uid, gid) {
                Err(Failed::Taken(_)) if attempts < 8 => attempts += 1,
                Err(Failed::Taken(e) | Failed::Other(e)) => return Err(e),
                Ok(home) => return Ok(home),
            }
        }
    }

    fn make(dir: &Path, name: &str, uid: u32, gid: u32) -> Result<PrivateHome, Failed> {
        // Locked under a name of its own, which tells nothing of the home's and which no
        // sweep looks at (it does not start with the prefix).
        let fresh = dir.join(format!(
            ".mcp-gateway-lock-{}",
            random_name().map_err(Failed::Other)?
        ));
        let held = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&fresh)
            .map_err(Failed::Taken)?;
        if let Err(e) = held.try_lock() {
            let _ = std::fs::remove_file(&fresh);
            return Err(Failed::Other(e.into()));
        }
        let path = dir.join(name);
        if let Err(e) = DirBuilder::new().mode(0o700).create(&path) {
            let _ = std::fs::remove_file(&fresh);
            return Err(Failed::Taken(e));
        }
        // In place only now that it is locked and the home is made (and so ours). Something
        // put at the lock's name meanwhile makes this fail, and another name is tried.
        let lock = dir.join(format!("{name}{LOCK}"));
        if let Err(e) = std::fs::rename(&fresh, &lock) {
            let _ = std::fs::remove_dir(&path);
            let _ = std::fs::remove_file(&fresh);
            return Err(Failed::Taken(e));
        }
        let home = PrivateHome { path, lock, held };
        // Its mode is set while it is still the gateway's user's: once it is the module
        // user's, a process of that user could put a symlink in its place (the temporary
        // directory is sticky, not closed), and a chmod would follow it.
        std::fs::set_permissions(&home.path, std::fs::Permissions::from_mode(0o700))
            .map_err(Failed::Other)?;
        std::os::unix::fs::lchown(&home.path, Some(uid), Some(gid)).map_err(Failed::Other)?;
        Ok(home)
    }
}

/// Why a home was not made: a name that was taken (another is tried), or anything else.
enum Failed {
    Taken(io::Error),
    Other(io::Error),
}

impl Drop for PrivateHome {
    fn drop(&mut self) {
        if let Err(e) = remove(&self.path, &self.lock) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove a module's home directory");
        }
    }
}

/// Removes `home`, then its `lock` file. Something a module put in the home's place (a
/// link, a file) is removed, not followed. Where the home cannot be removed, its lock file
/// stays, so that a later sweep tries again.
fn remove(home: &Path, lock: &Path) -> io::Result<()> {
    let removed = match std::fs::symlink_metadata(home) {
        Ok(found) if found.is_dir() => std::fs::remove_dir_all(home),
        Ok(_) => std::fs::remove_file(home),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    match std::fs::remove_file(lock) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes the homes in `dir` whose lock files, plain files of `owner`'s, can be locked:
/// their gateways are gone. Gives how many.
fn sweep(dir: &Path, owner: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut swept = 0;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(home) = file_name
            .to_str()
            .and_then(|name| name.strip_suffix(LOCK))
            .filter(|home| home.starts_with(PREFIX))
        else {
            continue;
        };
        let lock = entry.path();
        // Not followed where it is a link; another user's is not ours to judge.
        match std::fs::symlink_metadata(&lock) {
            Ok(found) if found.file_type().is_file() && found.uid() == owner => {}
            _ => continue,
        }
        let Ok(file) = File::open(&lock) else {
            continue;
        };
        if file.try_lock().is_err() {
            continue;
        }
        if let Err(e) = remove(&dir.join(home), &lock) {
            tracing::warn!(home, error = %e, "cannot remove the home of a module whose gateway is gone");
            continue;
        }
        swept += 1;
    }
    if swept > 0 {
        tracing::info!(swept, dir = %dir.display(), "removed the homes of module processes whose gateway is gone");
    }
    swept
}

/// Sixteen random hex digits for a name made exclusively (the system's random source; its
/// failure is an error, never a guessable name).
fn random_name() -> io::Result<String> {
    mcp_random::hex_token::<8>().map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of the test's own, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let path = std::env::temp_dir()
                .join(format!("mcp-home-test-{name}-{}", random_name().unwrap()));
            std::fs::create_dir(&path).unwrap();
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A process killed when dropped, should a test fail before it kills it.
    struct Holder(std::process::Child);

    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn ids(dir: &Path) -> (u32, u32) {
        let found = std::fs::metadata(dir).unwrap();
        (found.uid(), found.gid())
    }

    fn locked_elsewhere(lock: &Path) -> bool {
        File::open(lock).unwrap().try_lock().is_err()
    }

    /// What a gateway killed while its module ran leaves: the home with what the module
    /// wrote, and its lock file, locked by nobody.
    fn left_behind(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let home = dir.join(format!("{PREFIX}{name}"));
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("token"), "secret").unwrap();
        let lock = dir.join(format!("{PREFIX}{name}{LOCK}"));
        std::fs::write(&lock, "").unwrap();
        (home, lock)
    }

    #[test]
    fn a_home_is_closed_locked_while_in_use_and_removed_with_its_lock_when_dropped() {
        let dir = Scratch::new("made");
        let (uid, gid) = ids(&dir.0);
        let home = PrivateHome::create_in(&dir.0, "notes/v2", uid, gid).unwrap();
        let name = home
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(name.starts_with("mcp-gateway-home-notes_v2-"), "{name}");
        let found = std::fs::metadata(home.path()).unwrap();
        assert_eq!(found.mode() & 0o777, 0o700);
        let lock = dir.0.join(format!("{name}.lock"));
        assert!(locked_elsewhere(&lock), "locked while in use");
        assert_eq!(sweep(&dir.0, uid), 0, "a home in use is not swept");
        assert!(home.path().is_dir());
        std::fs::write(home.path().join("cache"), "x").unwrap();
        let path = home.path().to_owned();
        drop(home);
        assert!(!path.exists() && !lock.exists());
        assert_eq!(
            std::fs::read_dir(&dir.0).unwrap().count(),
            0,
            "nothing else left"
        );
    }

    #[test]
    fn a_sweep_removes_the_homes_whose_gateway_is_gone_and_nothing_else() {
        let dir = Scratch::new("sweep");
        let (uid, gid) = ids(&dir.0);
        let live = PrivateHome::create_in(&dir.0, "live", uid, gid).unwrap();
        let (dead, dead_lock) = left_behind(&dir.0, "dead-1");
        let (_, bare_lock) = left_behind(&dir.0, "bare-2");
        std::fs::remove_dir_all(dir.0.join(format!("{PREFIX}bare-2"))).unwrap();
        // Being made: its lock not yet in place under its name.
        let making = dir.0.join(format!("{PREFIX}new-3"));
        std::fs::create_dir(&making).unwrap();
        std::fs::write(dir.0.join(format!(".{PREFIX}new-3{LOCK}")), "").unwrap();
        // A lock file that is a link: not followed, not judged.
        let linked = dir.0.join(format!("{PREFIX}link-4"));
        std::fs::create_dir(&linked).unwrap();
        let target = dir.0.join("target");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, dir.0.join(format!("{PREFIX}link-4{LOCK}"))).unwrap();
        // A dead home a module replaced with a file.
        let (filed, filed_lock) = left_behind(&dir.0, "file-6");
        std::fs::remove_dir_all(&filed).unwrap();
        std::fs::write(&filed, "not a directory").unwrap();
        // A home and lock of another name pattern.
        let other = dir.0.join("mcp-gateway-uploads-0");
        std::fs::create_dir(&other).unwrap();

        assert_eq!(
            sweep(&dir.0, uid + 1),
            0,
            "another user's lock files are passed over"
        );
        assert!(dead.is_dir() && dead_lock.exists() && bare_lock.exists());

        assert_eq!(sweep(&dir.0, uid), 3);
        assert!(!filed.exists() && !filed_lock.exists());
        assert!(
            !dead.exists() && !dead_lock.exists(),
            "the dead gateway's home is gone"
        );
        assert!(!bare_lock.exists());
        assert!(
            live.path().is_dir()
                && locked_elsewhere(&dir.0.join(format!(
                    "{}{LOCK}",
                    live.path().file_name().unwrap().to_str().unwrap()
                )))
        );
        assert!(making.is_dir() && dir.0.join(format!(".{PREFIX}new-3{LOCK}")).exists());
        assert!(linked.is_dir() && target.exists());
        assert!(other.is_dir());
    }

    /// A real process holds a home's lock, and is killed: the home is kept while it lives
    /// and swept once it is gone.
    #[test]
    fn a_home_is_swept_once_the_process_holding_its_lock_is_killed() {
        let dir = Scratch::new("killed");
        let (uid, _) = ids(&dir.0);
        let (home, lock) = left_behind(&dir.0, "killed-5");
        // The shell's descriptor 9, locked by util-linux's flock, is `sleep`'s once the shell
        // becomes it: the lock lives exactly as long as the process killed below.
        let mut holder = Holder(
            std::process::Command::new("sh")
                .args(["-c", "exec 9<>\"$0\" && flock -x 9 && exec sleep 600"])
                .arg(&lock)
                .spawn()
                .unwrap(),
        );
        // It holds the lock once the lock cannot be taken here.
        let held = (0..2_000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            locked_elsewhere(&lock)
        });
        assert!(held, "the holder took the lock");
        assert_eq!(sweep(&dir.0, uid), 0);
        assert!(home.is_dir());
        holder.0.kill().unwrap();
        holder.0.wait().unwrap();
        assert_eq!(sweep(&dir.0, uid), 1);
        assert!(!home.exists() && !lock.exists());
    }

    /// Something put at a home's lock name between the home's making and its lock's
    /// placing: that name is given up, and nothing of it is left.
    #[test]
    fn a_name_taken_meanwhile_is_given_up_and_nothing_is_left() {
        let dir = Scratch::new("taken");
        let (uid, gid) = ids(&dir.0);
        let name = format!("{PREFIX}taken-7");
        std::fs::create_dir(dir.0.join(format!("{name}{LOCK}"))).unwrap();
        assert!(matches!(
            PrivateHome::make(&dir.0, &name, uid, gid),
            Err(Failed::Taken(_))
        ));
        let left: Vec<_> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from(format!("{name}{LOCK}"))]);
    }

    /// A process's first home sweeps the system's temporary directory, on a thread of its
    /// own.
    #[test]
    fn the_first_home_of_a_process_sweeps_the_temporary_directory() {
        let tmp = std::env::temp_dir();
        let (uid, gid) = ids(&Scratch::new("owner").0);
        let (dead, dead_lock) = left_behind(&tmp, &format!("first-{}", random_name().unwrap()));
        let home = PrivateHome::create("first", uid, gid).unwrap();
        let swept = (0..2_000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            !dead.exists() && !dead_lock.exists()
        });
        assert!(swept, "the dead home in {} was swept", tmp.display());
        assert!(home.path().is_dir());
    }
}
