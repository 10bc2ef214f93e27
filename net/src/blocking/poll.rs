//! poll(2) over a few descriptors, for the blocking client's waits.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Waits until one of `fds` is readable (or writable, where its flag asks for that too), or
/// `timeout` passes (`None`: no limit). Which are ready, by position.
pub(super) fn wait(fds: &[(RawFd, bool)], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, write)| libc::pollfd {
            fd,
            events: libc::POLLIN | if write { libc::POLLOUT } else { 0 },
            revents: 0,
        })
        .collect();
    // Rounded up: a wait of 0.3 ms must not become a busy loop of zero-timeout polls.
    let timeout = timeout.map_or(-1, |t| {
        t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
    });
    loop {
        // SAFETY: `polled` is a live, correctly sized array of pollfd for the call's duration.
        let ready =
            unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, timeout) };
        if ready >= 0 {
            return Ok(polled.iter().map(|p| p.revents != 0).collect());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
