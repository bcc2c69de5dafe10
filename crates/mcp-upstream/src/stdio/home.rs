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
//!
//! A gateway killed while it made a home (between the home's directory and its lock's
//! rename) leaves the lock under its fresh name and an empty directory without a lock: a
//! sweep removes a fresh lock no one holds and such a directory, once either is a minute
//! old (the making takes microseconds).
//!
//! No home is made in a temporary directory another user could rearrange (one of another
//! user, or one others may write in that is not sticky): the module fails to start, saying
//! why.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How every home's name starts.
const PREFIX: &str = "mcp-gateway-home-";
/// How a home's lock file's name ends (after the home's name).
const LOCK: &str = ".lock";
/// How a lock file's name starts while its home is being made (a random name follows).
const FRESH: &str = ".mcp-gateway-lock-";
/// How old a home without its lock file, or a lock file under its fresh name, must be for a
/// sweep to take it for what a gateway killed while making a home left: the making takes
/// microseconds.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

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
        let home = PrivateHome::create_in(&std::env::temp_dir(), module, uid, gid)?;
        SWEPT.call_once(|| {
            // On a thread of its own: a sweep reads the whole directory and may remove much,
            // which no module's start (on the async runtime) waits for. The directory the
            // home was made in: the temporary directory's path with no link left in it.
            if let Some(dir) = home.path.parent().map(Path::to_path_buf) {
                let owner = rustix::process::geteuid().as_raw();
                std::thread::spawn(move || sweep(&dir, owner));
            }
        });
        Ok(home)
    }

    /// The directory (the module's `HOME`).
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// A new home in `dir` (its path with no link left in it: [`settled`]). Its name is
    /// random and made exclusively, so nothing prepared in the shared directory beforehand
    /// is used; a name someone else took meanwhile (the home's, or its lock file's) is
    /// given up for another.
    fn create_in(dir: &Path, module: &str, uid: u32, gid: u32) -> io::Result<PrivateHome> {
        let dir = &settled(dir)?;
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
        let fresh = dir.join(format!("{FRESH}{}", random_name().map_err(Failed::Other)?));
        let path = dir.join(name);
        // What a making that stops short leaves is taken back: the fresh lock, and the
        // directory once made (empty: nothing was given to the module yet).
        let undo = |failed: Failed, made: bool| {
            if made {
                let _ = std::fs::remove_dir(&path);
            }
            let _ = std::fs::remove_file(&fresh);
            Err(failed)
        };
        let held = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&fresh)
            .map_err(Failed::Taken)?;
        match held.try_lock() {
            Ok(()) => {}
            // Held by someone else (a sweep judging it at this very moment): another name.
            Err(std::fs::TryLockError::WouldBlock) => {
                return undo(Failed::Taken(io::ErrorKind::WouldBlock.into()), false);
            }
            Err(std::fs::TryLockError::Error(e)) => return undo(Failed::Other(e), false),
        }
        if let Err(e) = DirBuilder::new().mode(0o700).create(&path) {
            return undo(Failed::Taken(e), false);
        }
        // The directory just made, held open: it is given to the module's user through this
        // descriptor, never by its path, which a link could be put at.
        let made = match open_no_link(&path, true) {
            Ok(made) => made,
            Err(e) => return undo(Failed::Other(e), true),
        };
        // In place only now that it is locked and the home is made (and so ours). Something
        // put at the lock's name meanwhile makes this fail, and another name is tried.
        let lock = dir.join(format!("{name}{LOCK}"));
        if let Err(e) = std::fs::rename(&fresh, &lock) {
            return undo(Failed::Taken(e), true);
        }
        let home = PrivateHome { path, lock, held };
        // The lock at its name is the one held, and the home at its name the one made:
        // else something was put in their place meanwhile (possible only where this
        // gateway stood still long enough for a sweep to take them for abandoned).
        let lock_now = std::fs::symlink_metadata(&home.lock).map_err(Failed::Other)?;
        if !same_file(&lock_now, &home.held.metadata().map_err(Failed::Other)?) {
            return Err(Failed::Taken(io::Error::other(
                "the home's lock was replaced",
            )));
        }
        hand_over(&home.path, &made, uid, gid).map_err(Failed::Other)?;
        Ok(home)
    }
}

/// `dir` with no link left in its path, where no other user can change what that path
/// names: every directory of it passes [`closed_to_others`]. Else an error naming the
/// directory and why.
fn settled(dir: &Path) -> io::Result<PathBuf> {
    let refused =
        |why: String| io::Error::other(format!("the temporary directory {}: {why}", dir.display()));
    let real = std::fs::canonicalize(dir).map_err(|e| refused(e.to_string()))?;
    let me = rustix::process::geteuid().as_raw();
    for at in real.ancestors() {
        let found = std::fs::metadata(at).map_err(|e| refused(format!("{}: {e}", at.display())))?;
        closed_to_others(found.mode(), found.uid(), me)
            .map_err(|why| refused(format!("{}: {why}", at.display())))?;
    }
    Ok(real)
}

/// Whether a directory of this mode and owner is one where no other user can move or
/// replace what is in it (`me`: the gateway's user): its owner is root or the gateway's
/// user, and no one else may write in it, or it is sticky (as `/tmp` is: its entries moved
/// or removed only by their owners). In any other, a module's user could put its own
/// directory, or a link, where a home is being made, or move a home's lock file away; so
/// no home is made under it. Else, why.
fn closed_to_others(mode: u32, owner: u32, me: u32) -> Result<(), String> {
    if owner != 0 && owner != me {
        return Err(format!(
            "it belongs to uid {owner}, who could move or replace what the gateway makes under it; set TMPDIR to a sticky directory of root's (mode 1777, as /tmp is)"
        ));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "other users may write in it (mode {:o}) and it is not sticky, so they could move or replace what the gateway makes under it; make it sticky (chmod +t), as /tmp is",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Gives the home made at `path`, open as `made`, to `uid:gid` with mode 0700 through the
/// descriptor; an error, and nothing given, where something else is at `path` now.
fn hand_over(path: &Path, made: &File, uid: u32, gid: u32) -> io::Result<()> {
    let now = std::fs::symlink_metadata(path)?;
    if !same_file(&now, &made.metadata()?) {
        return Err(io::Error::other(format!(
            "{} was replaced while it was made",
            path.display()
        )));
    }
    made.set_permissions(std::fs::Permissions::from_mode(0o700))?;
    std::os::unix::fs::fchown(made, Some(uid), Some(gid))
}

/// Whether two descriptions are of the same file.
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// `path` opened to read, never through a link at its name and never waiting (a FIFO put
/// there opens at once): a directory where `directory`, else anything.
fn open_no_link(path: &Path, directory: bool) -> io::Result<File> {
    use rustix::fs::OFlags;
    let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
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
/// their gateways are gone. Removes too what a gateway killed while making a home left
/// ([`abandoned`]). Gives how many it removed.
fn sweep(dir: &Path, owner: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut swept = 0;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        let Some(home) = name
            .strip_suffix(LOCK)
            .filter(|home| home.starts_with(PREFIX))
        else {
            swept += usize::from(abandoned(dir, name, owner));
            continue;
        };
        let lock = entry.path();
        // Held until the home and its lock are removed.
        let Some(_held) = unheld(&lock, owner, None) else {
            continue;
        };
        if let Err(e) = remove(&dir.join(home), &lock) {
            tracing::warn!(home, error = %e, "cannot remove the home of a module whose gateway is gone");
            continue;
        }
        swept += 1;
    }
    if swept > 0 {
        tracing::info!(swept, dir = %dir.display(), "removed the homes of module processes whose gateway is gone (or was killed while making them)");
    }
    swept
}

/// `lock` opened and locked where it is a plain file of `owner`'s (older than `older_than`,
/// where given) that no process holds locked: its holder is gone. Not followed where it is
/// a link (nor opened where it is anything but that file when opened); another user's is
/// not ours to judge.
fn unheld(lock: &Path, owner: u32, older_than: Option<std::time::Duration>) -> Option<File> {
    let judged = |found: &std::fs::Metadata| {
        found.file_type().is_file()
            && found.uid() == owner
            && older_than.is_none_or(|age| older(found, age))
    };
    let found = std::fs::symlink_metadata(lock).ok().filter(judged)?;
    let file = open_no_link(lock, false).ok()?;
    let opened = file.metadata().ok()?;
    (judged(&opened) && same_file(&found, &opened) && file.try_lock().is_ok()).then_some(file)
}

/// Whether what `found` describes was last changed longer than `age` ago.
fn older(found: &std::fs::Metadata, age: std::time::Duration) -> bool {
    found
        .modified()
        .is_ok_and(|at| at.elapsed().is_ok_and(|passed| passed > age))
}

/// Removes `name` in `dir` where it is what a gateway killed while making a home left, a
/// minute old or more and `owner`'s: a lock under its fresh name that no one holds, or an
/// empty home directory without its lock file (its lock is put in place before the home is
/// given to the module's user, so until then the home is `owner`'s). Gives whether it did.
fn abandoned(dir: &Path, name: &str, owner: u32) -> bool {
    let path = dir.join(name);
    if name.starts_with(FRESH) {
        // Removed while it is held: its maker, were it only standing still, finds it held
        // and takes another name.
        unheld(&path, owner, Some(ABANDONED_AFTER))
            .is_some_and(|_held| std::fs::remove_file(&path).is_ok())
    } else if name.starts_with(PREFIX) {
        let found = std::fs::symlink_metadata(&path);
        found.is_ok_and(|found| {
            found.is_dir() && found.uid() == owner && older(&found, ABANDONED_AFTER)
        }) && std::fs::symlink_metadata(dir.join(format!("{name}{LOCK}"))).is_err()
            // Only an empty one: a home a module used has a lock file.
            && std::fs::remove_dir(&path).is_ok()
    } else {
        false
    }
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

    /// Sets a file's (or a link's own) times to an hour ago.
    fn aged(path: &Path) {
        let then = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - 3600;
        let at = rustix::fs::Timespec {
            tv_sec: then,
            tv_nsec: 0,
        };
        rustix::fs::utimensat(
            rustix::fs::CWD,
            path,
            &rustix::fs::Timestamps {
                last_access: at,
                last_modification: at,
            },
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
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
    fn only_a_directory_no_other_user_can_rearrange_takes_homes() {
        let (root, me, other) = (0, 1000, 65534);
        for (mode, owner) in [
            (0o1777, root),
            (0o1777, me),
            (0o700, me),
            (0o755, root),
            (0o1770, me),
        ] {
            assert_eq!(
                closed_to_others(mode, owner, me),
                Ok(()),
                "{mode:o} {owner}"
            );
        }
        for (mode, owner, said) in [
            (0o777, root, "not sticky"),
            (0o773, me, "not sticky"),
            (0o757, root, "not sticky"),
            (0o770, me, "not sticky"),
            (0o775, root, "not sticky"),
            (0o1777, other, "belongs to uid 65534"),
            (0o700, other, "belongs to uid 65534"),
        ] {
            let why = closed_to_others(mode, owner, me).unwrap_err();
            assert!(why.contains(said), "{mode:o} {owner}: {why}");
        }
        // Root's own directory, for a gateway run as root.
        assert_eq!(closed_to_others(0o700, root, root), Ok(()));
    }

    #[test]
    fn no_home_is_made_in_a_directory_others_may_write_in_that_is_not_sticky() {
        let dir = Scratch::new("open");
        let (uid, gid) = ids(&dir.0);
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = PrivateHome::create_in(&dir.0, "open", uid, gid)
            .err()
            .expect("refused");
        assert!(refused.to_string().contains("not sticky"), "{refused}");
        assert_eq!(
            std::fs::read_dir(&dir.0).unwrap().count(),
            0,
            "nothing made"
        );
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let home = PrivateHome::create_in(&dir.0, "sticky", uid, gid).unwrap();
        assert!(home.path().is_dir());
    }

    #[test]
    fn a_directory_above_that_others_may_rearrange_is_refused_too() {
        let above = Scratch::new("above");
        let (uid, gid) = ids(&above.0);
        let below = above.0.join("tmp");
        DirBuilder::new().mode(0o1777).create(&below).unwrap();
        std::fs::set_permissions(&below, std::fs::Permissions::from_mode(0o1777)).unwrap();
        // Sticky below, but whoever may write above may move `tmp` and put another there.
        std::fs::set_permissions(&above.0, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = PrivateHome::create_in(&below, "under", uid, gid)
            .err()
            .expect("refused");
        let said = refused.to_string();
        assert!(
            said.contains(&format!("{}: other users may write", above.0.display())),
            "{said}"
        );
        assert_eq!(
            std::fs::read_dir(&below).unwrap().count(),
            0,
            "nothing made"
        );
        std::fs::set_permissions(&above.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        PrivateHome::create_in(&below, "under", uid, gid).unwrap();
    }

    #[test]
    fn a_temporary_directory_named_by_a_link_is_used_by_what_it_names() {
        let dir = Scratch::new("linked");
        let (uid, gid) = ids(&dir.0);
        let real = dir.0.join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.0.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let home = PrivateHome::create_in(&link, "linked", uid, gid).unwrap();
        // Made by the resolved path: re-pointing the link later changes nothing of it.
        assert_eq!(
            home.path().parent(),
            Some(real.canonicalize().unwrap().as_path())
        );
        // A link into a directory others may rearrange is judged by where it leads.
        let open = dir.0.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::create_dir(open.join("tmp")).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::symlink(open.join("tmp"), dir.0.join("sneaky")).unwrap();
        let refused = PrivateHome::create_in(&dir.0.join("sneaky"), "x", uid, gid)
            .err()
            .expect("refused");
        assert!(refused.to_string().contains("not sticky"), "{refused}");
        // A directory that is not there is named.
        let gone = PrivateHome::create_in(&dir.0.join("gone"), "x", uid, gid)
            .err()
            .expect("refused");
        assert!(gone.to_string().contains("gone"), "{gone}");
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

    #[test]
    fn a_home_replaced_while_it_was_made_is_not_given_to_the_module() {
        let dir = Scratch::new("replaced");
        let (uid, gid) = ids(&dir.0);
        let path = dir.0.join(format!("{PREFIX}replaced-1"));
        DirBuilder::new().mode(0o750).create(&path).unwrap();
        let made = open_no_link(&path, true).unwrap();
        // What a sweep took for abandoned, and another put in its place: a directory, then
        // a link to one.
        std::fs::rename(&path, dir.0.join("moved")).unwrap();
        DirBuilder::new().mode(0o755).create(&path).unwrap();
        let refused = hand_over(&path, &made, uid, gid).unwrap_err();
        assert!(refused.to_string().contains("was replaced"), "{refused}");
        let untouched = std::fs::metadata(&path).unwrap();
        assert_eq!(untouched.mode() & 0o777, 0o755, "not made the module's");
        std::fs::remove_dir(&path).unwrap();
        std::os::unix::fs::symlink(dir.0.join("moved"), &path).unwrap();
        assert!(
            hand_over(&path, &made, uid, gid).is_err(),
            "a link is not the home"
        );
        // In its place, it is given (its mode through the descriptor).
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(dir.0.join("moved"), &path).unwrap();
        hand_over(&path, &made, uid, gid).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o700);
        // And a link at a home's name is never opened as the home.
        let link = dir.0.join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(open_no_link(&link, true).is_err());
    }

    #[test]
    fn what_a_gateway_killed_while_making_a_home_left_is_swept_once_a_minute_old() {
        let dir = Scratch::new("abandoned");
        let (uid, _) = ids(&dir.0);
        // What a maker killed between the home and the lock's rename left: its lock under
        // the fresh name, held by no one, and the empty home without its lock file.
        let fresh = dir.0.join(format!("{FRESH}00112233aabbccdd"));
        std::fs::write(&fresh, "").unwrap();
        aged(&fresh);
        let home = dir.0.join(format!("{PREFIX}killed-1"));
        std::fs::create_dir(&home).unwrap();
        aged(&home);
        // Being made now: young, they stay.
        let young_fresh = dir.0.join(format!("{FRESH}0000000000000001"));
        std::fs::write(&young_fresh, "").unwrap();
        let young_home = dir.0.join(format!("{PREFIX}making-2"));
        std::fs::create_dir(&young_home).unwrap();
        // An old fresh lock someone holds (a maker stopped for a minute) stays.
        let held = dir.0.join(format!("{FRESH}00000000000000ff"));
        std::fs::write(&held, "").unwrap();
        aged(&held);
        let holder = File::open(&held).unwrap();
        holder.lock().unwrap();
        // An old home without a lock file that is not empty is not one a making left.
        let used = dir.0.join(format!("{PREFIX}used-3"));
        std::fs::create_dir(&used).unwrap();
        std::fs::write(used.join("token"), "secret").unwrap();
        aged(&used);
        // Something at the lock's name, a dangling link even: the home is not judged here.
        let linked = dir.0.join(format!("{PREFIX}linked-4"));
        std::fs::create_dir(&linked).unwrap();
        aged(&linked);
        std::os::unix::fs::symlink("nowhere", dir.0.join(format!("{PREFIX}linked-4{LOCK}")))
            .unwrap();
        // A link in a home's place is not a home; nor is a link or a FIFO at a fresh lock's
        // name a lock (a FIFO would stop an open that waits).
        let link = dir.0.join(format!("{PREFIX}link-5"));
        std::os::unix::fs::symlink(&home, &link).unwrap();
        aged(&link);
        let fresh_link = dir.0.join(format!("{FRESH}000000000000000a"));
        std::os::unix::fs::symlink(&held, &fresh_link).unwrap();
        aged(&fresh_link);
        let fifo = dir.0.join(format!("{FRESH}000000000000000b"));
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        aged(&fifo);

        assert_eq!(sweep(&dir.0, uid + 1), 0, "another user's are passed over");
        assert!(fresh.exists() && home.exists());
        assert_eq!(sweep(&dir.0, uid), 2);
        assert!(!fresh.exists() && !home.exists());
        for stays in [&young_fresh, &young_home, &held, &used, &linked] {
            assert!(stays.exists(), "{}", stays.display());
        }
        for stays in [&link, &fresh_link, &fifo] {
            assert!(
                std::fs::symlink_metadata(stays).is_ok(),
                "{}",
                stays.display()
            );
        }
        drop(holder);
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
