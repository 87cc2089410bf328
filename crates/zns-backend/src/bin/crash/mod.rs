//! The parent side of the kill -9 crash runs (`zns-ftl-crash`,
//! `zns-nameless-crash`): one round starts this executable as a writer,
//! waits for it to mount, reads what it reports for a while and kills it.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zftl_zns::ZnsDevice;

pub fn self_exe() -> Result<std::path::PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))
}

/// Starts this executable with `args`, waits (up to 300 s) for it to print
/// `mounted`, hands every line it prints to `line` for `delay`, then kills
/// it (SIGKILL) and hands on the lines it printed before it died (still in
/// the pipe). Returns how it ended.
pub fn kill_round(
    args: &[String],
    delay: Duration,
    mut line: impl FnMut(&str),
) -> Result<ExitStatus, String> {
    let mut child = Command::new(self_exe()?)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the writer: {e}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait for the mount (recovery of the previous round's crash).
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(l) if l == "mounted" => {}
        Ok(l) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("writer said {l:?} instead of mounted"));
        }
        Err(_) => {
            let _ = child.kill();
            let status = child.wait();
            return Err(format!("writer did not mount: {status:?}"));
        }
    }
    let deadline = Instant::now() + delay;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) => line(&l),
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait();
                return Err(format!(
                    "writer stopped on its own before the kill: {status:?}"
                ));
            }
        }
    }
    child
        .kill()
        .map_err(|e| format!("kill -9 of the writer: {e}"))?;
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let _ = reader.join();
    while let Ok(l) = rx.try_recv() {
        line(&l);
    }
    Ok(status)
}

/// How long a busy device is waited for after a kill. The kernel tears the
/// dead process's io_uring down asynchronously, and a 6.1 kernel cannot
/// cancel NVMe passthrough commands in flight: the ring, and with it the
/// device's file and its lock, lives until every one of them completes. A
/// command the (emulated) controller never completes holds it until the
/// NVMe driver's timeout (30 s) aborts it and, when the abort times out
/// too, resets the controller (another 30 s) and cancels it.
pub const BUSY_WAIT: Duration = Duration::from_secs(150);

/// NVMe "host path error": what the kernel answers while it resets the
/// controller (after a command timed out), before the namespace is back.
const NVME_SC_HOST_PATH_ERROR: u16 = 0x370;

/// Open errors that end by themselves: the dead writer's ring still holds
/// the device, or the controller is being reset.
fn transient(e: &zftl_zns::OpenError) -> bool {
    match e {
        zftl_zns::OpenError::Busy { .. } => true,
        zftl_zns::OpenError::Nvme { status, .. } => status & 0x7ff == NVME_SC_HOST_PATH_ERROR,
        _ => false,
    }
}

/// Opens the device, waiting while it is busy (see [`BUSY_WAIT`]);
/// `program` names the caller in the note it prints after a wait.
pub fn open_device(dev: &str, program: &str) -> Result<ZnsDevice, String> {
    let t0 = Instant::now();
    let mut busy = false;
    loop {
        match ZnsDevice::open(dev) {
            Err(e) if transient(&e) && t0.elapsed() < BUSY_WAIT => {
                busy = true;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.to_string()),
            Ok(d) => {
                let waited = t0.elapsed();
                if busy {
                    eprintln!(
                        "{program}: {dev} was busy for {:.2} s after the kill",
                        waited.as_secs_f64()
                    );
                }
                return Ok(d);
            }
        }
    }
}
