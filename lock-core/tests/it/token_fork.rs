//! Tokens are drawn from a per-thread buffer of OS randomness: a forked child
//! must not hand out the tokens its parent is about to use.

#![cfg(unix)]
#![allow(clippy::expect_used)] // test helpers

use lock_core::LockToken;

#[test]
fn a_forked_child_never_draws_the_parents_next_token() {
    // Fill this thread's buffer, so the child inherits unused tokens.
    let _first = LockToken::generate().expect("token");
    let mut fds = [0i32; 2];
    // SAFETY: a plain pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: the child only draws a token, writes it and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let bytes = LockToken::generate().map_or([0u8; 16], |t| *t.as_bytes());
        // SAFETY: writing 16 bytes from a live array, then leaving at once.
        unsafe {
            libc::write(fds[1], bytes.as_ptr().cast(), 16);
            libc::_exit(0);
        }
    }
    let mut child = [0u8; 16];
    // SAFETY: reading at most 16 bytes into a live array; reaping our child.
    let read = unsafe { libc::read(fds[0], child.as_mut_ptr().cast(), 16) };
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(read, 16, "the child wrote its token");
    let parent = LockToken::generate().expect("token");
    assert_ne!(child, [0u8; 16], "the child could draw a token");
    assert_ne!(
        &child,
        parent.as_bytes(),
        "parent and child drew the same token from the inherited buffer"
    );
}
