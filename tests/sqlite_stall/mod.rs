//! A SQLite database stalled from another process, for the store-stall test
//! and `examples/store_stall.rs` (which includes this file).
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Stalls a SQLite database in WAL mode as a hung disk or a stuck process
/// would, until dropped: another process (python3, which CI has) holds the
/// WAL-index locks every reader needs (byte 122, recovery, and 123-127, the
/// read marks, of the `-shm` file). SQLite readers, and so writers, retry
/// for about 10 s and then fail.
pub struct SqliteStall {
    child: std::process::Child,
}

impl SqliteStall {
    /// Holds the locks of the database at `db` (its `-shm` file exists once
    /// a connection has opened it).
    pub fn hold(db: &std::path::Path) -> SqliteStall {
        use std::io::BufRead as _;
        const SCRIPT: &str = r#"
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
deadline = time.time() + 10
while True:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 6, 122)
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.01)
print("locked", flush=True)
sys.stdin.read()
"#;
        let shm = format!("{}-shm", db.display());
        let mut child = std::process::Command::new("python3")
            .args(["-c", SCRIPT, &shm])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 holds the stall's locks");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked", "the stall holder could not lock {shm}");
        SqliteStall { child }
    }
}

impl Drop for SqliteStall {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
